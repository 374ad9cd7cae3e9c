"""Packing in parts (#31), timed in one run:

  1. a --fast-crop ImageFolder pack on a Dask LocalCluster of 1 worker process (1 part)
     and of 2 worker processes (2 parts), each worker packing with 1 thread, alternated
     over ROUNDS rounds (A B A B: a shared machine's load weighs on both alike); the
     cluster is started before the clock and the commit is inside it. Target: 2 workers
     >= 1.8x as fast as 1.
  2. `stoker commit` of 10,000 shards from 100 parts (each shard one 4 KiB record, made
     with stoker.Writer), timed by the tool itself. Target: < 5 s.

    PYTHONPATH=build/python /usr/bin/python3 bench/pack_parts.py [--images 1200] [--rounds 3] [--cli build/stoker]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import stoker
import stoker.dask


def dask_pack(src, out, workers):
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster) as client:
        cpu0 = client.run(_cpu_seconds)  # also: the workers are up before the clock starts
        t0 = time.perf_counter()
        r = stoker.dask.pack(src, out, kind="imagefolder", parts=workers, client=client, fast_crop=True, threads=1)
        dt = time.perf_counter() - t0
        cpu1 = client.run(_cpu_seconds)
    assert r["outcome"] == "committed", r
    cpu = sorted(cpu1[w] - cpu0[w] for w in cpu1)
    return dt, r["records"], [round(x["seconds"], 2) for x in r["part_summaries"]], cpu


def _cpu_seconds():
    import resource

    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def commit_bench(cli, tmp, parts=100, per_part=100):
    out = os.path.join(tmp, "many")
    payload = os.urandom(4096)
    for p in range(parts):
        with stoker.Writer(out, {"b": "bytes"}, shard_size=4096, part=(p, parts)) as w:
            for j in range(per_part):
                w.write({"b": payload})
    proc = subprocess.run([cli, "commit", out], capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cli", default="build/stoker")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="pack_parts_")
    try:
        src = os.path.join(tmp, "src")
        stoker.make_sample_imagefolder(src, images=a.images, classes=10, seed=1)
        times = {1: [], 2: []}
        cpus = {1: [], 2: []}
        for rnd in range(a.rounds):
            for workers in (1, 2):
                out = os.path.join(tmp, f"out{workers}")
                shutil.rmtree(out, ignore_errors=True)
                dt, n, part_secs, cpu = dask_pack(src, out, workers)
                times[workers].append(dt)
                cpus[workers].append(cpu)
                print(f"round {rnd}: {workers} worker{'s' if workers > 1 else ''}: {n} images in {dt:.2f} s "
                      f"({n / dt:.0f} img/s; parts' own seconds {part_secs}; workers' CPU seconds "
                      f"{[round(c, 2) for c in cpu]}; load {os.getloadavg()[0]:.1f})", flush=True)
        m1, m2 = statistics.median(times[1]), statistics.median(times[2])
        print(f"fast-crop pack on Dask: 1 worker {m1:.2f} s, 2 workers {m2:.2f} s (medians): "
              f"speedup {m1 / m2:.2f}x (target >= 1.8x); load {os.getloadavg()[0]:.1f}")
        # On a shared machine the wall ratio is capped by the cores other jobs leave;
        # the CPU split is not: 1 worker's CPU over the busiest of 2 workers' is the
        # speedup two free cores would give (ignoring the fixed cost outside the tasks).
        c1 = statistics.median(sum(c) for c in cpus[1])
        c2 = statistics.median(max(c) for c in cpus[2])
        c2sum = statistics.median(sum(c) for c in cpus[2])
        print(f"CPU seconds: 1 worker {c1:.2f}; 2 workers {c2sum:.2f} in all, busiest {c2:.2f}: "
              f"speedup on free cores {c1 / c2:.2f}x, work added by splitting {c2sum / c1 - 1:+.1%}")
        print("commit of 10,000 shards from 100 parts: " + commit_bench(a.cli, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
