#!/usr/bin/python3
"""Token rows through stoker's Python loader, per token dtype, next to `stoker bench
feed` (the C++ loop) on the same dataset, threads and batch size: what the Python layer
and the widening to torch's dtypes cost.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_tokens.py DATASET \
        [--threads N] [--batch B] [--epochs E] [--cli build/stoker] [--json]

Each Python run iterates E epochs and touches nothing but the batch's shape (as
`bench feed` does). Prints rows/s of each and its ratio to the C++ loop; with --json the
last line is one JSON object.
"""

import argparse
import json
import subprocess
import time

import stoker


def python_rows_per_s(path, threads, batch, epochs, **kw):
    loader = stoker.Loader(path, batch_size=batch, threads=threads, **kw)
    rows = 0
    t0 = time.perf_counter()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for b in loader:
            rows += b["tokens"].shape[0]
    seconds = time.perf_counter() - t0
    loader.close()
    return rows / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--cli", default=None, help="stoker binary: also run `bench feed` (the C++ loop)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    out = {"dataset": a.dataset, "threads": a.threads, "batch": a.batch, "epochs": a.epochs, "python": {}}
    if a.cli:
        feed = subprocess.run([a.cli, "bench", "feed", a.dataset, "--threads", str(a.threads), "--batch",
                               str(a.batch), "--epochs", str(a.epochs), "--json"],
                              check=True, capture_output=True, text=True)
        out["cpp_rows_per_s"] = json.loads(feed.stdout.strip().splitlines()[-1])["samples_per_s"]
    for name, kw in (("int64 (torch default)", {}), ("int32", {"token_dtype": "int32"}),
                     ("stored (numpy=True)", {"numpy": True})):
        rate = python_rows_per_s(a.dataset, a.threads, a.batch, a.epochs, **kw)
        out["python"][name] = rate
        ratio = f", {rate / out['cpp_rows_per_s']:.2f} of the C++ loop" if a.cli else ""
        print(f"python {name}: {rate:,.0f} rows/s{ratio}")
    if a.cli:
        print(f"C++ bench feed: {out['cpp_rows_per_s']:,.0f} rows/s")
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
