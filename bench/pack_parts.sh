#!/usr/bin/env bash
# Packing in parts (#31): 2 Dask workers vs 1 on a --fast-crop pack (target >= 1.8x), and
# `stoker commit` of 10,000 shards from 100 parts (target < 5 s). See bench/pack_parts.py.
#
#   bash bench/pack_parts.sh [--images N] [--rounds R]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
PYTHONPATH="$root/build/python${PYTHONPATH:+:$PYTHONPATH}" exec /usr/bin/python3 "$root/bench/pack_parts.py" --cli "$STOKER" "$@"
