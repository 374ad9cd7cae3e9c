#!/usr/bin/env bash
# Samples of varying length packed into rows, and text tokenised in the loader, in one run:
#   1. packing efficiency (non-padding share of the rows' positions) on held-out length
#      distributions: log-normal lengths, and the token counts of real documents; and
#      the same share of max_tokens= batches (padded to their longest sample);
#   2. the in-loader tokenising feed (cl100k_base over real prose) against its own
#      in-memory limit (the same tokenise + write over the texts in RAM, same threads),
#      1 and 2 threads; and the Loader's open, which counts every document's tokens for
#      the plan (1 and 2 threads) or reads the counts an earlier open kept;
#   3. the packed-samples feed (stored tokens) against its in-memory limit, and the same
#      samples in max_tokens= batches (bench feed --max-tokens).
#   bash bench/packed_feed.sh [BUILD_DIR]          (results in out/packed_feed/)
# The text: the English prose Debian ships (as bench/text_bench.sh), cut into documents
# at blank lines. cl100k_base's ranks come from npm's tiktoken (tests/text/oracle.js).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
out=out/packed_feed
. bench/lib.sh
text_corpus "$out"
PYTHONPATH="$build/python" /usr/bin/python3 - "$out" <<'PY'
import json, os, re, shutil, sys
import numpy as np
import stoker
out = sys.argv[1]
text = open(f"{out}/docs.txt", encoding="utf-8", errors="replace").read()
docs = [d for d in re.split(r"\n\s*\n", text) if d.strip()]
tok = stoker.Tokenizer(f"{out}/cl100k_base.tiktoken")
for name, copies in (("text", 1), ("text8", 8)):  # text8: the open's figures on more documents
    if not os.path.exists(f"{out}/{name}/MANIFEST"):
        shutil.rmtree(f"{out}/{name}", ignore_errors=True)
        with stoker.Writer(f"{out}/{name}", fields={"txt": "text"}) as w:
            for _ in range(copies):
                for d in docs:
                    w.write({"txt": d})
real_lengths = np.array([len(tok.encode(d)) + 1 for d in docs])
rng = np.random.default_rng(2026)
dists = {"lognormal(5.5, 1.0)": np.clip(rng.lognormal(5.5, 1.0, 20000).astype(int), 1, 4096),
         "lognormal(6.5, 0.6)": np.clip(rng.lognormal(6.5, 0.6, 20000).astype(int), 1, 4096),
         "real documents (cl100k tokens + EOS)": real_lengths}
rows = []
for name, lengths in dists.items():
    d = f"{out}/samples-{abs(hash(name)) % 10**6}"
    shutil.rmtree(d, ignore_errors=True)
    with stoker.Writer(d, fields={"tokens": ("vararray", "int32", ())}) as w:
        for n in lengths:
            w.write({"tokens": np.arange(n, dtype=np.int32)})
    for seq_len in (2048, 4096):
        for window in (256, 1024):
            l = stoker.Loader(d, batch_size=8, seq_len=seq_len, pack_window=window, long_samples="split", numpy=True)
            delivered = sum(len(b["index"]) for b in l)
            s = l.stats()
            eff = 1 - s["padding_tokens"] / (delivered * seq_len)
            rows.append({"lengths": name, "mean": float(lengths.mean()), "seq_len": seq_len, "window": window,
                         "rows": delivered, "efficiency": round(eff, 4)})
            print(f"packing {name} (mean {lengths.mean():.0f}), seq_len {seq_len}, window {window}: "
                  f"{delivered} rows, efficiency {eff:.4f}")
    # max_tokens=: padded batches under a token budget (length-grouped), the padding's share.
    for max_tokens in (8192, 16384):
        for window in (1024, 8192):  # samples, and at least 128 batches' worth
            l = stoker.Loader(d, max_tokens=max_tokens, pack_window=window, long_samples="truncate", numpy=True)
            positions = sum(b["tokens"].size for b in l)
            s = l.stats()
            eff = 1 - s["padding_tokens"] / positions
            rows.append({"lengths": name, "mean": float(lengths.mean()), "max_tokens": max_tokens,
                         "window": window, "batches": s["batches"], "efficiency": round(eff, 4)})
            print(f"max_tokens {name} (mean {lengths.mean():.0f}), max_tokens {max_tokens}, window {window}: "
                  f"{s['batches']} batches, efficiency {eff:.4f}")
    if name.startswith("lognormal(5.5"):
        os.replace(d, f"{out}/sft") if not os.path.exists(f"{out}/sft") else shutil.rmtree(d)
    else:
        shutil.rmtree(d)
json.dump(rows, open(f"{out}/packing.json", "w"), indent=1)
PY
# Opening: every document's tokens counted (the plan needs them) on 1 and 2 threads, and
# the counts an earlier open kept read instead; 8 copies of the text (68 MB, 106,592
# documents).
rm -rf "$out/token-counts"
open_text() {  # THREADS COUNTS_DIR LABEL
  "$build/stoker" bench feed "$out/text8" --tokenizer "$out/cl100k_base.tiktoken" --eos 100257 --seq-len 2048 \
    --long-samples split --batch 8 --threads "$1" --epochs 1 --limit-seconds 0.1 --token-counts-dir "$2" \
    2>/dev/null | grep '^open:' | sed "s/^/text x8, $3: /"
}
open_text 1 "" "counted on 1 thread"
open_text 2 "" "counted on 2 threads"
open_text 2 "$out/token-counts" "counted on 2 threads and kept"
open_text 2 "$out/token-counts" "kept counts read"
for t in 1 2; do
  "$build/stoker" bench feed "$out/text" --tokenizer "$out/cl100k_base.tiktoken" --eos 100257 --seq-len 2048 \
    --long-samples split --batch 8 --threads $t --warmup-epochs 1 --epochs 8 --limit-interleaved --limit-seconds 4 \
    --token-counts-dir "$out/token-counts" --json > "$out/text_t$t.txt"
  grep -E '^(feed|limit):' "$out/text_t$t.txt" | sed "s/^/text, $t thread(s): /"
done
"$build/stoker" bench feed "$out/sft" --seq-len 2048 --long-samples split --batch 8 --threads 2 --warmup-epochs 1 --epochs 3 --json \
  > "$out/sft.txt"
grep -E '^(feed|limit):' "$out/sft.txt" | sed "s/^/packed samples, 2 threads: /"
"$build/stoker" bench feed "$out/sft" --max-tokens 16384 --threads 2 --warmup-epochs 1 --epochs 3 \
  --json > "$out/sft_max_tokens.txt"
grep -E '^(feed|limit):' "$out/sft_max_tokens.txt" | sed "s/^/max_tokens batches, 2 threads: /"
