#!/usr/bin/env bash
# The metrics endpoint's cost: `bench feed` plain, and with --metrics-port while curl
# scrapes /metrics every second (what a Prometheus with a 1 s scrape interval does),
# alternated in one run (bench/lib.sh's A/B).
#
#   bash bench/metrics_scrape.sh DATASET [-- FEED_ARGS...]
#
# FEED_ARGS default: --threads 2 --epochs 6. ROUNDS: STOKER_AB_ROUNDS (default 5). Prints
# per round, the medians, how many scrapes each scraped run answered, and a scrape's
# time (the steadier figure on a shared machine, where rates swing more than 1 %).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[[ $# -ge 1 ]] || { sed -n 2,9p "$0" >&2; exit 2; }
ds=$1
shift
[[ ${1:-} == -- ]] && shift
feed_args=("$@")
[[ ${#feed_args[@]} -gt 0 ]] || feed_args=(--threads 2 --epochs 6)
feed_args+=(--limit-records 16 --limit-seconds 0.2)
rounds=${STOKER_AB_ROUNDS:-5}
port=${STOKER_METRICS_BENCH_PORT:-19411}
tmp=$(mktemp -d)
scraper=""
trap '[[ -n $scraper ]] && kill "$scraper" 2>/dev/null; rm -rf "$tmp"' EXIT

run_plain() { feed_run "$tmp/plain.$1" "$STOKER" "$ds" "${feed_args[@]}" | awk '{print $1, $2}'; }
run_scraped() {
  (while sleep 1; do curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$port/metrics" || true; done) \
    > "$tmp/codes.$1" &
  scraper=$!
  feed_run "$tmp/scraped.$1" "$STOKER" "$ds" "${feed_args[@]}" --metrics-port "$port" | awk '{print $1, $2}'
  kill "$scraper" 2>/dev/null || true
  wait "$scraper" 2>/dev/null || true
  scraper=""
}
ab_rounds "$(basename "$ds") scraped 1/s" "$rounds" plain run_plain scraped run_scraped
echo "scrapes answered 200 per scraped run: $(for f in "$tmp"/codes.*; do grep -c '^200 ' "$f" || true; done | tr '\n' ' ')"
# A scrape's whole time at curl (connect, render, transfer): an upper bound of the
# server thread's CPU per scrape, so at 1 scrape/s the share of one core it can take.
ms=$(cat "$tmp"/codes.* | awk '$1 == 200 {print $2 * 1000}' | median)
echo "scrape time: median $ms ms each (curl's total), at most $(ratio "$ms" 10 3) % of one core at 1 scrape/s"
