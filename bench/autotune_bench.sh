#!/usr/bin/env bash
# threads="auto" (#32): the tuner against fixed settings, in one run.
#
#   bash bench/autotune_bench.sh IMAGES TOKENS [OUT]
#
# IMAGES: a packed image dataset (bench/main_job.sh's sample, or `stoker sample
# imagefolder` + `pack imagefolder`); TOKENS: a packed token dataset. Every run is
# `bench feed --json` after warm-up epochs (left out of its figures). Parts:
#   1. three workloads, auto vs a grid of fixed (threads 1-3 x slots 4, 8), the best of
#      the grid taken in the same run (GRID_ROUNDS rounds alternated, medians): decode
#      bound (train crops); IO bound (reads throttled to IO_MBPS by the throttled
#      engine, --io-limit-mbps); consumer bound (a consumer that sleeps CONSUMER_MS a
#      batch). One warm-up epoch and EPOCHS measured, so auto's figure includes its
#      climb. Target auto >= 0.95 of the best; settle time (feed seconds at the tuner's
#      last change) <= 10 s.
#   2. auto vs today's default (--threads 0: the CPU plan) on IMAGES (IMG_WARMUP warm-up
#      epochs) and TOKENS (TOKEN_EPOCHS, after twice as many warm-up), A/B alternated
#      over ROUNDS: the settled settings. Target: auto not worse than 3 %.
#   3. reserve_cores 1 vs 0, 2 decode threads, a consumer burning BURN_MS of CPU a
#      batch: its step time (wall per burn) and the feed rate both ways.
#   4. the metrics endpoint scraped every second (bench/metrics_scrape.sh) under auto.
#   5. storage whose reads each take LATENCY_MS but run many at once (--io-latency-ms:
#      networked block storage, an object store), where the IO queue depth sets the
#      rate: auto (which tunes the depth from 16) vs fixed depths 16, 64 (the untuned
#      default) and 256 at 2 threads, batches of 16, DEPTH_EPOCHS epochs after one warm-up.
# Env defaults: GRID_ROUNDS 2, EPOCHS 2, IMG_WARMUP 3, TOKEN_EPOCHS 20, ROUNDS 3,
# IO_MBPS 40, CONSUMER_MS 150, BURN_MS 30, LATENCY_MS 50, DEPTH_EPOCHS 4; SKIP: parts to
# skip (e.g. "14").
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $# -ge 2 ]] || { sed -n 2,28p "$0" >&2; exit 2; }
images=$1 tokens=$2
out=${3:-$(mktemp -d)}
mkdir -p "$out"
IMG_WARMUP=${IMG_WARMUP:-3} grid_rounds=${GRID_ROUNDS:-2} epochs=${EPOCHS:-2} TOKEN_EPOCHS=${TOKEN_EPOCHS:-20}
rounds=${ROUNDS:-3} io_mbps=${IO_MBPS:-40} consumer_ms=${CONSUMER_MS:-150} burn_ms=${BURN_MS:-30}
latency_ms=${LATENCY_MS:-50} depth_epochs=${DEPTH_EPOCHS:-4}
skip=${SKIP:-}
common=(--limit-records 16 --limit-seconds 0.1 --json)
# Epochs of each run: set per part (token epochs are short: more of them).
run_epochs=(--epochs "$epochs" --warmup-epochs 1)

# feed NAME ARGS...: one bench feed --json run into $out/NAME.json; prints
# "samples/s threads slots settle_s changes consumer_step_ms cpu_s queue_depth".
feed() {
  local name=$1 cpu
  shift
  cpu=$(cpu_seconds "$out/$name.txt" "$STOKER" bench feed "$@" "${run_epochs[@]}" "${common[@]}")
  tail -n 1 "$out/$name.txt" > "$out/$name.json"
  /usr/bin/python3 - "$out/$name.json" "$cpu" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t = j.get("tune", {})
print(f'{j["samples_per_s"]:.0f} {j["threads"]} {j["slots"]} {t.get("last_change_s", 0):.1f} '
      f'{len(t.get("history", []))} {j.get("consumer_step_ms", 0):.2f} {sys.argv[2]} {t.get("queue_depth", 0)}')
EOF
}

# The fixed settings a workload's auto is measured against: "NAME ARGS..." each.
grid=()
for th in 1 2 3; do
  for sl in 4 8; do grid+=("t$th-s$sl --threads $th --slots $sl"); done
done

