# Shared by the bench/ scripts (sourced: . "$(dirname "$0")/lib.sh"): which stoker to
# measure, the A/B alternation, CPU seconds of a run, medians and ratios.
#
# On a machine shared with other jobs a single run's rate swings with their load. A
# comparison therefore alternates its runs (A B A B ...) in one session, so the load
# weighs on both alike, and reports medians over the rounds (one disturbed round moves a
# median little). Beside each wall rate it reports the run's CPU seconds (user + system):
# when both runs do the same work, that is the steadier figure.

# STOKER: the tool to measure. Default: this tree's build/stoker, else stoker on PATH.
if [[ -z "${STOKER:-}" ]]; then
  _bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [[ -x "$_bench_root/build/stoker" ]]; then STOKER="$_bench_root/build/stoker"; else STOKER=stoker; fi
  unset _bench_root
fi
export STOKER

# median: the median of the numbers on stdin, one per line.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# ratio A B [DECIMALS]: A / B (3 decimals unless told).
ratio() { awk -v a="$1" -v b="$2" -v d="${3:-3}" 'BEGIN {printf "%.*f\n", d, a / b}'; }

# cpu_seconds OUT CMD...: runs CMD, its stdout to the file OUT and its stderr dropped;
# prints the CPU seconds (user + system) it took.
cpu_seconds() {
  local out=$1 TIMEFORMAT='%U %S'
  shift
  { time "$@" > "$out" 2> /dev/null; } 2>&1 | awk '{print $1 + $2}'
}

# feed_run OUT BIN DATASET ARGS...: one `BIN bench feed DATASET ARGS...`, its report in
# OUT; prints "samples/s cpu-seconds pipeline/limit" (the last from its limit: line,
# empty without one).
feed_run() {
  local out=$1 bin=$2 cpu
  shift 2
  cpu=$(cpu_seconds "$out" "$bin" bench feed "$@")
  echo "$(awk '/^feed:/ {print $2}' "$out") $cpu $(awk '/^limit:/ {print $NF}' "$out")"
}

# ab_rounds LABEL ROUNDS NAME_A FN_A NAME_B FN_B: the A/B alternation. Each round runs
# FN_A then FN_B (each called with the round number, each printing "samples/s
# cpu-seconds") and prints both; then one line of medians:
#   LABEL: median NAME_A R, NAME_B R samples/s (NAME_B/NAME_A x); CPU s a vs b (NAME_A/NAME_B y)
# and one of the medians of the per-round ratios (the same ratios, round by round).
ab_rounds() {
  local label=$1 rounds=$2 name_a=$3 fn_a=$4 name_b=$5 fn_b=$6 i ra xa rb xb
  local -a a=() b=() ca=() cb=() rr=() rc=()
  for ((i = 1; i <= rounds; ++i)); do
    read -r ra xa < <("$fn_a" "$i")
    read -r rb xb < <("$fn_b" "$i")
    echo "$label round $i: $name_a $ra samples/s ($xa CPU s), $name_b $rb samples/s ($xb CPU s)"
    a+=("$ra") b+=("$rb") ca+=("$xa") cb+=("$xb")
    rr+=("$(ratio "$rb" "$ra")") rc+=("$(ratio "$xa" "$xb")")
  done
  awk -v t="$label" -v na="$name_a" -v nb="$name_b" -v a="$(printf '%s\n' "${a[@]}" | median)" \
    -v b="$(printf '%s\n' "${b[@]}" | median)" -v ca="$(printf '%s\n' "${ca[@]}" | median)" \
    -v cb="$(printf '%s\n' "${cb[@]}" | median)" \
    'BEGIN {printf "%s: median %s %.0f, %s %.0f samples/s (%s/%s %.2f); CPU s %.2f vs %.2f (%s/%s %.2f)\n",
            t, na, a, nb, b, nb, na, b / a, ca, cb, na, nb, ca / cb}'
  echo "$label: per-round medians: $name_b/$name_a samples/s $(printf '%s\n' "${rr[@]}" | median)" \
       "(rounds: ${rr[*]}), $name_a/$name_b CPU s $(printf '%s\n' "${rc[@]}" | median) (rounds: ${rc[*]})"
}

# text_corpus DIR: the text benchmarks' inputs, made once: DIR/docs.txt, the English prose
# Debian ships (/usr/share/common-licenses and the packages' copyright files, ~8 MB, cut
# into documents at blank lines by the caller), and DIR/cl100k_base.tiktoken with the other
# tokenizer files tests/text/oracle.js writes (the ranks npm's tiktoken ships; needs node
# and the npm packages .ci/install-deps installs).
text_corpus() {
  local dir=$1
  mkdir -p "$dir"
  export NODE_PATH=$(npm root -g)
  if [ ! -s "$dir/docs.txt" ]; then
    for f in /usr/share/common-licenses/* /usr/share/doc/*/copyright; do
      [ -f "$f" ] && { cat "$f"; printf '\n\n'; }
    done > "$dir/all.txt"
    head -c 8000000 "$dir/all.txt" > "$dir/docs.txt"
    rm "$dir/all.txt"
  fi
  if [ ! -s "$dir/cl100k_base.tiktoken" ]; then
    echo '[]' > "$dir/empty.json"
    node tests/text/oracle.js "$dir" "$dir/empty.json" >/dev/null
  fi
}
