#!/usr/bin/env bash
# The test suite under ASan+UBSan (clang, every CPU test), and the concurrent suites under
# TSan, as separate builds; tests/ci_steps.sh says how each is configured.
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/ci_steps.sh
stage "asan+ubsan build (library, tests, fuzz targets)"; step_asan_build
stage "asan+ubsan tests"; step_asan_tests
stage "tsan build"; step_tsan_build
stage "tsan tests"; step_tsan_tests
stage_summary
