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
. "$(dirname "$0")/lib.sh"
PLAIN=$1
FAST=$2
ROUNDS=${3:-4}
THREADS=${4:-2}
EPOCHS=${EPOCHS:-3}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
plain() { feed_run "$tmp" "$STOKER" "$PLAIN" --threads "$THREADS" --transform "$transform" --epochs "$EPOCHS" | cut -d' ' -f1,2; }
fast() { feed_run "$tmp" "$STOKER" "$FAST" --threads "$THREADS" --transform "$transform" --epochs "$EPOCHS" | cut -d' ' -f1,2; }
for transform in train eval; do
  ab_rounds "$transform" "$ROUNDS" plain plain fast-crop fast
done
