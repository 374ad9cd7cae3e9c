#!/usr/bin/env bash
# A/B of two builds of stoker on the same datasets: `bench feed` alternated in one run,
# so that a refactor (or any change) can show it costs no feed rate.
#
#   bash bench/ab_builds.sh OLD_STOKER NEW_STOKER DATASET... [-- FEED_ARGS...]
#
# Each DATASET is fed by both builds in turn, ROUNDS times (STOKER_AB_ROUNDS, default 5);
# FEED_ARGS go to every `bench feed` (default: --threads 2 --epochs 2). Prints per round
# and the medians (new/old samples/s, and old/new CPU seconds) per dataset.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $# -ge 3 ]] || { sed -n 2,9p "$0" >&2; exit 2; }
old=$1 new=$2
shift 2
datasets=()
while [[ $# -gt 0 && $1 != -- ]]; do datasets+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
feed_args=("$@")
[[ ${#feed_args[@]} -gt 0 ]] || feed_args=(--threads 2 --epochs 2)
rounds=${STOKER_AB_ROUNDS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for ds in "${datasets[@]}"; do
  run_old() { feed_run "$tmp/old.$1" "$old" "$ds" "${feed_args[@]}" | awk '{print $1, $2}'; }
  run_new() { feed_run "$tmp/new.$1" "$new" "$ds" "${feed_args[@]}" | awk '{print $1, $2}'; }
  ab_rounds "$(basename "$ds")" "$rounds" old run_old new run_new
done
