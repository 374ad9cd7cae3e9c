#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for a short while
# on a copy of its checked-in seed corpus. A crash fails the run; the crashing input is
# left in $out for turning into a regression test.
#   STOKER_FUZZ_SECONDS  seconds per target (default 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang++ >/dev/null; then
  echo "fuzz: SKIPPED (clang++ not installed)"
  exit 0
fi
secs=${STOKER_FUZZ_SECONDS:-20}
build=build-fuzz
out=${STOKER_FUZZ_OUT:-$build/findings}
echo "== fuzz build ($build)"
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTOKER_BUILD_FUZZ=ON \
  -DSTOKER_SANITIZE=address,undefined -DSTOKER_ENABLE_CUDA=OFF -DSTOKER_BUILD_TESTS=OFF \
  -DSTOKER_BUILD_BENCH=OFF -DSTOKER_BUILD_PYTHON=OFF >/dev/null
targets=$(ls tests/fuzz/*_fuzz.cc | xargs -n1 basename | sed 's/\.cc$//')
cmake --build "$build" -j"$(nproc)" --target $targets >/dev/null
mkdir -p "$out"
status=0
for t in $targets; do
  name=${t%_fuzz}
  work=$(mktemp -d)
  [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
  log="$out/$t.log"
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1 \
     "./$build/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=20 -max_len=262144 \
     -artifact_prefix="$out/$t-" "$work" >"$log" 2>&1; then
    echo "fuzz $t: $(grep -Eo 'Done [0-9]+ runs' "$log" | tail -1) in ${secs}s, no crash"
  else
    echo "fuzz $t: FAILED — see $log"; tail -30 "$log"; status=1
  fi
  rm -rf "$work"
done
exit $status
