#!/usr/bin/python3
"""A short ImageNet-style training run fed by stoker: a small CNN, the "train" transform
for training, the "eval" transform for validation, on CPU or GPU, one process or many
(torchrun).

Quick start (about a minute on 2 CPU cores; makes and packs a synthetic dataset):

    PYTHONPATH=build/python /usr/bin/python3 examples/train_imagenet.py --make-sample /tmp/inet \
        --images 320 --size 64 --steps 8

With real data packed by `stoker pack imagefolder`:

    PYTHONPATH=build/python /usr/bin/python3 examples/train_imagenet.py \
        --train /data/inet-train --val /data/inet-val --epochs 1 --device cuda
    torchrun --nproc_per_node=2 examples/train_imagenet.py --train ... --val ...

Batches arrive as uint8 NHWC tensors (zero-copy views of stoker's batch memory, on the
GPU when stoker stages them there); they reach the training device as uint8 (4x less
traffic than float) and are turned into normalised float NCHW there.
"""

import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import stoker

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class SmallCNN(nn.Module):
    def __init__(self, classes, width=16):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.features = nn.Sequential(block(3, width), block(width, 2 * width), block(2 * width, 4 * width),
                                      block(4 * width, 4 * width))
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Normalize:
    """uint8 NHWC on the host -> normalised float32 NCHW on `device`."""

    def __init__(self, device):
        self.device = device
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.inv_std = 1 / (torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255)

    def __call__(self, image_u8):
        x = image_u8.to(self.device, non_blocking=True).permute(0, 3, 1, 2).float()
        return (x - self.mean) * self.inv_std


def make_sample(root, images, classes, threads):
    folder, train, val = (os.path.join(root, d) for d in ("folder", "train", "val"))
    if not os.path.exists(os.path.join(train, "MANIFEST")):
        print(f"making {images} synthetic JPEGs under {folder} and packing them ...", flush=True)
        stoker.make_sample_imagefolder(folder, images=images, classes=classes, threads=threads)
        stoker.pack_imagefolder(folder, train, threads=threads, overwrite=True)
    if not os.path.exists(os.path.join(val, "MANIFEST")):
        vfolder = folder + "-val"
        stoker.make_sample_imagefolder(vfolder, images=max(images // 4, classes), classes=classes, seed=1,
                                       threads=threads)
        stoker.pack_imagefolder(vfolder, val, threads=threads, overwrite=True)
    return train, val


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="stoker dataset for training")
    ap.add_argument("--val", help="stoker dataset for validation")
    ap.add_argument("--make-sample", metavar="DIR", help="make and pack a synthetic dataset under DIR")
    ap.add_argument("--images", type=int, default=320, help="--make-sample: training images")
    ap.add_argument("--classes", type=int, default=10, help="--make-sample: classes")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: whole epoch)")
    ap.add_argument("--val-steps", type=int, default=0, help="validation batches (0: all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=None, help="decode threads (default: from the CPU plan)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        torch.distributed.init_process_group("nccl" if a.device.startswith("cuda") else "gloo")
        if a.device.startswith("cuda"):
            a.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    rank = torch.distributed.get_rank() if distributed else 0
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(a.seed)

    if a.make_sample:
        if rank == 0:
            a.train, a.val = make_sample(a.make_sample, a.images, a.classes, a.threads or 0)
        if distributed:
            torch.distributed.barrier()
        a.train, a.val = (os.path.join(a.make_sample, d) for d in ("train", "val"))
    if not a.train:
        ap.error("give --train (and --val), or --make-sample DIR")

    # rank/world_size come from torch.distributed (or torchrun's env) by default. On a GPU
    # (with stoker built with CUDA) batches arrive on the device, staged by stoker.
    loader_device = str(device) if device.type == "cuda" and stoker.has_cuda else "cpu"
    train = stoker.Loader(a.train, batch_size=a.batch_size, transform="train", size=a.size, seed=a.seed,
                          threads=a.threads, drop_last=True, device=loader_device)
    val = stoker.Loader(a.val, batch_size=a.batch_size, transform="eval", size=a.size, shuffle=False,
                        threads=a.threads, device=loader_device) if a.val else None
    classes = len(train.class_names) or a.classes
    model = SmallCNN(classes).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-5)
    norm = Normalize(device)
    if rank == 0:
        print(f"{train}: {len(train)} steps/epoch, {classes} classes, device {device}", flush=True)

    for epoch in range(a.epochs):
        train.set_epoch(epoch)
        model.train()
        t0, seen, loss_sum = time.perf_counter(), 0, 0.0
        for step, batch in enumerate(train):
            x, y = norm(batch["image"]), batch["label"].to(device, non_blocking=True)
            del batch  # hand the slot back as soon as the data is on the device
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += y.shape[0]
            loss_sum += loss.item()
            if rank == 0 and (step % 10 == 0):
                print(f"epoch {epoch} step {step:4d} loss {loss.item():.3f}", flush=True)
            if a.steps and step + 1 >= a.steps:
                break
        dt = time.perf_counter() - t0
        if rank == 0:
            print(f"epoch {epoch}: {seen / dt:.1f} samples/s on rank 0, mean loss {loss_sum / max(step + 1, 1):.3f}")
            print(f"  loader: {train.summary()}", flush=True)

        if val is not None:
            model.eval()
            correct = total = 0
            with torch.no_grad():
                for i, batch in enumerate(val):
                    x, y = norm(batch["image"]), batch["label"].to(device)
                    correct += (model(x).argmax(1) == y).sum().item()
                    total += y.shape[0]
                    if a.val_steps and i + 1 >= a.val_steps:
                        break
            if distributed:
                t = torch.tensor([correct, total], device=device)
                torch.distributed.all_reduce(t)
                correct, total = t.tolist()
            if rank == 0:
                print(f"epoch {epoch}: validation top-1 {100.0 * correct / max(total, 1):.1f}% "
                      f"on {total} images", flush=True)

    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
