#!/bin/bash
# The loader's feed over http:// against the same dataset read locally (issue 17), in
# one run, alternating per round:
#   local      `bench feed DIR`, first (1 epoch) and last (2 epochs) in each round
#   cold       `bench feed URL --cache-dir FRESH`  (every shard fetched during the epoch)
#   warm       `bench feed URL --cache-dir SAME`   (a second process on the cold run's cache)
#   epoch 2    the second epoch of a 2-epoch cold run (the same loader, shards in place)
#   throttled  `bench feed PROXY_URL --cache-dir FRESH` behind tests/util/fault_proxy.py
#              --rate RATE (one token bucket over every body): against what RATE allows,
#              RATE / (dataset bytes / images) images/s
#   records    the throttled run through a cache of two shards: a global shuffle then
#              reads each record by a ranged GET (remote_reads auto), against the same
#              allowance (RF_ORDER shuffled only; "-" otherwise)
# Servers on loopback: nginx-light serving the dataset, the fault proxy in front of it.
#   bash bench/remote_feed.sh [ROUNDS]     (build/stoker built; nginx and /usr/bin/python3)
# Environment: RF_DIR (/tmp/stoker-rfeed), RF_IMAGES (400), RF_SHARD (4MiB), RF_RATE
# (4000000 bytes/s), RF_ORDER (shuffled), RF_WINDOW (16: chunk_local's --window-chunks), RF_THREADS (2), RF_FEED_ARGS (bench feed
# options for the URL runs; default "--part 1MiB": a 4 MiB shard in 4 parallel ranged
# GETs, as a 256 MiB shard is in 64 by default), STOKER (build/stoker).
set -euo pipefail
rounds=${1:-3}
dir=${RF_DIR:-/tmp/stoker-rfeed}
. "$(dirname "$0")/lib.sh"
cli=$STOKER
images=${RF_IMAGES:-400}
shard=${RF_SHARD:-4MiB}
rate=${RF_RATE:-4000000}
order=${RF_ORDER:-shuffled}
window=${RF_WINDOW:-16}
threads=${RF_THREADS:-2}
extra=${RF_FEED_ARGS---part 1MiB}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
[ -d "$dir/images" ] || "$cli" sample imagefolder "$dir/images" --images "$images" --seed 1 >/dev/null
[ -d "$dir/www/ds" ] || "$cli" pack imagefolder "$dir/images" "$dir/www/ds" --shard-size "$shard" >/dev/null

# nginx on a free loopback port.
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ngx=$dir/nginx
mkdir -p "$ngx"
cat >"$ngx/nginx.conf" <<EOF
daemon off; master_process off; worker_processes 1;
pid $ngx/nginx.pid; error_log $ngx/error.log;
events { worker_connections 512; }
http { access_log off; sendfile on;
  client_body_temp_path $ngx/b; proxy_temp_path $ngx/p; fastcgi_temp_path $ngx/f;
  uwsgi_temp_path $ngx/u; scgi_temp_path $ngx/s;
  server { listen 127.0.0.1:$port; root $dir/www; location / { } } }
