#!/usr/bin/env bash
# The speed figures of typed fields (issue 16) and of --fast-crop in `bench compare`
# (issue 21), in one run on one machine:
#   a1. JPEG train path vs an older stoker: `bench feed` on a plain JPEG dataset, this
#       stoker (A) and $OLD (B) alternating A B A B, each run the feed alone (the limit
#       cut to one record): samples/s and CPU seconds (user + system; on a busy shared
#       machine the steadier figure, as both runs feed the same samples); medians of the
#       runs and of the per-round this/old samples/s and old/this CPU seconds (lib.sh).
#   a2. the same dataset against its own in-memory limit: `bench feed --limit-interleaved`
#       (a limit slice after each epoch, so load swings weigh on both; one warm-up epoch
#       first, as the 1,000-record epochs would otherwise make the start-up a few per
#       cent of the run), median pipeline/limit over the rounds.
#   a3. a2 with one decode thread fewer than THREADS (when THREADS > 1): a core left to
#       the IO and consumer threads, as on any machine with more cores than decode
#       threads; at THREADS decode threads on THREADS cores those threads' CPU is
#       taken from decode.
#   b.  multi-field: the same on jpg + png mask (Follow) + cls + txt + npy records
#       (`stoker sample wds`, `pack wds`).
#   c.  `bench compare PLAIN --fast-crop-dataset FAST`: fast-crop / plain for train and
#       eval (compare.md's table).
#
# usage: OLD=path/to/old/stoker bash bench/fields_feed.sh WORKDIR [ROUNDS] [THREADS]
#   WORKDIR gets (once) img/ (1,000 sample JPEGs), plain/ (packed by $OLD when given, so
#   both stokers read the same files), fast/ (--fast-crop), wds/ and multi/.
# env:  STOKER (default build/stoker), OLD (unset: a1 is left out), EPOCHS (default 3 for
#       a1, twice that for a2 and b), SECONDS_PER (compare's --seconds, default 8),
#       PARTS (default abc)
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: OLD=old/stoker $0 WORKDIR [ROUNDS] [THREADS]" >&2
  exit 2
fi
W=$1
ROUNDS=${2:-4}
THREADS=${3:-2}
EPOCHS=${EPOCHS:-3}
SECONDS_PER=${SECONDS_PER:-8}
PARTS=${PARTS:-abc}
. "$(dirname "$0")/lib.sh"
OLD=${OLD:-}
FIELDS=(--field jpg=train:224 --field png=follow:jpg --field cls --field txt --field npy)

mkdir -p "$W"
[[ -d $W/img ]] || "$STOKER" sample imagefolder "$W/img" --images 1000 --threads "$THREADS" > /dev/null
[[ -d $W/plain ]] || "${OLD:-$STOKER}" pack imagefolder "$W/img" "$W/plain" --threads "$THREADS" > /dev/null
[[ -d $W/fast ]] || "$STOKER" pack imagefolder "$W/img" "$W/fast" --fast-crop --threads "$THREADS" > /dev/null
[[ -d $W/wds ]] || "$STOKER" sample wds "$W/wds" --samples 1000 --per-tar 250 --threads "$THREADS" > /dev/null
[[ -d $W/multi ]] || "$STOKER" pack wds "$W"/wds/*.tar "$W/multi" --threads "$THREADS" > /dev/null

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
run() {  # "samples/s cpu-seconds pipeline/limit" of one bench feed run: BIN DATASET ARGS...
  local bin=$1
  shift
  feed_run "$tmp" "$bin" "$@" --threads "$THREADS"
}

FEED_ONLY=(--epochs "$EPOCHS" --limit-records 1 --limit-seconds 0.001)
INTERLEAVED=(--epochs $((2 * EPOCHS)) --warmup-epochs 1 --limit-interleaved --limit-seconds $((2 * EPOCHS)))

if [[ $PARTS == *a* && -n $OLD ]]; then
  echo "== a1. JPEG train path: $STOKER vs $OLD (old), $W/plain, $THREADS threads, $EPOCHS epochs, feed only"
  old_feed() { run "$OLD" "$W/plain" "${FEED_ONLY[@]}" | cut -d' ' -f1,2; }
  this_feed() { run "$STOKER" "$W/plain" "${FEED_ONLY[@]}" | cut -d' ' -f1,2; }
  ab_rounds a1 "$ROUNDS" old old_feed this this_feed
fi

interleaved() {  # NAME DATASET ARGS...: pipeline/limit per round and the median
  local name=$1 ds=$2 ratios=()
  shift 2
  echo "== $name: $ds $* ${INTERLEAVED[*]}, $THREADS threads"
  for ((i = 1; i <= ROUNDS; ++i)); do
    read -r rate cpu lim < <(run "$STOKER" "$ds" "$@" "${INTERLEAVED[@]}")
    ratios+=("$lim")
    echo "round $i: $rate samples/s ($cpu CPU s), pipeline/limit $lim"
  done
  echo "$name: median pipeline/limit $(printf '%s\n' "${ratios[@]}" | median) (rounds: ${ratios[*]})"
}
if [[ $PARTS == *a* ]]; then
  interleaved a2 "$W/plain"
  if ((THREADS > 1)); then THREADS=$((THREADS - 1)) interleaved a3 "$W/plain"; fi
fi
if [[ $PARTS == *b* ]]; then interleaved b "$W/multi" "${FIELDS[@]}"; fi

if [[ $PARTS == *c* ]]; then
  echo "== c. bench compare $W/plain --fast-crop-dataset $W/fast"
  "$STOKER" bench compare "$W/plain" --fast-crop-dataset "$W/fast" --threads "$THREADS" --rounds "$ROUNDS" \
    --seconds "$SECONDS_PER" --out "$W/compare" 2> /dev/null > /dev/null
  sed -n '/--fast-crop. vs plain/,$p' "$W/compare/compare.md"
fi
