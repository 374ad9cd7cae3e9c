#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/*_fuzz.cc) for a short while on its checked-in
# seed corpus, built in the ASan+UBSan tree that tests/sanitize.sh also uses.
#   STOKER_FUZZ_SECONDS  seconds per target (default 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ci_steps.sh
stage "asan+ubsan build (library, tests, fuzz targets)"; step_asan_build
stage "fuzz"; step_fuzz
stage_summary
