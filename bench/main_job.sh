#!/usr/bin/env bash
# The main job: build, generate a small ImageNet-like sample dataset and a token file,
# pack both, verify them, and run the feed-rate benchmarks (and, when present, the
# comparison harness). Everything lands under $STOKER_OUT (default: out/).
#   STOKER_SAMPLE_IMAGES  images to generate (default 2000, ~85 KiB each)
#   STOKER_SAMPLE_TOKENS  tokens to generate (default 100000000: epochs of ~0.15 s, long
#                         enough that each epoch's start-up is not most of the figure)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${STOKER_OUT:-out}
images=${STOKER_SAMPLE_IMAGES:-2000}
tokens=${STOKER_SAMPLE_TOKENS:-100000000}
jobs=$(nproc)

echo "== build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
stoker=build/stoker
mkdir -p "$out"

echo "== sample data ($images images, $tokens tokens)"
if [ ! -f "$out/images/.done-$images" ]; then
  rm -rf "$out/images"
  $stoker sample imagefolder "$out/images" --images "$images" --classes 10 --seed 1
  touch "$out/images/.done-$images"
fi
token_file="$out/tokens-$tokens.bin"
[ -f "$token_file" ] || $stoker sample tokens "$token_file" --tokens "$tokens" --vocab 50257 --seed 1

echo "== pack"
$stoker pack imagefolder "$out/images" "$out/dataset" --overwrite
$stoker pack imagefolder "$out/images" "$out/dataset-fast-crop" --fast-crop --overwrite
$stoker pack tokens "$token_file" "$out/tokens" --dtype uint16 --seq-len 1024 --zstd 3 --overwrite

echo "== verify"
$stoker verify "$out/dataset" "$out/dataset-fast-crop" "$out/tokens"
$stoker inspect "$out/dataset"
$stoker inspect "$out/tokens"

echo "== feed rate: images, train transform to 224, $jobs decode threads"
$stoker bench feed "$out/dataset" --threads "$jobs" --transform train --epochs 2 --json | tee "$out/feed_images.txt"
echo "== feed rate: the same images packed plainly and with --fast-crop, alternating"
STOKER=$stoker bash "$(dirname "$0")/fast_crop_feed.sh" "$out/dataset" "$out/dataset-fast-crop" 2 "$jobs" |
  tee "$out/feed_fast_crop.txt"
echo "== feed rate: tokens, seq_len 1024"
$stoker bench feed "$out/tokens" --threads "$jobs" --batch 32 --epochs 3 --json | tee "$out/feed_tokens.txt"

if $stoker bench --help 2>&1 | grep -q "^  compare"; then
  echo "== comparison with the feeders users run today"
  $stoker bench compare "$out/dataset" --images "$out/images" --tokens "$out/tokens" --out "$out/compare"
  cat "$out/compare/compare.md"
fi
