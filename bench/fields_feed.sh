#!/usr/bin/env bash
# The speed figures of typed fields (issue 16) and of --fast-crop in `bench compare`
# (issue 21), in one run on one machine:
#   a1. JPEG train path vs an older stoker: `bench feed` on a plain JPEG dataset, this
#       stoker (A) and $OLD (B) alternating A B A B, each run the feed alone (the limit
#       cut to one record): samples/s and CPU seconds (user + system; on a busy shared
#       machine the steadier figure, as both runs feed the same samples); medians of the
#       per-round A/B samples/s and B/A CPU seconds.
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
here=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z "${STOKER:-}" ]]; then
  if [[ -x "$here/build/stoker" ]]; then STOKER="$here/build/stoker"; else STOKER=stoker; fi
fi
OLD=${OLD:-}
FIELDS=(--field jpg=train:224 --field png=follow:jpg --field cls --field txt --field npy)

mkdir -p "$W"
[[ -d $W/img ]] || "$STOKER" sample imagefolder "$W/img" --images 1000 --threads "$THREADS" > /dev/null
[[ -d $W/plain ]] || "${OLD:-$STOKER}" pack imagefolder "$W/img" "$W/plain" --threads "$THREADS" > /dev/null
[[ -d $W/fast ]] || "$STOKER" pack imagefolder "$W/img" "$W/fast" --fast-crop --threads "$THREADS" > /dev/null
[[ -d $W/wds ]] || "$STOKER" sample wds "$W/wds" --samples 1000 --per-tar 250 --threads "$THREADS" > /dev/null
[[ -d $W/multi ]] || "$STOKER" pack wds "$W"/wds/*.tar "$W/multi" --threads "$THREADS" > /dev/null

tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.time"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
run() {  # "samples/s cpu-seconds pipeline/limit" of one bench feed run: BIN DATASET ARGS...
  local bin=$1
  shift
  TIMEFORMAT='%U %S'
  { time "$bin" bench feed "$@" --threads "$THREADS" > "$tmp" 2> /dev/null; } 2> "$tmp.time"
  echo "$(awk '/^feed:/ {print $2}' "$tmp") $(tail -1 "$tmp.time" | awk '{print $1 + $2}') \
$(awk '/^limit:/ {print $NF}' "$tmp")"
}

FEED_ONLY=(--epochs "$EPOCHS" --limit-records 1 --limit-seconds 0.001)
INTERLEAVED=(--epochs $((2 * EPOCHS)) --warmup-epochs 1 --limit-interleaved --limit-seconds $((2 * EPOCHS)))

if [[ $PARTS == *a* && -n $OLD ]]; then
  echo "== a1. JPEG train path: $STOKER (A) vs $OLD (B), $W/plain, $THREADS threads, $EPOCHS epochs, feed only"
  rr=() rc=()
  for ((i = 1; i <= ROUNDS; ++i)); do
    read -r a_rate a_cpu _ < <(run "$STOKER" "$W/plain" "${FEED_ONLY[@]}")
    read -r b_rate b_cpu _ < <(run "$OLD" "$W/plain" "${FEED_ONLY[@]}")
    rr+=("$(awk -v a="$a_rate" -v b="$b_rate" 'BEGIN {printf "%.3f", a / b}')")
    rc+=("$(awk -v a="$a_cpu" -v b="$b_cpu" 'BEGIN {printf "%.3f", b / a}')")
    echo "round $i: A $a_rate samples/s ($a_cpu CPU s), B $b_rate samples/s ($b_cpu CPU s)"
  done
  echo "a1: median A/B samples/s $(printf '%s\n' "${rr[@]}" | median) (rounds: ${rr[*]})"
  echo "a1: median B/A CPU s $(printf '%s\n' "${rc[@]}" | median) (rounds: ${rc[*]})"
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
