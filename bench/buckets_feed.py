"""Aspect-ratio buckets (issue 30): what bucketing costs, in one run on one machine.

  1. open: seconds to read every record's image size (the header probe the Loader makes
     once at open with buckets=), per record;
  2. feed: img/s of a bucketed train feed ({"pixels": SIZE², "step": 32}) against the
     square train feed (RandomResizedCrop SIZE) of the same dataset, alternated, ROUNDS
     rounds; median of the per-round ratios.

usage: PYTHONPATH=build/python /usr/bin/python3 bench/buckets_feed.py DATASET [ROUNDS] [THREADS] [SIZE]
  DATASET e.g. from `build/stoker sample imagefolder IMGS --images 2000` and
  `build/stoker pack imagefolder IMGS DATASET`.
"""

import statistics
import sys
import time

import stoker


def feed(path, threads, **kw):
    t0 = time.perf_counter()
    loader = stoker.Loader(path, batch_size=32, threads=threads, **kw)
    opened = time.perf_counter() - t0
    n, t1 = 0, time.perf_counter()
    for b in loader:
        n += b["image"].shape[0]
    return opened, n / (time.perf_counter() - t1), loader


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 224
    buckets = {"pixels": size * size, "step": 32}
    feed(path, threads, size=size)  # warm-up: the page cache and the first loader's start
    ratios, opens = [], []
    for r in range(rounds):
        _, square, _ = feed(path, threads, size=size)
        opened, bucketed, loader = feed(path, threads, size=size, buckets=buckets)
        opens.append(opened)
        ratios.append(bucketed / square)
        print(f"round {r}: square {square:.0f} img/s, bucketed {bucketed:.0f} img/s ({bucketed / square:.3f}), "
              f"open with buckets {opened:.3f} s")
    n = loader.epoch_samples
    print(f"buckets {loader.buckets}")
    print(f"open: median {statistics.median(opens):.3f} s for {n} records "
          f"({statistics.median(opens) / n * 1e6:.1f} us a record, page cache warm)")
    print(f"bucketed / square img/s: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