EOF
nginx -p "$ngx" -c "$ngx/nginx.conf" &
ngx_pid=$!
# The fault proxy exits when its stdin closes (the coprocess's pipe, closed at exit).
coproc PROXY { exec /usr/bin/python3 "$here/tests/util/fault_proxy.py" --upstream "http://127.0.0.1:$port/" --rate "$rate"; }
# shellcheck disable=SC2153  # set by coproc
proxy_pid=$PROXY_PID
cleanup() {
  kill "$ngx_pid" 2>/dev/null || true
  kill "$proxy_pid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
read -r -t 10 line <&"${PROXY[0]}"
proxy_port=${line#PORT }
for _ in $(seq 100); do
  /usr/bin/python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" 2>/dev/null && break
  sleep 0.05
done
url=http://127.0.0.1:$port/ds
slow_url=http://127.0.0.1:$proxy_port/ds
bytes=$(du -sb "$dir/www/ds" | cut -f1)
echo "dataset: $images images, $bytes bytes, shards of $shard; order $order (window $window chunks), $threads decode threads;" \
     "throttle $rate bytes/s (allows $(awk "BEGIN{printf \"%.1f\", $rate / ($bytes / $images)}") images/s)"

# One feed: prints "epoch0_samples_per_s epoch1_samples_per_s epoch0_bottleneck net_bytes_per_s
# requests_per_s hit_rate cpu_ms_per_sample" (the network figures of epoch 0, "-" where
# there are none; CPU: user + sys of the whole process over every sample it fed). On a
# machine shared with other jobs the wall rates swing with their load, the CPU cost per
# sample far less: a decode-bound feed rate goes as its inverse.
feed() {
  local ds=$1 out; shift
  out=$( { TIMEFORMAT='%U %S'; time "$cli" bench feed "$ds" --threads "$threads" --batch 32 --order "$order" \
           --window-chunks "$window" --limit-seconds 0.05 --limit-records 8 --json "$@" 2>/dev/null; } 2>&1 )
  echo "$out" | /usr/bin/python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
j = json.loads(next(l for l in lines if l.startswith("{")))
user, sys_ = map(float, lines[-1].split())
pe = j["per_epoch"]
n = pe[0].get("network") or {}
hr = n.get("hit_rate")
print("%.1f %.1f %s %.0f %.1f %s %.3f" % (pe[0]["samples_per_s"], pe[1]["samples_per_s"] if len(pe) > 1 else 0,
      pe[0]["bottleneck"], n.get("bytes_per_s", 0), n.get("requests_per_s", 0), "-" if hr is None else "%.2f" % hr,
      (user + sys_) / j["samples"] * 1e3))'
}
mb() { awk "BEGIN{printf \"%.1f\", $1 / 1e6}"; }
div() { ratio "$1" "$2"; }

# Each round: local first (1 epoch) and last (2 epochs), the mean of their first epochs
# the baseline (the first one's CPU per image, like the cold and warm runs of 1 epoch);
# between them the cold run, the warm run on its cache, a 2-epoch cold run (its second
# epoch, shards held by the same loader, against the last local run's second epoch) and
# the throttled run.
ratios=$dir/ratios.txt
: >"$ratios"
allowed=$(awk "BEGIN{print $rate / ($bytes / $images)}")
for r in $(seq "$rounds"); do
  rm -rf "$dir/cache" "$dir/cache2" "$dir/cache3" "$dir/cache4"
  read -r la1 _ _ _ _ _ lcpu < <(feed "$dir/www/ds")
  # shellcheck disable=SC2086
  read -r cold _ cold_b cold_bps cold_rps cold_hr cold_cpu < <(feed "$url" --cache-dir "$dir/cache" $extra)
  # shellcheck disable=SC2086
  read -r warm _ _ _ warm_rps warm_hr warm_cpu < <(feed "$url" --cache-dir "$dir/cache" $extra)
  # shellcheck disable=SC2086
  read -r _ ep2 _ _ _ _ _ < <(feed "$url" --cache-dir "$dir/cache2" --epochs 2 $extra)
  # shellcheck disable=SC2086
  read -r slow _ slow_b slow_bps _ _ _ < <(feed "$slow_url" --cache-dir "$dir/cache3" $extra)
  rec=- rec_b=- rt=-
  if [ "$order" = shuffled ]; then
    # shellcheck disable=SC2086
    read -r rec _ rec_b _ _ _ _ < <(feed "$slow_url" --cache-dir "$dir/cache4" --cache-limit "$((2 * $(numfmt --from=auto "${shard%B}")))" $extra)
    rt=$(div "$rec" "$allowed")
  fi
  read -r lb1 l2 _ _ _ _ _ < <(feed "$dir/www/ds" --epochs 2)
  l1=$(awk "BEGIN{print ($la1 + $lb1) / 2}")
  c=$(div "$cold" "$l1"); w=$(div "$warm" "$l1"); e=$(div "$ep2" "$l2"); t=$(div "$slow" "$allowed")
  bw=$(div "$slow_bps" "$rate")
  cc=$(div "$lcpu" "$cold_cpu"); wc=$(div "$lcpu" "$warm_cpu")
  echo "round $r: local $la1/$lb1 img/s (epoch 2: $l2) | cold $cold img/s = $c of local, CPU/image $cc of local's (fetched $(mb "$cold_bps") MB/s," \
       "$cold_rps req/s, hit rate $cold_hr, verdict $cold_b) | warm $warm = $w, CPU/image $wc ($warm_rps req/s, hit rate $warm_hr)" \
       "| epoch 2 $ep2 = $e of local's epoch 2 | throttled $slow img/s = $t of the $(awk "BEGIN{printf \"%.1f\", $allowed}")" \
       "allowed (fetched $(mb "$slow_bps") MB/s = $bw of the rate, verdict $slow_b) | records $rec img/s = $rt of it (verdict $rec_b)"
  echo "$c $w $e $t $bw $cc $wc $rt" >>"$ratios"
done
/usr/bin/python3 - "$ratios" <<'EOF'
import statistics, sys
rows = [[float(x) if x != "-" else None for x in l.split()] for l in open(sys.argv[1]) if l.strip()]
names = ["cold/local", "warm/local", "epoch2/local", "throttled/allowed", "throttled fetch/rate", "cold local/remote CPU per image", "warm local/remote CPU per image", "throttled records/allowed"]
cols = [[x for x in c if x is not None] for c in zip(*rows)]
print("medians: " + ", ".join("%s %.3f (%.3f-%.3f)" % (n, statistics.median(c), min(c), max(c))
                              for n, c in zip(names, cols) if c))
EOF
