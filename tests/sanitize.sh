#!/usr/bin/env bash
# The test suite under ASan+UBSan, and the concurrent parts (loader, IO engine, staging)
# under TSan, as separate builds. CUDA and Python are off in these builds.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${STOKER_JOBS:-$(nproc)}
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_ENABLE_CUDA=OFF -DSTOKER_BUILD_PYTHON=OFF -DSTOKER_BUILD_BENCH=OFF)

echo "== asan+ubsan build"
cmake -S . -B build-asan "${common[@]}" -DSTOKER_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 -L cpu

echo "== tsan build (pipeline, IO, staging)"
# The loader's suites: the image path, token workers and kept windows, the skip policy,
# and stats() read from another thread while epochs run; a remote dataset's shards held
# and released across threads, and records fetched by the ranged-GET engine's workers.
tsan_tests=(loader_test loader_tokens_test loader_skip_test loader_report_test io_test remote_loader_test)
[ -f tests/stage_test.cc ] && tsan_tests+=(stage_test)
cmake -S . -B build-tsan "${common[@]}" -DSTOKER_SANITIZE=thread >/dev/null
cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}" >/dev/null
for t in "${tsan_tests[@]}"; do
  echo "-- tsan $t"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 STOKER_TEST_TMP="$PWD/build-tsan/test-tmp" \
    "./build-tsan/$t" --gtest_brief=1
done