# workload LABEL DATASET ARGS...: GRID_ROUNDS rounds of the grid and auto alternated
# (the load of a shared machine weighs on all alike); the median of each setting, the
# best fixed one, and auto's ratio to it and settle time.
workload() {
  local label=$1 ds=$2 i th sl qd r set settle changes best best_name ar g name
  shift 2
  : > "$out/$label.rates"
  for ((i = 1; i <= grid_rounds; ++i)); do
    for g in "${grid[@]}"; do
      read -r name set <<< "$g"
      # shellcheck disable=SC2086  # the setting's words
      read -r r _ < <(feed "$label-$name-$i" "$ds" $set "$@")
      echo "$name $r" >> "$out/$label.rates"
    done
    read -r r th sl settle changes _ _ qd < <(feed "$label-auto-$i" "$ds" --threads auto "$@")
    echo "auto $r" >> "$out/$label.rates"
    echo "$settle" >> "$out/$label.settle"
    echo "$label round $i: auto $r samples/s at threads $th slots $sl queue depth $qd, $changes changes, last at $settle s of feed"
  done
  for set in $(awk '{print $1}' "$out/$label.rates" | sort -u); do
    echo "$set $(awk -v s="$set" '$1 == s {print $2}' "$out/$label.rates" | median)"
  done > "$out/$label.medians"
  read -r best_name best < <(grep -v '^auto ' "$out/$label.medians" | sort -k2 -g | tail -n 1)
  ar=$(awk '$1 == "auto" {print $2}' "$out/$label.medians")
  echo "$label: fixed medians $(grep -v '^auto ' "$out/$label.medians" | tr '\n' ' ')"
  echo "$label: auto/best $(ratio "$ar" "$best") (auto $ar, best fixed $best_name $best samples/s, medians of $grid_rounds);" \
    "settle $(sort -g "$out/$label.settle" | tail -n 1) s at most" | tee -a "$out/summary.txt"
  /usr/bin/python3 -c 'import json,sys; [print("   ", c) for c in json.load(open(sys.argv[1]))["tune"]["history"]]' \
    "$out/$label-auto-1.json"
}

if [[ $skip != *1* ]]; then
  workload decode "$images" --size 224
  workload io "$images" --size 64 --transform eval --io-limit-mbps "$io_mbps"
  workload consumer "$images" --size 224 --consumer-ms "$consumer_ms"
fi

if [[ $skip != *2* ]]; then
  # The tuner's first move comes after about 1.2 s of feed and its trial takes 0.8 s:
  # warm-up epochs cover that, so the figures compare the settled settings.
  run_epochs=(--epochs "$epochs" --warmup-epochs "$IMG_WARMUP")
  run_auto() { feed "img-auto-$1" "$images" --threads auto | awk '{print $1, $7}'; }
  run_default() { feed "img-default-$1" "$images" --threads 0 | awk '{print $1, $7}'; }
  ab_rounds "images auto vs default" "$rounds" default run_default auto run_auto | tee -a "$out/summary.txt"
  run_epochs=(--epochs "$TOKEN_EPOCHS" --warmup-epochs "$((2 * TOKEN_EPOCHS))")
  run_tauto() { feed "tok-auto-$1" "$tokens" --threads auto | awk '{print $1, $7}'; }
  run_tdefault() { feed "tok-default-$1" "$tokens" --threads 0 | awk '{print $1, $7}'; }
  ab_rounds "tokens auto vs default" "$rounds" default run_tdefault auto run_tauto | tee -a "$out/summary.txt"
  run_epochs=(--epochs "$epochs" --warmup-epochs 1)
fi

if [[ $skip != *3* ]]; then
  for ((i = 1; i <= rounds; ++i)); do
    for rc in 0 1; do
      read -r r _ _ _ _ step _ < <(feed "reserve$rc-$i" "$images" --threads 2 --reserve-cores "$rc" --size 224 \
        --consumer-burn-ms "$burn_ms")
      echo "reserve_cores $rc round $i: consumer step $step ms (burn $burn_ms ms), feed $r samples/s"
      echo "$rc $step $r" >> "$out/reserve.txt"
    done
  done
  for rc in 0 1; do
    echo "reserve_cores $rc: median consumer step $(awk -v c="$rc" '$1 == c {print $2}' "$out/reserve.txt" | median) ms," \
      "feed $(awk -v c="$rc" '$1 == c {print $3}' "$out/reserve.txt" | median) samples/s (burn $burn_ms ms)" \
      | tee -a "$out/summary.txt"
  done
fi

if [[ $skip != *5* ]]; then
  grid=("t2-q16 --threads 2 --qd 16" "t2-q64 --threads 2 --qd 64" "t2-q256 --threads 2 --qd 256")
  run_epochs=(--epochs "$depth_epochs" --warmup-epochs 1)
  workload latency "$images" --size 64 --transform eval --batch 16 --io-latency-ms "$latency_ms"
  run_epochs=(--epochs "$epochs" --warmup-epochs 1)
fi

if [[ $skip != *4* ]]; then
  STOKER_AB_ROUNDS=$rounds bash "$(dirname "$0")/metrics_scrape.sh" "$images" -- --threads auto --epochs 4 --size 64 \
    --batch 16 | tee -a "$out/summary.txt"
fi
echo "results in $out"
