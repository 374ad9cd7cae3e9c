#!/usr/bin/env bash
# Compares `stoker bench io` with fio (ioengine=io_uring, direct=1, same queue depth)
# on the same shard files in the same run, for both orders:
#   shuffled:   fio randread, bs = the dataset's mean record size rounded to 4 KiB
#   sequential: fio sequential read, bs = 1 MiB, one file after another
# and prints both throughputs and their ratio, plus the pread engine's ratio.
#
# usage: bench/fio_compare.sh DATASET [QD]
# env:   STOKER=path/to/stoker (default: build/stoker, else stoker on PATH)
#        LIMIT_MB=N   read only about N MiB per run (default: the whole dataset)
#        RUNTIME=S    cap each fio run at S seconds (default 60)
#        REPEAT=N     run each measurement N times, keep the best (default 1)
#        PREAD_THREADS=N  threads of the pread engine (default 4, the engine's default)
# needs: fio, and jq or python3 to read JSON.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 DATASET [QD]" >&2
  exit 2
fi
DS=$1
QD=${2:-64}
RUNTIME=${RUNTIME:-60}
REPEAT=${REPEAT:-1}
PREAD_THREADS=${PREAD_THREADS:-4}
. "$(dirname "$0")/lib.sh"
command -v fio >/dev/null || { echo "fio not found (apt-get install fio)" >&2; exit 1; }

# json FIELD-PATH < json  (jq syntax subset: .a.b[0].c)
json() {
  if command -v jq >/dev/null; then
    jq -r "$1"
  else
    python3 -c 'import json,sys,re
v=json.load(sys.stdin)
for k in re.findall(r"\.(\w+)|\[(\d+)\]", sys.argv[1]):
    v = v[k[0]] if k[0] else v[int(k[1])]
print(v)' "$1"
  fi
}

info=$("$STOKER" inspect "$DS" --json)
records=$(json .records <<<"$info")
mean=$(json .mean_record_bytes <<<"$info")
payload=$(json .stored_bytes <<<"$info")
bs=$(awk -v m="$mean" 'BEGIN { b = int((m + 2048) / 4096) * 4096; if (b < 4096) b = 4096; print b }')
files=$(awk '$1 == "shard" { print $2 }' "$DS/MANIFEST" | sed "s|^|$DS/|" | paste -sd:)
limit_args=()
io_size=$payload
if [[ -n "${LIMIT_MB:-}" ]]; then
  io_size=$((LIMIT_MB << 20))
  limit_records=$(awk -v r="$records" -v p="$payload" -v l="$io_size" 'BEGIN { n = int(r * l / p); if (n < 1) n = 1; print n }')
  limit_args=(--limit "$limit_records")
fi

echo "dataset $DS: $records records, $payload payload bytes, mean record $mean B -> fio bs $bs; qd $QD"
echo "stoker: $STOKER; $(fio --version)"

run_fio() {  # rw bs file_service_type
  fio --name=cmp --ioengine=io_uring --direct=1 --iodepth="$QD" --rw="$1" --bs="$2" \
      --filename="$files" --file_service_type="$3" --io_size="$io_size" \
      --runtime="$RUNTIME" --time_based=0 --norandommap --randrepeat=0 \
      --group_reporting --output-format=json 2>/dev/null | json .jobs[0].read.bw_bytes
}
run_stoker() {  # order engine
  "$STOKER" bench io "$DS" --order "$1" --qd "$QD" --engine "$2" --threads "$PREAD_THREADS" \
      --json "${limit_args[@]}" | tail -n 1 | json .bytes_per_s
}
best() {  # command...: the largest of REPEAT runs
  local b=0 v
  for ((i = 0; i < REPEAT; i++)); do
    v=$("$@")
    b=$(awk -v a="$b" -v c="$v" 'BEGIN { print (c > a) ? c : a }')
  done
  echo "$b"
}

echo "best of $REPEAT; pread engine with $PREAD_THREADS threads"
printf '\n%-11s %14s %14s %7s %14s %7s\n' order "stoker uring" "fio io_uring" ratio "stoker pread" ratio
for order in sequential shuffled; do
  if [[ $order == sequential ]]; then
    f=$(best run_fio read 1M sequential)
  else
    f=$(best run_fio randread "$bs" random)
  fi
  u=$(best run_stoker "$order" uring)
  p=$(best run_stoker "$order" pread)
  awk -v o="$order" -v u="$u" -v f="$f" -v p="$p" 'BEGIN {
    printf "%-11s %9.3f GB/s %9.3f GB/s %7.3f %9.3f GB/s %7.3f\n", o, u / 1e9, f / 1e9, u / f, p / 1e9, p / f }'
done
echo "(stoker: record payload bytes/s, records read through aligned ranges; fio: bytes/s read)"
