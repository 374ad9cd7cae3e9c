#!/usr/bin/python3
"""What users run today, on the same data stoker is measured on: the baselines of #4.

  images  torchvision-style ImageFolder over the JPEG tree, PIL decode,
          RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor, through
          torch.utils.data.DataLoader with num_workers = --threads and batch --batch
          (torchvision is not required: its transforms' parameter draws are
          re-implemented here in a few lines, as torchvision does them);
  tokens  nanoGPT's get_batch over the flat token file with np.memmap: a fresh memmap
          per batch, random windows of --seq-len, int64 inputs and targets;
  videos  PyAV in the DataLoader (#30): a clip of every file of the videofolder, FRAMES
          frames STRIDE apart from a random start (seek to the keyframe before it,
          decode up to its last frame), rgb24, a random box resized to SIZE x SIZE:
          uint8 [FRAMES, SIZE, SIZE, 3], the clips of `--field video=clip:FRAMES:STRIDE:SIZE`.

    /usr/bin/python3 bench/torch_dataloader.py --images IMAGEFOLDER [--threads 2] [--batch 64] [--seconds 10]
    /usr/bin/python3 bench/torch_dataloader.py --tokens-bin FILE [--dtype uint16] [--seq-len 1024] [--batch 32]
    /usr/bin/python3 bench/torch_dataloader.py --videos VIDEOFOLDER [--clip 16:2:112] [--threads 2] [--batch 8]

Prints samples/s; with --json the last line is one JSON object. `stoker bench compare`
(bench/compare.py) runs these beside stoker and the machine's limits, in one run.
Needs Debian's python3-torch, python3-numpy, python3-pil and (videos) python3-av (hence
/usr/bin/python3).
"""
import argparse
import io
import json
import math
import os
import random
import sys
import time


def steady_rate(samples, wall, first_batch_s, batch):
    """Samples/s after the first batch (pipeline start-up left out), or None."""
    if first_batch_s is None or samples <= batch or wall <= first_batch_s:
        return None
    return (samples - batch) / (wall - first_batch_s)


# ---- torch DataLoader + PIL -----------------------------------------------------------------

def rrc_params(w, h, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision RandomResizedCrop.get_params: (left, top, cw, ch)."""
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * random.uniform(*scale)
        ar = math.exp(random.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * ar)))
        ch = int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return random.randint(0, w - cw), random.randint(0, h - ch), cw, ch
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


class PilImageFolder:
    """torchvision.datasets.ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor,
    written against PIL directly (same parameter draws as torchvision's transforms)."""

    def __init__(self, root, size=224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        exts = (".jpg", ".jpeg", ".JPG", ".JPEG", ".png")
        self.samples = []
        for ci, c in enumerate(classes):
            for f in sorted(os.listdir(os.path.join(root, c))):
                if f.endswith(exts):
                    self.samples.append((os.path.join(root, c, f), ci))
        if not self.samples:
            raise ValueError(f"no images under {root}/<class>/")
        self.size, self.scale, self.ratio = size, scale, ratio

    def __len__(self):
        return len(self.samples)

    def crop_params(self, w, h):
        return rrc_params(w, h, self.scale, self.ratio)

    def __getitem__(self, i):
        import numpy as np
        import torch
        from PIL import Image
        path, label = self.samples[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        x, y, cw, ch = self.crop_params(*img.size)
        img = img.resize((self.size, self.size), Image.BILINEAR, box=(x, y, x + cw, y + ch))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        t = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)  # PILToTensor: CHW uint8
        return t, label


def dataloader_feed(ds, threads, seconds, batch, epochs=1):
    """Batches of a torch DataLoader over ds (num_workers = threads, shuffled) for `epochs`
    epochs (None: as many as fit) or `seconds`, whichever ends first. Workers persist
    across epochs, as a user who runs several sets them."""
    import torch
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads, drop_last=False,
                                     persistent_workers=threads > 0 and epochs != 1)
    n = 0
    t0 = time.perf_counter()
    first = shape = None
    epoch = 0
    while (epochs is None or epoch < epochs) and time.perf_counter() - t0 < seconds:
        epoch += 1
        for b in dl:
            x = b[0] if isinstance(b, (tuple, list)) else b
            n += x.shape[0]
            if first is None:
                first, shape = time.perf_counter() - t0, list(x.shape[1:])
            if time.perf_counter() - t0 >= seconds:
                break
    wall = time.perf_counter() - t0
    del dl
    return {"samples": n, "wall_s": wall, "samples_per_s": n / wall if wall > 0 else 0, "first_batch_s": first,
            "steady_samples_per_s": steady_rate(n, wall, first, batch), "epochs": epoch, "sample_shape": shape}


def torch_feed(images, threads, seconds, batch):
    return dataloader_feed(PilImageFolder(images), threads, seconds, batch)


# ---- PyAV clips -----------------------------------------------------------------------------

VIDEO_EXTS = (".mp4", ".mkv", ".webm", ".mov", ".avi")  # what `stoker pack videofolder` takes


def video_files(root):
    """The videos under a videofolder tree (ROOT/<class>/<video>), sorted."""
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.lower().endswith(VIDEO_EXTS))
    if not paths:
        raise ValueError(f"no videos ({', '.join(VIDEO_EXTS)}) under {root}")
    return paths


class PyAVClips:
    """A torch Dataset: clip i of a file list, decoded with PyAV as users do (seek to the
    keyframe before the start, decode up to the last frame, rgb24, a random box resized):
    uint8 [frames, size, size, 3], the layout stoker's clips have."""

    def __init__(self, paths, frames, stride, size, seed=0):
        self.paths, self.frames, self.stride, self.size, self.seed = paths, frames, stride, size, seed

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import av
        import numpy as np
        import torch
        import torch.nn.functional as F

        rng = np.random.default_rng([self.seed, i, int(time.time() * 1e6) & 0xFFFF])
        with open(self.paths[i], "rb") as f:
            data = f.read()
        with av.open(io.BytesIO(data)) as c:
            st = c.streams.video[0]
            rate = float(st.average_rate)
            n = st.frames or max(1, int(round((c.duration or 0) / 1e6 * rate)))  # mkv/webm: no frame count
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


def parse_clip(text):
    """FRAMES:STRIDE:SIZE (as `stoker bench feed --field NAME=clip:FRAMES:STRIDE:SIZE`) -> 3 ints."""
    parts = text.split(":")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"'{text}': want FRAMES:STRIDE:SIZE, three positive integers")
    return tuple(int(p) for p in parts)


