"""stoker.Loader: a stoker dataset as an iterable of batches of zero-copy tensors."""

import json
import os
import sys

from . import _stoker
from .transforms import to_field_transform, to_image_transform

__all__ = ["Loader", "default_rank_world"]

_STATE_VERSION = 1


def default_rank_world():
    """(rank, world_size): torch.distributed's when it is initialised, else torchrun's
    RANK / WORLD_SIZE environment variables, else (0, 1)."""
    # A process group exists only if torch.distributed was imported: don't import torch
    # (seconds) just to find out.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    r, w = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if r is None and w is None:
        return 0, 1
    if r is None or w is None:
        missing = "RANK" if r is None else "WORLD_SIZE"
        raise ValueError(f"{missing} is not set but {'WORLD_SIZE' if r is None else 'RANK'} is; "
                         "set both (torchrun does) or pass rank= and world_size=")
    try:
        return int(r), int(w)
    except ValueError:
        raise ValueError(f"RANK={r!r} / WORLD_SIZE={w!r} are not integers") from None


class Loader:
    """Batches of one epoch of a stoker dataset, as dicts of torch tensors.

    Image datasets give ``{"image": uint8 [B, size, size, 3], "label": int64 [B],
    "index": int64 [B]}``; token datasets ``{"tokens": [B, seq_len], "targets": [B,
    seq_len] (targets=True), "index": int64 [B]}`` (int64 tokens by default under torch,
    the stored dtype with numpy=True). The last batch is smaller unless drop_last.

    Args:
        path: the dataset directory (made by ``stoker pack`` / ``stoker.pack_*``), or
            an ``http(s)://`` or ``s3://`` URL of one: its shards are then downloaded
            (parallel ranged GETs, every record's CRC checked) into `cache_dir` ahead
            of use and read from there.
        batch_size: samples per batch on this rank.
        transform: "train", "eval", None (no decode) or transform objects
            (``stoker.transforms``) or an ``ImageTransform``: the first image field's,
            unless `fields` names it.
        fields: per-field transforms by field name, e.g. ``{"jpg":
            stoker.RandomResizedCrop(224), "png": stoker.Follow("jpg")}``; batch keys
            are the field names. A field without a spec comes as stored: scalars as [B]
            tensors, ndarrays as [B, *shape], text (and ``__key__``) as a list of str,
            bytes and untransformed images as a list of bytes, variable-length arrays as
            values [sum n_i, *shape] under the field's name plus offsets [B + 1] under
            ``name + ".offsets"`` (sample i is ``values[offsets[i]:offsets[i+1]]``).
        size: output side of "train"/"eval" images.
        shuffle: a global shuffle keyed by (seed, epoch); False: dataset order.
        seed: the run's seed: order and augmentation are a function of (seed, epoch).
        drop_last: drop the final partial step (all ranks then get full batches).
        device: "cpu" or "cuda[:N]" (needs stoker built with CUDA and torch with CUDA):
            batches are then device tensors from the staging layer (pinned host slots,
            copies on their own stream into a ring of `device_slots` device batches,
            ordered on torch's current stream by events; a batch's device slot is
            reused after its tensors are freed and the kernels queued on that stream
            before then have run).
        threads: decode threads; None: from the CPU plan (affinity, cgroup quota).
        rank, world_size: None: torch.distributed's when initialised, else RANK /
            WORLD_SIZE (torchrun), else 0 of 1. Ranks get disjoint, interleaved samples.
        on_error: "error" (raise, naming shard and record) or "skip".
        as_tuple: yield (image, label) / (tokens[, targets]) tuples instead of dicts.
        numpy: yield numpy arrays (no torch needed) instead of torch tensors.
        targets: token data: also deliver next-token targets.
        slots: batches in the loader's ring (memory = slots x batch bytes); None: as
            many as fit in 32 MiB, 4 to 64 (4 for images at 224 px, more for token rows).
        token_dtype: "int64", "int32", "uint16", "uint32" or "stored" (numpy only for
            the unsigned ones: torch 1.13 has no uint16/uint32).
        pixel_format: "u8_hwc" (default), "u8_chw", "f32_chw", "f16_chw", "f32_hwc",
            "f16_hwc" (float formats normalised with mean/std on the CPU).
        order: "shuffled", "sequential", "chunk_local" (overrides shuffle).
        io_engine: "auto", "uring" or "pread".
        io_limit_mbps: throttle reads to this many MB/s (simulating slow storage).
        cache_dir: a URL's node-local shard cache (required with a URL; ranks on one
            node share it and fetch each shard once).
        cache_limit: bytes the cache may hold; None: the dataset's size. The loader
            keeps every shard it has read in the cache, so a smaller limit is an error.
        cache_prefetch: shards fetched ahead of the one being read.
        remote_connections: ranged GETs in flight at once; remote_profile: the S3
            credentials profile (None: $AWS_PROFILE or "default").
        device_slots: device="cuda": batches in the device ring. Holding all but one of
            them (``list(loader)``) makes further batches copies (one warning).

    Iterating starts the current epoch from its beginning (or from the point a
    ``load_state_dict`` restored); call ``set_epoch(e)`` before each epoch for a new
    order, as with DistributedSampler. One iteration at a time per Loader.

    Lifetime: a tensor keeps its batch's memory alive until it is freed, also after the
    Loader is gone. Holding more batches than ``slots`` (``list(loader)``) works: the
    ring grows and one ``stoker.HeldBatchesWarning`` says so.
    """

    def __init__(self, path, batch_size, transform="train", size=224, shuffle=True, seed=0,
                 drop_last=False, device="cpu", threads=None, rank=None, world_size=None,
                 on_error="error", as_tuple=False, numpy=False, targets=False, *, slots=None,
                 token_dtype=None, pixel_format="u8_hwc", mean=None, std=None, order=None,
                 chunk_size=None, window_chunks=None, io_engine="auto", io_limit_mbps=None,
                 direct=True, device_slots=3, fields=None, cache_dir=None, cache_limit=None,
                 cache_prefetch=4, remote_connections=None, remote_profile=None, _stage=None):
        path = os.fspath(path)
        manifest = _stoker.read_manifest(path, remote_profile or "")
        self._tokens = ":tokens" in manifest["schema"]
        self._numpy = bool(numpy)
        self._as_tuple = bool(as_tuple)
        self._device = self._parse_device(device)

        o = _stoker.LoaderOptions()
        o.path = path
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        o.batch_size = int(batch_size)
        o.transform = to_image_transform(transform, size)
        if fields is not None:
            if not isinstance(fields, dict):
                raise TypeError(f"fields must be a dict of field name -> transform, got {type(fields).__name__}")
            o.fields = {str(k): to_field_transform(k, v) for k, v in fields.items()}
        o.pixel_format = pixel_format
        if mean is not None:
            o.mean = [float(x) for x in mean]
        if std is not None:
            o.std = [float(x) for x in std]
        o.targets = bool(targets)
        if token_dtype is None:
            token_dtype = "stored" if self._numpy else "int64"
        if not self._numpy and token_dtype in ("uint16", "uint32"):
            raise ValueError(f"token_dtype={token_dtype!r} has no torch type; use int64/int32, "
                             "or numpy=True")
        o.token_dtype = token_dtype
        o.order = order if order is not None else ("shuffled" if shuffle else "sequential")
        o.seed = int(seed)
        if chunk_size is not None:
            o.chunk_size = int(chunk_size)
        if window_chunks is not None:
            o.window_chunks = int(window_chunks)
        o.drop_last = bool(drop_last)
        if rank is None or world_size is None:
            dr, dw = default_rank_world()
            rank = dr if rank is None else rank
            world_size = dw if world_size is None else world_size
        o.rank, o.world_size = int(rank), int(world_size)
        o.threads = 0 if threads is None else int(threads)
        o.slots = 0 if slots is None else int(slots)
        o.on_error = on_error
        o.io_engine = io_engine
        o.io_direct = bool(direct)
        if io_limit_mbps:
            o.io_limit_bytes_per_s = float(io_limit_mbps) * 1e6
        stream = None
        if self._device is not None:
            # Device batches come from the staging layer: copies on their own stream into a
            # device ring, ordered on torch's current stream (events, no host syncs).
            import torch
            dev = self._device
            o.stage, o.device = "cuda", dev.index
            stream = lambda: torch.cuda.current_stream(dev).cuda_stream  # noqa: E731
        elif _stage is not None:
            o.stage = _stage  # "host": the staging machinery on the CPU (tests)
        o.device_slots = int(device_slots)
        if cache_dir is not None:
            o.cache_dir = os.fspath(cache_dir)
        if cache_limit is not None:
            o.cache_limit = int(cache_limit)
        o.cache_prefetch = int(cache_prefetch)
        if remote_connections is not None:
            o.remote_connections = int(remote_connections)
        if remote_profile is not None:
            o.remote_profile = str(remote_profile)

        converter = None
        if not self._numpy:
            import torch.utils.dlpack
            converter = torch.utils.dlpack.from_dlpack
        self._impl = _stoker.Loader(o, converter, stream)
        self._options = o
        self._fresh = True  # the next iteration continues where the loader stands
        self._fingerprint = {
            "dataset_samples": self._impl.epoch_samples,
            "schema": manifest["schema"],
            "order": o.order,
            "seed": o.seed,
            "transform": repr(o.transform) if not self._tokens else None,
            "fields": {k: repr(v) for k, v in (fields or {}).items()},
            "pixel_format": o.pixel_format if not self._tokens else None,
            "token_dtype": o.token_dtype if self._tokens else None,
            "targets": o.targets if self._tokens else None,
            "drop_last": o.drop_last,
        }

    # --- iteration -------------------------------------------------------------------
    def __iter__(self):
        if not self._fresh:
            self._impl.set_epoch(self._impl.epoch)
        self._fresh = False
        return self._batches()

    def _batches(self):
        impl, post = self._impl, self._post
        while True:
            b = impl.next()
            if b is None:
                return
            yield post(b)
            del b  # hold nothing while fetching the next batch: the ring stays free

    def _post(self, b):
        if not self._as_tuple:
            return b
        if self._tokens:
            return tuple(b[k] for k in ("tokens", "targets") if k in b)
        return tuple(b[k] for k in ("image", "label") if k in b)

    def __len__(self):
        return int(self._impl.num_batches())

    def set_epoch(self, epoch):
        """Restart at the beginning of `epoch` (a new order and new augmentation draws)."""
        self._impl.set_epoch(int(epoch))
        self._fresh = True

    @property
    def epoch(self):
        return int(self._impl.epoch)

    @property
    def rank(self):
        return self._impl.rank

    @property
    def world_size(self):
        return self._impl.world_size

    @property
    def class_names(self):
        return list(self._impl.class_names())

    @property
    def epoch_samples(self):
        """Samples (records or token rows) in one epoch of the whole dataset."""
        return int(self._impl.epoch_samples)

    # --- resume ----------------------------------------------------------------------
    def state_dict(self):
        """Where the epoch stands (batches handed out so far), StatefulDataLoader-style:
        a new Loader given this by load_state_dict() continues with the next batch. The
        position is global (samples consumed by all ranks), so it may be restored on a
        different world size or batch size."""
        return {
            "version": _STATE_VERSION,
            "order_state": self._impl.state(),
            "epoch": self.epoch,
            "fingerprint": dict(self._fingerprint),
        }

    def load_state_dict(self, state):
        """Resume from state_dict(): the next iteration yields the batch after the last
        one handed out when the state was taken. Raises ValueError (naming the option)
        when the state was made with a different dataset, order, seed or transform."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a stoker Loader state (version {_STATE_VERSION}): {state!r:.200}")
        theirs = state.get("fingerprint", {})
        diffs = [f"{k}: saved {theirs.get(k)!r}, loader {v!r}"
                 for k, v in self._fingerprint.items() if theirs.get(k) != v]
        if diffs:
            raise ValueError("state_dict was made with other options: " + "; ".join(diffs))
        self._impl.load_state(state["order_state"])
        self._fresh = True

    # --- figures ---------------------------------------------------------------------
    def stats(self):
        """Per-stage figures (LoaderStats::to_json) as a dict: throughput, busy/wait time
        of the IO and decode stages, consumer wait, ring occupancy, slots, IO engine."""
        s = json.loads(self._impl.stats_json())
        stage = self._impl.stage_stats_json()
        if stage:
            s["stage"] = json.loads(stage)
        return s

    def summary(self):
        """stats() in one human-readable line."""
        return self._impl.stats_summary()

    # --- lifetime --------------------------------------------------------------------
    def close(self):
        """Stops the loader's threads now (tensors already handed out stay valid)."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        o = self._options
        return (f"stoker.Loader({o.path!r}, batch_size={o.batch_size}, order={o.order!r}, "
                f"seed={o.seed}, rank={self.rank}/{self.world_size}, epoch={self.epoch})")

    # --- helpers ---------------------------------------------------------------------
    def _parse_device(self, device):
        if device is None or device == "cpu":
            return None
        import torch
        dev = torch.device(device)
        if dev.type == "cpu":
            return None
        if dev.type != "cuda":
            raise ValueError(f"device {device!r}: stoker delivers to 'cpu' or 'cuda[:N]'")
        if self._numpy:
            raise ValueError("numpy=True delivers host arrays; use device='cpu'")
        if not _stoker.has_cuda:
            raise _stoker.UnavailableError(
                f"device={device!r}: this stoker was built without CUDA (configure with "
                "STOKER_ENABLE_CUDA=ON where the CUDA toolkit is installed)")
        if not torch.cuda.is_available():
            raise _stoker.UnavailableError(f"device={device!r}: torch sees no CUDA device")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        return dev

