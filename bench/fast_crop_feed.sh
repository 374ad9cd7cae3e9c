#!/usr/bin/env bash
# `stoker bench feed` on two datasets of the same images, one packed plainly and one
# with --fast-crop, alternating A B A B in one run (the machine's load then weighs on
# both alike), for the train and the eval transform. Prints each run's samples/s and CPU
# seconds (user + system: on a busy shared machine the steadier figure, as both runs do
# the same samples), and per transform the medians and their ratios (fast-crop over plain
# for samples/s, plain over fast-crop for CPU seconds).
#
# usage: bench/fast_crop_feed.sh PLAIN FAST [ROUNDS] [THREADS]
#   e.g. build/stoker sample imagefolder out/img --images 1000
#        build/stoker pack imagefolder out/img out/plain
#        build/stoker pack imagefolder out/img out/fast --fast-crop
#        bash bench/fast_crop_feed.sh out/plain out/fast 4 2
# env:   STOKER=path/to/stoker (default: build/stoker), EPOCHS (default 3)
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 PLAIN FAST [ROUNDS] [THREADS]" >&2
  exit 2
fi
PLAIN=$1
FAST=$2
ROUNDS=${3:-4}
THREADS=${4:-2}
EPOCHS=${EPOCHS:-3}
if [[ -z "${STOKER:-}" ]]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  if [[ -x "$here/build/stoker" ]]; then STOKER="$here/build/stoker"; else STOKER=stoker; fi
fi
run() {  # "samples/s cpu-seconds" of one bench feed run
  local out cpu
  TIMEFORMAT='%U %S'
  { time "$STOKER" bench feed "$1" --threads "$THREADS" --transform "$2" --epochs "$EPOCHS" > "$tmp" 2> /dev/null; } 2> "$tmp.time"
  cpu=$(tail -1 "$tmp.time" | awk '{print $1 + $2}')
  out=$(awk '/^feed:/ {print $2}' "$tmp")
  echo "$out $cpu"
}
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.time"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for transform in train eval; do
  a=() b=() ca=() cb=()
  for ((i = 1; i <= ROUNDS; ++i)); do
    read -r ra xa < <(run "$PLAIN" "$transform")
    read -r rb xb < <(run "$FAST" "$transform")
    echo "$transform round $i: plain $ra samples/s ($xa CPU s), fast-crop $rb samples/s ($xb CPU s)"
    a+=("$ra") b+=("$rb") ca+=("$xa") cb+=("$xb")
  done
  ma=$(printf '%s\n' "${a[@]}" | median)
  mb=$(printf '%s\n' "${b[@]}" | median)
  mca=$(printf '%s\n' "${ca[@]}" | median)
  mcb=$(printf '%s\n' "${cb[@]}" | median)
  awk -v t="$transform" -v a="$ma" -v b="$mb" -v ca="$mca" -v cb="$mcb" \
    'BEGIN {printf "%s: median plain %.0f, fast-crop %.0f samples/s (fast-crop/plain %.2f); CPU s %.2f vs %.2f (plain/fast-crop %.2f)\n", t, a, b, b / a, ca, cb, ca / cb}'
done
