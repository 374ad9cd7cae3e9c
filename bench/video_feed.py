#!/usr/bin/python3
"""Video clip feed (#30): stoker's clip feed against its in-memory limit (the same decode
calls over records in RAM), against what users run today, PyAV in a torch DataLoader
with as many workers as stoker has threads, decoding the same clips (same frame count
and stride, same output size, a random box resized; bench/torch_dataloader.py's
PyAVClips, which `stoker bench compare` runs too), and a `--video-gop` re-encoded
pack of the same videos against the original.

    /usr/bin/python3 bench/video_feed.py [--out out/video] [--videos 24] [--seconds 10]
        [--threads 2] [--frames 16] [--stride 2] [--size 112] [--rounds 3] [--epochs 3] [--warmup-epochs 1] [--rss-epochs 5] [--cli build/stoker]
        [--source-gop 50] [--gop 16] [--max-side 0]

Makes the videos with the ffmpeg CLI (testsrc2, 320x240, 25 fps, H.264 with B-frames and
a keyframe every --source-gop frames), packs them with `stoker pack videofolder`, and
(--gop > 0) again with `--video-gop G [--max-side S]`, extracting the re-encoded files so
PyAV reads exactly the bytes stoker does. Per round it alternates `stoker bench feed
--field video=clip:F:S:SIZE` on each pack (feed and limit) and the PyAV DataLoader on
each set of files, and prints each round's clips/s, the ratios and their medians, and
the size of the re-encoded files against the originals.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from torch_dataloader import pyav_feed  # beside this file


def make_videos(out, n, seconds, gop):
    root = os.path.join(out, "videos" if gop == 50 else f"videos-g{gop}")
    paths = []
    for i in range(n):
        d = os.path.join(root, f"c{i % 4}")
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"v{i:03d}.mp4")
        paths.append(p)
        if os.path.exists(p):
            continue
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"testsrc2=size=320x240:rate=25:duration={seconds},noise=alls={5 + i % 7}:allf=t",
                        "-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", str(gop), "-pix_fmt", "yuv420p", p],
                       check=True)
    return root, paths


def pyav_rate(paths, a):
    r = pyav_feed(paths, a.frames, a.stride, a.size, a.threads, float("inf"), a.batch, a.epochs + a.warmup_epochs)
    # Past its first batch (the workers' start), as stoker's figures leave out its warm-up epochs.
    return r["steady_samples_per_s"] or r["samples_per_s"]


def stoker_rate(ds, a):
    out = subprocess.run([a.cli, "bench", "feed", ds, "--field", f"video=clip:{a.frames}:{a.stride}:{a.size}",
                          "--threads", str(a.threads), "--batch", str(a.batch), "--epochs", str(a.epochs),
                          "--warmup-epochs", str(a.warmup_epochs),
                          "--limit-interleaved", "--limit-seconds", "4", "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["samples_per_s"], j["limit_samples_per_s"], j["first_batch_s"], j["peak_rss_bytes"]


def tree_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def pack_reencoded(a, root, src_ds):
    """The --video-gop pack of the videos and its files extracted (what PyAV reads)."""
    tag = f"g{a.gop}" + (f"-s{a.max_side}" if a.max_side else "")
    ds = src_ds + "-" + tag
    if not os.path.exists(os.path.join(ds, "MANIFEST")):
        cmd = [a.cli, "pack", "videofolder", root, ds, "--threads", str(a.threads), "--video-gop", str(a.gop)]
        if a.max_side:
            cmd += ["--max-side", str(a.max_side)]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        note = [l.strip() for l in out.splitlines() if "re-encoded" in l]
        print(f"packed {ds} in {time.perf_counter() - t0:.1f} s: {note[0] if note else ''}", flush=True)
    files = ds + "-files"
    if not os.path.isdir(files):
        subprocess.run([a.cli, "extract", ds, files], check=True, stdout=subprocess.DEVNULL)
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(files) for f in fs)
    return ds, files, paths


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="out/video")
    p.add_argument("--videos", type=int, default=24)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--stride", type=int, default=2)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup-epochs", type=int, default=1, help="stoker's epochs left out of its figures (start-up)")
    p.add_argument("--rss-epochs", type=int, default=5, help="epochs of a stoker.Loader whose RSS is printed after each (0: none)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--source-gop", type=int, default=50, help="keyframe interval of the generated originals")
    p.add_argument("--gop", type=int, default=16, help="--video-gop of the re-encoded pack (0: no re-encode)")
    p.add_argument("--max-side", type=int, default=0, help="--max-side of the re-encoded pack (0: source size)")
    p.add_argument("--cli", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "stoker"))
    a = p.parse_args()
    root, paths = make_videos(a.out, a.videos, a.seconds, a.source_gop)
    ds = os.path.join(a.out, "ds" if a.source_gop == 50 else f"ds-g{a.source_gop}")
    if not os.path.exists(os.path.join(ds, "MANIFEST")):
        subprocess.run([a.cli, "pack", "videofolder", root, ds, "--threads", str(a.threads)], check=True,
                       stdout=subprocess.DEVNULL)
    re_ds = None
    if a.gop > 0:
        re_ds, re_files, re_paths = pack_reencoded(a, root, ds)
        print(f"re-encoded files {tree_bytes(re_files) / 1e6:.1f} MB vs originals {tree_bytes(root) / 1e6:.1f} MB "
              f"(ratio {tree_bytes(re_files) / tree_bytes(root):.3f})", flush=True)
    rows = []
    for r in range(a.rounds):
        feed, limit, first, rss = stoker_rate(ds, a)
        base = pyav_rate(paths, a)
        row = {"feed": feed, "limit": limit, "pyav": base}
        line = (f"round {r}: original: stoker {feed:.1f} clips/s, limit {limit:.1f} (feed/limit {feed / limit:.3f}), "
                f"PyAV DataLoader {base:.1f} (stoker {feed / base:.2f}x); first batch {first:.3f} s, "
                f"peak RSS {rss / 2**20:.0f} MiB")
        if re_ds:
            rfeed, rlimit, _, _ = stoker_rate(re_ds, a)
            rbase = pyav_rate(re_paths, a)
            row.update(rfeed=rfeed, rlimit=rlimit, rpyav=rbase)
            line += (f"\n         re-encoded: stoker {rfeed:.1f} clips/s (limit {rlimit:.1f}; {rfeed / feed:.2f}x the "
                     f"original's), PyAV on the re-encoded files {rbase:.1f}; stoker(re-encoded) / PyAV(original) "
                     f"{rfeed / base:.2f}x, / PyAV(re-encoded) {rfeed / rbase:.2f}x")
        rows.append(row)
        print(line, flush=True)
    med = lambda f: statistics.median(f(x) for x in rows)
    print(f"median: original: stoker {med(lambda x: x['feed']):.1f}, limit {med(lambda x: x['limit']):.1f}, "
          f"PyAV {med(lambda x: x['pyav']):.1f} clips/s; feed/limit {med(lambda x: x['feed'] / x['limit']):.3f}, "
          f"stoker/PyAV {med(lambda x: x['feed'] / x['pyav']):.2f}x")
    if re_ds:
        print(f"median: re-encoded ({os.path.basename(re_ds)}): stoker {med(lambda x: x['rfeed']):.1f}, "
              f"PyAV {med(lambda x: x['rpyav']):.1f} clips/s; stoker re-encoded/original "
              f"{med(lambda x: x['rfeed'] / x['feed']):.2f}x (goal 2x); stoker(re-encoded)/PyAV(original) "
              f"{med(lambda x: x['rfeed'] / x['pyav']):.2f}x, /PyAV(re-encoded) "
              f"{med(lambda x: x['rfeed'] / x['rpyav']):.2f}x (goal 3x)")
    if a.rss_epochs:
        print(f"RSS after each of {a.rss_epochs} epochs (stoker.Loader over {ds}): "
              f"{', '.join(str(m) for m in loader_rss(ds, a))} MiB", flush=True)


def loader_rss(ds, a):
    """The process's RSS in MiB after each epoch of a stoker.Loader over `ds` (bounded memory:
    the footprint is the ring's, flat across epochs)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(a.cli)), "python"))  # build/python beside build/stoker
    import stoker
    loader = stoker.Loader(ds, batch_size=a.batch, threads=a.threads, numpy=True,
                           fields={"video": stoker.VideoClip(frames=a.frames, stride=a.stride, size=a.size)})
    out = []
    for _ in range(a.rss_epochs):
        for _batch in loader:
            pass
        with open("/proc/self/status") as f:
            out.append(next(int(l.split()[1]) // 1024 for l in f if l.startswith("VmRSS")))
    return out


if __name__ == "__main__":
    sys.exit(main())
