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
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600

[ "${STOKER_QUICK:-0}" = 1 ] && exit 0
for extra in tests/sanitize.sh tests/fuzz/run.sh; do
  [ -f "$extra" ] && bash "$extra"
done
exit 0
