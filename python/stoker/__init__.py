"""stoker: a fast input pipeline for PyTorch training.

    import stoker
    loader = stoker.Loader("/data/imagenet-train", batch_size=256, transform="train")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # {"image": uint8 NHWC, "label": int64, "index": int64}
            ...

Batches are torch tensors that view the loader's batch memory directly (DLPack, no
copy); a tensor keeps its memory alive until it is freed. See `Loader` for the options,
`stoker.transforms` for the image transforms, `pack_imagefolder` / `pack_tokens` /
`pack_wds` to make datasets from files, and `Writer` to make one from any other source.
"""

from . import _stoker
from ._stoker import (  # noqa: F401  (re-exported)
    CancelledError,
    DataLossError,
    Error,
    HeldBatchesWarning,
    ImageTransform,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
    decode_image,
    extract,
    make_sample_imagefolder,
    make_sample_tokens,
    pack_imagefolder,
    pack_tokens,
    pack_wds,
    probe_jpeg,
    read_manifest,
    read_record,
    record_location,
    sample_seed,
)
from . import transforms  # noqa: F401
from .loader import Loader, default_rank_world  # noqa: F401
from .writer import Writer  # noqa: F401

__version__ = "0.1.0"

#: True when the native library was built with CUDA (device="cuda" needs it).
has_cuda = bool(_stoker.has_cuda)

__all__ = [
    "Loader",
    "transforms",
    "ImageTransform",
    "pack_imagefolder",
    "pack_tokens",
    "pack_wds",
    "extract",
    "Writer",
    "make_sample_imagefolder",
    "make_sample_tokens",
    "read_manifest",
    "read_record",
    "record_location",
    "decode_image",
    "probe_jpeg",
    "sample_seed",
    "default_rank_world",
    "Error",
    "InvalidArgumentError",
    "IoError",
    "DataLossError",
    "ResourceExhaustedError",
    "UnavailableError",
    "CancelledError",
    "NotFoundError",
    "HeldBatchesWarning",
    "has_cuda",
]
