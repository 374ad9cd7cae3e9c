#!/usr/bin/env bash
# The speed figures of typed fields (issue 16) and of --fast-crop in `bench compare`
# (issue 21), in one run on one machine:
#   a. JPEG train path: `bench feed` on a plain JPEG dataset, this stoker (A) and an older
#      one ($OLD, B) alternating A B A B; per run samples/s, CPU seconds (user + system:
#      on a busy shared machine the steadier figure, as both runs feed the same samples)
#      and A's pipeline/limit; medians of A/B per round.
#   b. multi-field: `bench feed` on jpg + png mask (Follow) + cls + txt + npy records
#      (`stoker sample wds`, `pack wds`), its pipeline/limit per run and the median.
#   c. `bench compare PLAIN --fast-crop-dataset FAST`: fast-crop / plain for train and
#      eval (compare.md's table).
#
# usage: OLD=path/to/old/stoker bash bench/fields_feed.sh WORKDIR [ROUNDS] [THREADS]
#   WORKDIR gets (once) img/ (1,000 sample JPEGs), plain/ (packed by $OLD when given, so
#   both stokers read the same files), fast/ (--fast-crop), wds/ and multi/.
# env:  STOKER (default build/stoker), OLD (unset: part a measures A alone),
#       EPOCHS (default 3), SECONDS_PER (compare's --seconds, default 8), PARTS (default abc),
#       LIMIT_SECONDS (bench feed --limit-seconds, default 0.01: the limit makes exactly one
#       pass over the 1,000 records, so every run does the same work and CPU seconds compare)
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
LIMIT_SECONDS=${LIMIT_SECONDS:-0.01}
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
  { time "$bin" bench feed "$@" --threads "$THREADS" --epochs "$EPOCHS" --limit-seconds "$LIMIT_SECONDS" > "$tmp" 2> /dev/null; } 2> "$tmp.time"
  echo "$(awk '/^feed:/ {print $2}' "$tmp") $(tail -1 "$tmp.time" | awk '{print $1 + $2}') \
$(awk '/^limit:/ {print $NF}' "$tmp")"
}

if [[ $PARTS == *a* ]]; then
echo "== a. JPEG train path: $STOKER (A)${OLD:+ vs $OLD (B)}, $W/plain, $THREADS threads, $EPOCHS epochs"
ra=() rl=() rr=() rc=()
for ((i = 1; i <= ROUNDS; ++i)); do
  read -r a_rate a_cpu a_lim < <(run "$STOKER" "$W/plain")
  ra+=("$a_rate") rl+=("$a_lim")
  if [[ -n $OLD ]]; then
    read -r b_rate b_cpu b_lim < <(run "$OLD" "$W/plain")
    rr+=("$(awk -v a="$a_rate" -v b="$b_rate" 'BEGIN {print a / b}')")
    rc+=("$(awk -v a="$a_cpu" -v b="$b_cpu" 'BEGIN {print b / a}')")
    echo "round $i: A $a_rate samples/s ($a_cpu CPU s, pipeline/limit $a_lim), B $b_rate samples/s ($b_cpu CPU s, its pipeline/limit $b_lim)"
  else
    echo "round $i: A $a_rate samples/s ($a_cpu CPU s, pipeline/limit $a_lim)"
  fi
done
echo "a: median A pipeline/limit $(printf '%s\n' "${rl[@]}" | median) (rounds: ${rl[*]})"
if [[ -n $OLD ]]; then
  echo "a: median A/B samples/s $(printf '%s\n' "${rr[@]}" | median) (rounds: ${rr[*]}); \
median B/A CPU s $(printf '%s\n' "${rc[@]}" | median) (rounds: ${rc[*]})"
fi

fi

if [[ $PARTS == *b* ]]; then
echo "== b. multi-field: $W/multi ${FIELDS[*]}"
ml=()
for ((i = 1; i <= ROUNDS; ++i)); do
  read -r m_rate m_cpu m_lim < <(run "$STOKER" "$W/multi" "${FIELDS[@]}")
  ml+=("$m_lim")
  echo "round $i: $m_rate samples/s ($m_cpu CPU s), pipeline/limit $m_lim"
done
echo "b: median pipeline/limit $(printf '%s\n' "${ml[@]}" | median) (rounds: ${ml[*]})"

fi

if [[ $PARTS == *c* ]]; then
echo "== c. bench compare $W/plain --fast-crop-dataset $W/fast"
"$STOKER" bench compare "$W/plain" --fast-crop-dataset "$W/fast" --threads "$THREADS" --rounds "$ROUNDS" \
  --seconds "$SECONDS_PER" --out "$W/compare" 2> /dev/null > /dev/null
sed -n '/--fast-crop. vs plain/,$p' "$W/compare/compare.md"
fi
