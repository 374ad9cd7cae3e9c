"""Aspect-ratio buckets (issue 30): what bucketing costs, in one run on one machine.

  1. open: seconds to read every record's image size (the header probe the Loader makes
     once at open with buckets=), per record: warm (the shards in the page cache, as in
     the feed rounds) and cold (their pages dropped first with posix_fadvise DONTNEED);
  2. feed: img/s of a bucketed feed ({"pixels": SIZE², "step": 32}) against the square
     feed of the same dataset, alternated, ROUNDS rounds, median of the per-round ratios:
     train (square: RandomResizedCrop SIZE, which decodes only its crop, on average about
     half the image; bucketed: the whole image covers its bucket) and eval (square:
     short side to SIZE/0.875, centre crop; both decode about the whole image);
  3. DCT scaling on the bucket path: the bucketed train feed with the transform's
     allow_dct_scaling on against off, alternated (a JPEG at least twice the bucket's
     size decodes at 1/2 or 1/4 scale).

usage: PYTHONPATH=build/python /usr/bin/python3 bench/buckets_feed.py DATASET [ROUNDS] [THREADS] [SIZE]
  DATASET e.g. from `build/stoker sample imagefolder IMGS --images 2000` and
  `build/stoker pack imagefolder IMGS DATASET`.
"""

import glob
import os
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


def drop_cache(path):
    for f in glob.glob(os.path.join(path, "*.stk")):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cold_open(path, threads, size, buckets):
    drop_cache(path)
    t0 = time.perf_counter()
    stoker.Loader(path, batch_size=32, threads=threads, size=size, buckets=buckets)
    return time.perf_counter() - t0


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 224
    buckets = {"pixels": size * size, "step": 32}
    feed(path, threads, size=size)  # warm-up: the page cache and the first loader's start
    ratios, opens = {"train": [], "eval": []}, []
    for r in range(rounds):
        for t in ("train", "eval"):
            _, square, _ = feed(path, threads, size=size, transform=t)
            opened, bucketed, loader = feed(path, threads, size=size, transform=t, buckets=buckets)
            opens.append(opened)
            ratios[t].append(bucketed / square)
            print(f"round {r} {t}: square {square:.0f} img/s, bucketed {bucketed:.0f} img/s "
                  f"({bucketed / square:.3f}), open with buckets {opened:.3f} s")
    n = loader.epoch_samples
    print(f"buckets {loader.buckets}")
    print(f"open: median {statistics.median(opens):.3f} s for {n} records "
          f"({statistics.median(opens) / n * 1e6:.1f} us a record, page cache warm)")
    dct = []
    for r in range(rounds):
        rate = {}
        for on in (False, True):
            t = stoker.ImageTransform()
            t.size = size
            t.allow_dct_scaling = on
            rate[on] = feed(path, threads, transform=t, buckets=buckets)[1]
        dct.append(rate[True] / rate[False])
        print(f"round {r} bucketed train: DCT scaling off {rate[False]:.0f} img/s, on {rate[True]:.0f} img/s")
    colds = [cold_open(path, threads, size, buckets) for _ in range(rounds)]
    print(f"open cold: median {statistics.median(colds):.3f} s ({statistics.median(colds) / n * 1e6:.1f} us a record)")
    print(f"bucketed train, DCT scaling on / off: median {statistics.median(dct):.3f} ({min(dct):.3f}-{max(dct):.3f})")
    for t, x in ratios.items():
        print(f"{t}: bucketed / square img/s median {statistics.median(x):.3f} ({min(x):.3f}-{max(x):.3f})")


if __name__ == "__main__":
    main()
