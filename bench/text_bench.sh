#!/usr/bin/env bash
# Tokenizer speed against the references, on the same documents, in one run:
#   stoker's cl100k_base vs npm tiktoken (tiktoken's Rust in WASM), and stoker's
#   byte-level tokenizer.json vs Hugging Face tokenizers (npm @anush008/tokenizers,
#   native) on the same GPT-2-ranks tokenizer.json; 1 and 2 threads each.
#   bash bench/text_bench.sh [BUILD_DIR] [SECONDS]      (results in out/text_bench/)
# The text: the English prose Debian ships (/usr/share/common-licenses and the packages'
# copyright files), about 8 MB, cut into documents at blank lines. The tokenizer files
# come from tests/text/oracle.js (the ranks npm's tiktoken ships). Needs node and the npm
# packages tiktoken and @anush008/tokenizers (.ci/install-deps installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${2:-3}
out=out/text_bench
. bench/lib.sh
text_corpus "$out"
echo "text: $(wc -c < "$out/docs.txt") bytes"
STOKER_BENCH_TOKENIZER="$out/cl100k_base.tiktoken" STOKER_BENCH_TOKENIZER_JSON="$out/gpt2-bytelevel.json" \
  STOKER_BENCH_TEXT="$out/docs.txt" "$build/tokenizer_bench" --benchmark_min_time="$secs" \
  --benchmark_format=json > "$out/stoker.json"
: > "$out/references.jsonl"
for t in 1 2; do
  node bench/text_bench.js tiktoken $t "$out/docs.txt" "$out/gpt2-bytelevel.json" "$secs" >> "$out/references.jsonl"
  RAYON_NUM_THREADS=$t node bench/text_bench.js hf_tokenizers $t "$out/docs.txt" "$out/gpt2-bytelevel.json" "$secs" \
    >> "$out/references.jsonl"
done
/usr/bin/env python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
ours = {}
for b in json.load(open(f"{out}/stoker.json"))["benchmarks"]:
    name = "cl100k" if "Cl100k" in b["name"] else "bytelevel"
    ours[(name, b["threads"])] = b["items_per_second"]
refs = {}
for line in open(f"{out}/references.jsonl"):
    r = json.loads(line)
    refs[("cl100k" if r["ref"] == "tiktoken" else "bytelevel", r["threads"])] = r["tokens_per_s"]
names = {"cl100k": "cl100k_base: stoker vs npm tiktoken", "bytelevel": "GPT-2 tokenizer.json: stoker vs HF tokenizers"}
for key, label in names.items():
    for t in (1, 2):
        o, r = ours[(key, t)], refs[(key, t)]
        print(f"{label}, {t} thread{'s' if t > 1 else ''}: {o/1e6:.2f} M vs {r/1e6:.2f} M tokens/s "
              f"({o/t/1e6:.2f} M vs {r/t/1e6:.2f} M per core) -> {o/r:.2f}x")
PY
