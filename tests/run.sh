#!/usr/bin/env bash
# The whole test suite: Release build + ctest (C++ and Python tests), then the
# sanitizer builds and short fuzz runs. Skips what the machine cannot do, visibly.
#   STOKER_QUICK=1  only the Release build and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${STOKER_JOBS:-$(nproc)}
build=${STOKER_BUILD_DIR:-build}

echo "== release build ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$jobs"
echo "== tests"
log=$(mktemp)
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600 | tee "$log"
total=$(grep -Eo 'tests passed, 0 tests failed out of [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
skipped=$(grep -Ec '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$log" || true)
rm -f "$log"

if [ "${STOKER_QUICK:-0}" != 1 ]; then
  for extra in tests/sanitize.sh tests/fuzz/run.sh; do
    [ -f "$extra" ] && bash "$extra"
  done
fi
# Every step above stops the script on a failure, so reaching here means all passed.
echo "release build: $((total - skipped)) passed, 0 failed, $skipped skipped"
exit 0
