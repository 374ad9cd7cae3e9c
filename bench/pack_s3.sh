#!/usr/bin/env bash
# Packing straight into an object store (#31): `stoker pack imagefolder --fast-crop` into
# s3rver on loopback against the same pack into a local directory, alternated over
# ROUNDS rounds (A B A B), medians. Target: the object store >= 0.8x of local.
# The upload of each finished shard overlaps the packing of the next (2 uploads in
# flight), so on a pack bound by CPU the upload should cost little.
#
#   bash bench/pack_s3.sh [--images N] [--rounds R] [--shard-size 8MiB]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
images=1200 rounds=3 shard=8MiB
while [[ $# -gt 0 ]]; do
  case $1 in
    --images) images=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shard-size) shard=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
command -v s3rver >/dev/null || { echo "pack_s3: s3rver (npm) is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$tmp/s3"
s3rver -d "$tmp/s3" -a 127.0.0.1 -p "$port" --silent --configure-bucket bench >/dev/null 2>&1 &
s3pid=$!
trap 'kill $s3pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$port
PYTHONPATH="$root/build/python" /usr/bin/python3 -c \
  "import stoker; stoker.make_sample_imagefolder('$tmp/src', images=$images, classes=10, seed=1)"
echo "pack_s3: $images images ($(du -sh "$tmp/src" | cut -f1)), shards of $shard, $(nproc) CPUs, s3rver at 127.0.0.1:$port"

run() {  # run DEST: seconds of one pack
  local t0 t1
  t0=$(date +%s.%N)
  "$STOKER" pack imagefolder "$tmp/src" "$1" --fast-crop --shard-size "$shard" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}'
}
: > "$tmp/local"; : > "$tmp/s3t"
for r in $(seq "$rounds"); do
  rm -rf "$tmp/out"
  a=$(run "$tmp/out")
  b=$(run "s3://bench/round-$r")
  echo "round $r: local ${a} s, s3 ${b} s ($(ratio "$a" "$b") of local)"
  echo "$a" >> "$tmp/local"; echo "$b" >> "$tmp/s3t"
done
ml=$(median < "$tmp/local"); ms=$(median < "$tmp/s3t")
echo "pack_s3: median local ${ml} s, s3 ${ms} s: s3 runs at $(ratio "$ml" "$ms") of local (target >= 0.8)"
