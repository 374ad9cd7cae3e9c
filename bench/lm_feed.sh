#!/bin/bash
# Token feed with and without the document outputs (#19), alternated in one run so the
# ratio holds on a shared machine: `bash bench/lm_feed.sh [ROUNDS]` (build/stoker built).
# `bash bench/lm_feed.sh mix [ROUNDS]`: a 2-source mixture (the same stream packed with
# and without boundaries, equal weights) against its slower source alone.
# Makes a 50 M-token sample stream (Zipf-like, vocab 1024) and packs it with --eos 139
# (documents of about 1000 tokens), seq_len 1024, zstd 3, into $LM_DIR (/tmp/stoker-lm).
set -euo pipefail
mode=plain
if [ "${1:-}" = mix ]; then mode=mix; shift; fi
rounds=${1:-5}
dir=${LM_DIR:-/tmp/stoker-lm}
. "$(dirname "$0")/lib.sh"
cli=$STOKER
mkdir -p "$dir"
[ -f "$dir/t.bin" ] || "$cli" sample tokens "$dir/t.bin" --tokens 50000000 --vocab 1024 --seed 1 >/dev/null
[ -d "$dir/docs" ] || "$cli" pack tokens "$dir/t.bin" "$dir/docs" --dtype uint16 --seq-len 1024 --zstd 3 --eos 139 >/dev/null
[ "$mode" = plain ] || [ -d "$dir/plain" ] || "$cli" pack tokens "$dir/t.bin" "$dir/plain" --dtype uint16 --seq-len 1024 --zstd 3 >/dev/null
# Per run: the feed rate (wall) and the CPU seconds the process spent per million rows
# (user + sys): on a machine shared with other jobs the wall rate swings with their load,
# the CPU cost per row far less; the decode-bound feed rate goes as its inverse.
run() {
  local out bin=$cli
  if [ "${1:-}" = --main ]; then bin=$MAIN; shift; fi
  if [ "${1:-}" = --base ]; then bin=$BASE; shift; fi
  local ds=$dir/docs
  if [ "${1:-}" = --on ]; then ds=$2; shift 2; fi
  out=$( { TIMEFORMAT='%U %S'; time "$bin" bench feed "$ds" --threads 2 --batch 32 --epochs 10 \
           --limit-seconds 0.01 --limit-records 1 --json "$@" 2>/dev/null; } 2>&1 )
  echo "$out" | /usr/bin/python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
j = json.loads(next(l for l in lines if l.startswith("{")))
user, sys_ = map(float, lines[-1].split())
print("%.0f %.3f" % (j["samples_per_s"], (user + sys_) / j["samples"] * 1e6))'
}
if [ "$mode" = mix ]; then
  for r in $(seq "$rounds"); do
    read -r ra ca < <(run --on "$dir/plain")
    read -r rb cb < <(run --on "$dir/docs")
    read -r rm cm < <(run --on "$dir/plain" --mix "$dir/docs")
    slower=$(awk "BEGIN{print ($ra < $rb) ? $ra : $rb}")
    cslow=$(awk "BEGIN{print ($ca > $cb) ? $ca : $cb}")
    line="round $r: plain alone $ra rows/s ${ca} cpu-s/Mrow, docs alone $rb rows/s ${cb} cpu-s/Mrow,"
    line+=" mixture $rm rows/s ${cm} cpu-s/Mrow; mixture / slower: rate $(ratio "$rm" "$slower"),"
    line+=" cpu per row $(ratio "$cm" "$cslow")"
    if [ -n "${BASE:-}" ]; then
      read -r rx cx < <(run --base --on "$dir/plain" --mix "$dir/docs")
      line+="; base mixture $rx rows/s ${cx} cpu-s/Mrow (rate / slower $(ratio "$rx" "$slower"))"
    fi
    echo "$line"
  done
  exit 0
fi
# MAIN=path/to/main's/stoker: also the plain feed of that build, in the same rounds.
# BASE=path/to/another/stoker: also that build's feed with the outputs, or its mixture
# (a change against the build before it). The CLI loads libstoker.so through its RUNPATH,
# so a copied binary still runs this build's library: make BASE a script that runs it
# with LD_LIBRARY_PATH set to the other build's library.
for r in $(seq "$rounds"); do
  read -r ra ca < <(run)
  read -r rb cb < <(run --position-ids --loss-mask)
  line="round $r: plain $ra rows/s ${ca} cpu-s/Mrow; position_ids+loss_mask $rb rows/s ${cb} cpu-s/Mrow;"
  line+=" rate ratio $(ratio "$rb" "$ra"), cpu ratio $(ratio "$cb" "$ca")"
  if [ -n "${MAIN:-}" ]; then
    read -r rm cm < <(run --main)
    line+="; main plain $rm rows/s ${cm} cpu-s/Mrow (this plain / main: rate $(ratio "$ra" "$rm"), cpu $(ratio "$ca" "$cm"))"
  fi
  if [ -n "${BASE:-}" ]; then
    read -r rx cx < <(run --base --position-ids --loss-mask)
    line+="; base position_ids+loss_mask $rx rows/s ${cx} cpu-s/Mrow (this / base: cpu $(ratio "$cb" "$cx"))"
  fi
  echo "$line"
done
