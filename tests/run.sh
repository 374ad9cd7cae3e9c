#!/usr/bin/env bash
# The whole test suite: Release build + ctest (C++ and Python tests), then one
# ASan+UBSan build (clang) that runs every CPU test and the short fuzz runs, and a TSan
# build of the concurrent suites. Skips what the machine cannot do, visibly, and prints
# each stage's time.
#   STOKER_QUICK=1  only the Release build and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ci_steps.sh
build=${STOKER_BUILD_DIR:-build}

stage "release build ($build)"
configure_release "$build"
cmake --build "$build" -j"$jobs"
stage "release tests"
log=$(mktemp)
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600 | tee "$log"
total=$(grep -Eo 'tests passed, 0 tests failed out of [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
skipped=$(grep -Ec '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" || true)
rm -f "$log"

if [ "${STOKER_QUICK:-0}" != 1 ]; then
  stage "asan+ubsan build (library, tests, fuzz targets)"; step_asan_build
  stage "asan+ubsan tests"; step_asan_tests
  stage "fuzz"; step_fuzz
  stage "tsan build"; step_tsan_build
  stage "tsan tests"; step_tsan_tests
fi
stage_summary
# Every step above stops the script on a failure, so reaching here means all passed.
echo "release build: $((total - skipped)) passed, 0 failed, $skipped skipped"
exit 0
