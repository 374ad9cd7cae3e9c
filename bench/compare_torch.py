#!/usr/bin/python3
"""The same images through torch's DataLoader (ImageFolder-style, PIL) and through
stoker from Python, with the same worker/thread count and batch size.

    PYTHONPATH=build/python /usr/bin/python3 bench/compare_torch.py DATASET_DIR IMAGEFOLDER_DIR \
        [--threads N] [--batch B] [--size S] [--batches K] [--cli build/stoker] [--json]

DATASET_DIR is IMAGEFOLDER_DIR packed by `stoker pack imagefolder`. Both sides do
RandomResizedCrop(size) + RandomHorizontalFlip and deliver uint8 HWC batches (torch
side: PIL decode, crop+resize in one PIL `resize(box=...)` call, flip, a tensor from
the array, default collate). torchvision is not needed (its transforms are re-implemented
here in a few lines, following torchvision's RandomResizedCrop.get_params).
With --cli, `stoker bench feed` (the C++ loop) runs too, to show what the Python layer
costs against C++ (target: < 5%). Prints samples/s of each and their ratio; with
--json the last line is one JSON object.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np
import torch
from PIL import Image

import stoker
from torch_dataloader import rrc_params  # beside this file


# --- the torch baseline -------------------------------------------------------------

def list_imagefolder(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files = []
    for label, c in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, c))):
            for n in sorted(names):
                if n.lower().endswith((".jpg", ".jpeg")):
                    files.append((os.path.join(dirpath, n), label))
    return files, classes


class FolderDataset(torch.utils.data.Dataset):
    def __init__(self, root, size):
        self.files, self.classes = list_imagefolder(root)
        self.size = size

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        with Image.open(path) as im:
            im = im.convert("RGB")
            x, y, cw, ch = rrc_params(*im.size)
            im = im.resize((self.size, self.size), Image.BILINEAR, box=(x, y, x + cw, y + ch))
        if random.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(im).copy()), label  # uint8 HWC, like stoker


def _seed_worker(worker_id):
    random.seed(torch.initial_seed() % (1 << 32))


def run_torch(folder, threads, batch, size, max_batches):
    t0 = time.perf_counter()
    ds = FolderDataset(folder, size)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads,
                                     drop_last=True, worker_init_fn=_seed_worker,
                                     persistent_workers=False, prefetch_factor=2)
    return _time_loop(t0, iter(dl), max_batches, lambda b: b[0].shape[0]), len(ds)


# --- stoker -------------------------------------------------------------------------

def run_stoker(dataset, threads, batch, size, max_batches):
    t0 = time.perf_counter()
    loader = stoker.Loader(dataset, batch_size=batch, size=size, transform="train", threads=threads,
                           drop_last=True, rank=0, world_size=1)
    rates = _time_loop(t0, iter(loader), max_batches, lambda b: b["image"].shape[0])
    return rates, loader.summary()


def _time_loop(t0, it, max_batches, count):
    """(samples/s from t0 - start-up included, as `stoker bench feed` times an epoch -,
    samples/s after the first batch - the steady state)."""
    n = samples = first_samples = 0
    t1 = None
    for b in it:
        samples += count(b)
        n += 1
        del b
        if t1 is None:
            t1, first_samples = time.perf_counter(), samples
        if n >= max_batches:
            break
    t2 = time.perf_counter()
    whole = samples / (t2 - t0)
    steady = (samples - first_samples) / (t2 - t1) if n > 1 and t2 > t1 else 0.0
    return whole, steady


def run_cli(cli, dataset, threads, batch, size):
    out = subprocess.run([cli, "bench", "feed", dataset, "--threads", str(threads), "--batch", str(batch),
                          "--size", str(size), "--json"], check=True, capture_output=True, text=True).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="stoker dataset (packed IMAGEFOLDER)")
    ap.add_argument("imagefolder", help="the ImageFolder tree of JPEGs")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="DataLoader workers = stoker decode threads (default: CPUs)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batches", type=int, default=1 << 30, help="batches timed per side (default: the epoch)")
    ap.add_argument("--cli", help="path of build/stoker: also run `stoker bench feed` (C++)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(1)
    (t_whole, t_rate), n = run_torch(a.imagefolder, a.threads, a.batch, a.size, a.batches)
    (s_whole, s_rate), summary = run_stoker(a.dataset, a.threads, a.batch, a.size, a.batches)
    res = {"images": n, "threads": a.threads, "batch": a.batch, "size": a.size,
           "torch_samples_per_s": round(t_rate, 1), "stoker_samples_per_s": round(s_rate, 1),
           "stoker_over_torch": round(s_rate / t_rate, 3) if t_rate else None,
           "torch_epoch_samples_per_s": round(t_whole, 1), "stoker_epoch_samples_per_s": round(s_whole, 1)}
    print("samples/s         steady (after batch 1)   whole epoch (start-up included)")
    print(f"torch DataLoader  {t_rate:10.1f}               {t_whole:10.1f}   (PIL, {a.threads} worker processes)")
    print(f"stoker (Python)   {s_rate:10.1f}               {s_whole:10.1f}   ({a.threads} decode threads)")
    print(f"stoker / torch: {res['stoker_over_torch']}x steady")
    print(f"stoker: {summary}")
    if a.cli:
        c_rate = run_cli(a.cli, a.dataset, a.threads, a.batch, a.size)
        res["cpp_feed_samples_per_s"] = round(c_rate, 1)
        res["python_over_cpp"] = round(s_whole / c_rate, 3) if c_rate else None
        print(f"stoker bench feed (C++, whole epoch): {c_rate:.1f} samples/s; "
              f"Python / C++ (whole epoch) = {res['python_over_cpp']}")
    if a.json:
        print(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
