"""Shared fixtures: tiny datasets packed with stoker from PIL-made JPEGs.

Run with Debian's interpreter and the build tree on the path:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q python/tests
"""

import os

import numpy as np
import pytest

import stoker

# Class k's images are tinted with COLOURS[k], so a label can be checked from pixels.
COLOURS = [(210, 40, 40), (40, 200, 40), (40, 40, 210)]
CLASS_NAMES = ["cls_a_red", "cls_b_green", "cls_c_blue"]


def make_imagefolder(root, per_class, seed=0, sizes=((48, 40), (40, 56), (64, 48), (33, 45))):
    """ImageFolder of small JPEGs: CLASS_NAMES[k]/img_XXX.jpg tinted COLOURS[k]."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k, name in enumerate(CLASS_NAMES):
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            w, h = sizes[(i + k) % len(sizes)]
            base = np.array(COLOURS[k], dtype=np.int16)
            noise = rng.integers(-25, 25, size=(h, w, 3), dtype=np.int16)
            # A gradient too, so crops and flips change pixels.
            grad = (np.arange(w, dtype=np.int16)[None, :, None] * 40 // max(w - 1, 1))
            img = np.clip(base + noise + grad, 0, 255).astype(np.uint8)
            Image.fromarray(img, "RGB").save(os.path.join(d, f"img_{i:03d}.jpg"), quality=90)
    return root


VIDEO_SIZES = ((64, 32), (32, 64), (48, 48))  # (w, h): landscape, portrait, square


def make_videofolder(root, per_class, classes=("a", "b")):
    """A videofolder of tiny H.264 clips made with the ffmpeg CLI: class/v_XXX.mp4, video i
    of a class VIDEO_SIZES[i % 3] (w, h), 25 frames at 25 fps, luma following x and the
    frame number. Each size is encoded once and copied."""
    import shutil
    import subprocess

    made = os.path.join(root, "made")
    os.makedirs(made, exist_ok=True)
    for w, h in VIDEO_SIZES:
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                        f"nullsrc=s={w}x{h}:r=25:d=1,geq=lum='16+2*N+X/2':cb=128:cr=128", "-c:v", "libx264",
                        "-g", "5", "-pix_fmt", "yuv420p", os.path.join(made, f"{w}x{h}.mp4")], check=True)
    for c in classes:
        os.makedirs(os.path.join(root, "src", c), exist_ok=True)
        for i in range(per_class):
            w, h = VIDEO_SIZES[i % 3]
            shutil.copyfile(os.path.join(made, f"{w}x{h}.mp4"), os.path.join(root, "src", c, f"v_{i:03d}.mp4"))
    return os.path.join(root, "src")


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory):
    """(dataset dir, number of records): 3 classes x 20 tiny JPEGs, 2+ shards."""
    base = tmp_path_factory.mktemp("images")
    src = make_imagefolder(str(base / "folder"), per_class=20)
    out = str(base / "ds")
    summary = stoker.pack_imagefolder(src, out, shard_size=64 << 10, threads=2)
    assert summary["records"] == 60
    assert summary["shards"] >= 2
    return out, 60


@pytest.fixture(scope="session")
def big_image_dataset(tmp_path_factory):
    """(dataset dir, n): 3 x 60 tiny JPEGs, for epochs much longer than the ring."""
    base = tmp_path_factory.mktemp("images_big")
    src = make_imagefolder(str(base / "folder"), per_class=60, seed=1, sizes=((24, 20), (20, 28)))
    out = str(base / "ds")
    stoker.pack_imagefolder(src, out, threads=2)
    return out, 180


SEQ_LEN = 16


@pytest.fixture(scope="session")
def token_dataset(tmp_path_factory):
    """(dataset dir, stream as uint16 numpy array, rows)."""
    base = tmp_path_factory.mktemp("tokens")
    stream = ((np.arange(5000, dtype=np.int64) * 7919) % 50000).astype(np.uint16)
    path = str(base / "train.bin")
    stream.tofile(path)
    out = str(base / "ds")
    s = stoker.pack_tokens(path, out, dtype="uint16", seq_len=SEQ_LEN, rows_per_record=8, zstd=3)
    rows = (len(stream) - 1) // SEQ_LEN
    assert s["records"] == (rows + 7) // 8
    return out, stream, rows


@pytest.fixture(params=["host", "cuda"])
def staged(request):
    """Loader keyword arguments for the staged path: the Stager's host backend (the same
    ring, events and release protocol, memcpy for the copies) everywhere, and its CUDA
    backend (device="cuda:0") where this build has CUDA and torch sees a GPU."""
    if request.param == "host":
        return {"_stage": "host"}
    if not stoker.has_cuda:
        pytest.skip("this stoker was built without CUDA")
    import torch
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return {"device": "cuda:0"}


def staged_backend(kwargs):
    """The stats()["stage"]["backend"] and tensor device type the `staged` kwargs give."""
    return "cuda" if "device" in kwargs else "host"


def clone_batches(loader, limit=None):
    """The loader's batches (at most `limit`), each tensor cloned so it outlives its slot."""
    out = []
    for b in loader:
        out.append({k: v.clone() if hasattr(v, "clone") else v for k, v in b.items()})
        if limit is not None and len(out) == limit:
            break
    return out


def same(x, y):
    """Equal batch entries: tensors element-wise, lists of str/bytes (``__key__``, text) as lists."""
    import torch
    if isinstance(x, torch.Tensor):
        return torch.equal(x.cpu(), y.cpu())  # staged batches live on the GPU
    return x == y