def pyav_feed(paths, frames, stride, size, threads, seconds, batch, epochs=None):
    """Clips/s of PyAVClips over `paths` in a DataLoader; sample_shape: a clip's shape."""
    return dataloader_feed(PyAVClips(paths, frames, stride, size), threads, seconds, batch, epochs)


# ---- nanoGPT --------------------------------------------------------------------------------

def nanogpt_feed(tokens_bin, dtype, block_size, batch, seconds):
    import numpy as np
    import torch
    np_dtype = {"uint16": np.uint16, "uint32": np.uint32}[dtype]
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        # nanoGPT's get_batch: a fresh memmap per batch (avoids its memory leak), random windows.
        data = np.memmap(tokens_bin, dtype=np_dtype, mode="r")
        ix = torch.randint(len(data) - block_size, (batch,))
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
        n += x.shape[0]
        del data
    wall = time.perf_counter() - t0
    assert y.shape == x.shape
    rate = n / wall if wall > 0 else 0
    return {"samples": n, "wall_s": wall, "samples_per_s": rate, "steady_samples_per_s": rate}  # no start-up


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", help="an ImageFolder tree (IMAGEFOLDER/<class>/<image>.jpg)")
    ap.add_argument("--tokens-bin", help="a flat token file (nanoGPT train.bin)")
    ap.add_argument("--dtype", default="uint16", choices=("uint16", "uint32"), help="the token file's dtype")
    ap.add_argument("--seq-len", type=int, default=1024, help="tokens per row (nanoGPT block_size)")
    ap.add_argument("--videos", help="a videofolder tree (VIDEOFOLDER/<class>/<video>.mp4)")
    ap.add_argument("--clip", default="16:2:112", type=parse_clip, help="videos: FRAMES:STRIDE:SIZE")
    ap.add_argument("--threads", type=int, default=2, help="DataLoader num_workers (images, videos)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 64 images, 32 token rows, 8 clips)")
    ap.add_argument("--seconds", type=float, default=10.0, help="time bound of each measurement")
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    args = ap.parse_args()
    if not args.images and not args.tokens_bin and not args.videos:
        ap.error("give --images, --tokens-bin, --videos or several")
    import torch
    torch.set_num_threads(1)
    out = {}
    if args.images:
        r = torch_feed(args.images, args.threads, args.seconds, args.batch or 64)
        out["images"] = dict(r, threads=args.threads, batch=args.batch or 64)
        print(f"torch DataLoader+PIL: {r['samples_per_s']:.0f} img/s ({args.threads} workers, batch "
              f"{args.batch or 64}, first batch {r['first_batch_s'] or 0:.2f} s)")
    if args.tokens_bin:
        r = nanogpt_feed(args.tokens_bin, args.dtype, args.seq_len, args.batch or 32, args.seconds)
        out["tokens"] = dict(r, seq_len=args.seq_len, batch=args.batch or 32)
        print(f"nanoGPT memmap get_batch: {r['samples_per_s']:.0f} rows/s "
              f"({r['samples_per_s'] * args.seq_len / 1e6:.1f} M tokens/s, batch {args.batch or 32})")
    if args.videos:
        frames, stride, size = args.clip
        r = pyav_feed(video_files(args.videos), frames, stride, size, args.threads, args.seconds, args.batch or 8)
        out["videos"] = dict(r, threads=args.threads, batch=args.batch or 8, clip=args.clip)
        print(f"PyAV DataLoader: {r['samples_per_s']:.1f} clips/s of {r['sample_shape']} ({args.threads} workers, "
              f"batch {args.batch or 8}, first batch {r['first_batch_s'] or 0:.2f} s)")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
