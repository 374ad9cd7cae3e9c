"""stoker: a fast input pipeline for PyTorch training.

    import stoker
    loader = stoker.Loader("/data/imagenet-train", batch_size=256, transform="train")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:          # {"image": uint8 NHWC, "label": int64, "index": int64}
            ...

Batches are torch tensors that view the loader's batch memory directly (DLPack, no
copy); a tensor keeps its memory alive until it is freed. See `Loader` for the options,
`stoker.transforms` for the image transforms, `pack_imagefolder` / `pack_videofolder` /
`pack_tokens` / `pack_wds` to make datasets from files, and `Writer` to make one from any other source.

The library's messages (a refused O_DIRECT, an IO engine falling back, ...) go
to the `logging` logger "stoker": silence them with
``logging.getLogger("stoker").setLevel(logging.ERROR)``, or route them with handlers.
STOKER_LOG=error|warn|info|debug (default warn) sets what the library emits at all.
"""

import atexit as _atexit
import logging as _logging

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
    Tokenizer,
    UnavailableError,
    commit,
    decode_image,
    extract,
    make_sample_imagefolder,
    make_sample_tokens,
    pack_imagefolder,
    pack_samples,
    pack_text,
    pack_tokens,
    pack_videofolder,
    pack_wds,
    probe_jpeg,
    read_manifest,
    read_record,
    record_location,
    reencode_video,
    sample_seed,
)
from . import transforms  # noqa: F401
from .transforms import CenterCrop, Follow, RandomResizedCrop  # noqa: F401
from .media import AudioClip, VideoClip  # noqa: F401
from .loader import Loader, default_rank_world  # noqa: F401
from .writer import Writer  # noqa: F401

#: CMakeLists.txt's project version, as built into the extension.
__version__ = _stoker.__version__

#: The logger the library's messages go to.
logger = _logging.getLogger("stoker")
_LOG_LEVELS = (_logging.ERROR, _logging.WARNING, _logging.INFO, _logging.DEBUG)


def _log_record(level, message):
    logger.log(_LOG_LEVELS[level], message)


_stoker._route_log(_log_record)
# Before the interpreter goes: queued messages are flushed, the library's stderr sink
# is back for threads still running.
_atexit.register(_stoker._unroute_log)

#: True when the native library was built with CUDA (device="cuda" needs it).
has_cuda = bool(_stoker.has_cuda)

__all__ = [
    "Loader",
    "transforms",
    "RandomResizedCrop",
    "VideoClip",
    "AudioClip",
    "CenterCrop",
    "Follow",
    "ImageTransform",
    "pack_imagefolder",
    "pack_samples",
    "pack_text",
    "pack_tokens",
    "pack_videofolder",
    "pack_wds",
    "Tokenizer",
    "extract",
    "Writer",
    "make_sample_imagefolder",
    "make_sample_tokens",
    "read_manifest",
    "read_record",
    "record_location",
    "decode_image",
    "probe_jpeg",
    "reencode_video",
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
