#!/usr/bin/python3
"""What users run today, on the same data stoker is measured on: the baselines of #4.

  images  torchvision-style ImageFolder over the JPEG tree, PIL decode,
          RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor, through
          torch.utils.data.DataLoader with num_workers = --threads and batch --batch
          (torchvision is not required: its transforms' parameter draws are
          re-implemented here in a few lines, as torchvision does them);
  tokens  nanoGPT's get_batch over the flat token file with np.memmap: a fresh memmap
          per batch, random windows of --seq-len, int64 inputs and targets.

    /usr/bin/python3 bench/torch_dataloader.py --images IMAGEFOLDER [--threads 2] [--batch 64] [--seconds 10]
    /usr/bin/python3 bench/torch_dataloader.py --tokens-bin FILE [--dtype uint16] [--seq-len 1024] [--batch 32]

Prints samples/s; with --json the last line is one JSON object. `stoker bench compare`
(bench/compare.py) runs these beside stoker and the machine's limits, in one run.
Needs Debian's python3-torch, python3-numpy and python3-pil (hence /usr/bin/python3).
"""
import argparse
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


def torch_feed(images, threads, seconds, batch):
    import torch
    ds = PilImageFolder(images)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads, drop_last=False)
    n = 0
    t0 = time.perf_counter()
    first = None
    it = iter(dl)
    for x, _ in it:
        n += x.shape[0]
        if first is None:
            first = time.perf_counter() - t0
        if time.perf_counter() - t0 >= seconds:
            break
    wall = time.perf_counter() - t0
    del it
    return {"samples": n, "wall_s": wall, "samples_per_s": n / wall if wall > 0 else 0, "first_batch_s": first,
            "steady_samples_per_s": steady_rate(n, wall, first, batch)}


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
    ap.add_argument("--threads", type=int, default=2, help="DataLoader num_workers (images)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 64 images, 32 token rows)")
    ap.add_argument("--seconds", type=float, default=10.0, help="time bound of each measurement")
    ap.add_argument("--json", action="store_true", help="end with one JSON line")
    args = ap.parse_args()
    if not args.images and not args.tokens_bin:
        ap.error("give --images, --tokens-bin or both")
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
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
