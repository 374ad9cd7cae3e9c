#!/usr/bin/python3
"""Video clip feed (#30): stoker's clip feed against its in-memory limit (the same decode
calls over records in RAM) and against what users run today, PyAV in a torch
DataLoader with as many workers as stoker has threads, decoding the same clips (same
frame count and stride, same output size, a random box resized).

    /usr/bin/python3 bench/video_feed.py [--out out/video] [--videos 24] [--seconds 10]
        [--threads 2] [--frames 16] [--stride 2] [--size 112] [--rounds 3] [--cli build/stoker]

Makes the videos with the ffmpeg CLI (testsrc2, 320x240, 25 fps, H.264 with B-frames and
a 2 s GOP), packs them with `stoker pack videofolder`, then alternates, per round,
`stoker bench feed --field video=clip:F:S:SIZE` (feed and limit) and the PyAV
DataLoader over the same files, and prints each round's clips/s and the medians.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def make_videos(out, n, seconds):
    root = os.path.join(out, "videos")
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
                        "-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", "50", "-pix_fmt", "yuv420p", p],
                       check=True)
    return root, paths


class PyAVClips:
    """A torch Dataset: clip i of a file list, decoded with PyAV as users do (seek to the
    keyframe before the start, decode up to the last frame, rgb24, a random box resized)."""

    def __init__(self, paths, frames, stride, size, seed=0):
        self.paths, self.frames, self.stride, self.size, self.seed = paths, frames, stride, size, seed

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import av
        import torch
        import torch.nn.functional as F

        rng = np.random.default_rng([self.seed, i, int(time.time() * 1e6) & 0xFFFF])
        with open(self.paths[i], "rb") as f:
            data = f.read()
        with av.open(io.BytesIO(data)) as c:
            st = c.streams.video[0]
            n = st.frames
            rate = float(st.average_rate)
            span = (self.frames - 1) * self.stride
            first = int(rng.integers(0, max(1, n - span)))
            want = [min(first + k * self.stride, n - 1) for k in range(self.frames)]
            tb = float(st.time_base)
            c.seek(int(first / rate / tb), stream=st, backward=True, any_frame=False)
            got = {}
            for fr in c.decode(st):
                idx = int(round(float(fr.pts * st.time_base) * rate))
                if idx in want:
                    got[idx] = fr.to_ndarray(format="rgb24")
                if idx >= want[-1]:
                    break
        h, w = next(iter(got.values())).shape[:2]
        s = float(np.sqrt(rng.uniform(0.25, 1.0)))
        bh, bw = max(1, int(h * s)), max(1, int(w * s))
        y, x = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
        clip = np.stack([got.get(k, got[max(got)]) for k in want])[:, y:y + bh, x:x + bw]
        t = torch.from_numpy(clip).permute(0, 3, 1, 2).float()
        t = F.interpolate(t, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return t.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)


def pyav_rate(paths, a):
    import torch

    ds = PyAVClips(paths, a.frames, a.stride, a.size)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.threads,
                                     persistent_workers=False)
    n = 0
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        for b in dl:
            n += b.shape[0]
    return n / (time.perf_counter() - t0)


def stoker_rate(ds, a):
    out = subprocess.run([a.cli, "bench", "feed", ds, "--field", f"video=clip:{a.frames}:{a.stride}:{a.size}",
                          "--threads", str(a.threads), "--batch", str(a.batch), "--epochs", str(a.epochs),
                          "--limit-interleaved", "--limit-seconds", "4", "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["samples_per_s"], j["limit_samples_per_s"], j["first_batch_s"], j["peak_rss_bytes"]


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
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cli", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "stoker"))
    a = p.parse_args()
    root, paths = make_videos(a.out, a.videos, a.seconds)
    ds = os.path.join(a.out, "ds")
    if not os.path.exists(os.path.join(ds, "MANIFEST")):
        subprocess.run([a.cli, "pack", "videofolder", root, ds, "--threads", str(a.threads)], check=True,
                       stdout=subprocess.DEVNULL)
    rows = []
    for r in range(a.rounds):
        feed, limit, first, rss = stoker_rate(ds, a)
        base = pyav_rate(paths, a)
        rows.append((feed, limit, base))
        print(f"round {r}: stoker {feed:.1f} clips/s, limit {limit:.1f} (feed/limit {feed / limit:.3f}), "
              f"PyAV DataLoader {base:.1f} (stoker {feed / base:.2f}x); first batch {first:.3f} s, "
              f"peak RSS {rss / 2**20:.0f} MiB", flush=True)
    med = lambda i: statistics.median(x[i] for x in rows)
    print(f"median: stoker {med(0):.1f}, limit {med(1):.1f}, PyAV {med(2):.1f} clips/s; "
          f"feed/limit {statistics.median(x[0] / x[1] for x in rows):.3f}, "
          f"stoker/PyAV {statistics.median(x[0] / x[2] for x in rows):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
