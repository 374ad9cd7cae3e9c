"""stoker.Loader: a stoker dataset as an iterable of batches of zero-copy tensors."""

import math
import numbers
import os
import sys
import warnings

from . import _stoker
from .transforms import to_field_transform, to_image_transform

__all__ = ["Loader", "default_rank_world"]


class _Iteration:
    """One pass over a Loader's epoch. A newer iter(loader) supersedes it: using it then
    raises, so two iterators never share (and split) one epoch."""

    def __init__(self, loader):
        loader._generation += 1
        self._loader = loader
        self._generation = loader._generation
        self._live = True

    def __iter__(self):
        return self

    def __next__(self):
        if not self._live:
            raise StopIteration
        if self._loader._generation != self._generation:
            self._live = False
            raise RuntimeError(
                "this iterator of a stoker.Loader was superseded by a newer iter(loader) (another loop, or another "
                "thread): two iterators of one Loader would each take part of the same epoch. Iterate a Loader "
                "with one loop at a time, or use one Loader per consumer")
        try:
            b = self._loader._impl.next()
        except BaseException:
            self._live = False
            raise
        if b is None:
            self._live = False
            raise StopIteration
        return self._loader._post(b)  # nothing else held while fetching the next: the ring stays free

    def close(self):
        """Ends this iteration (the Loader may then be iterated again)."""
        self._live = False

_STATE_VERSION = 1

# What load_state_dict() insists on: the order state depends on these and on nothing
# else (not on the transform, size, fields, output types or the world size).
_RESUME_KEYS = ("dataset_samples", "schema", "order", "seed", "drop_last")

_PIXEL_FORMATS = ("u8_hwc", "u8_chw", "f32_chw", "f16_chw", "f32_hwc", "f16_hwc")


def _rank_world_with_source():
    """(rank, world_size, where they came from)."""
    # A process group exists only if torch.distributed was imported: don't import torch
    # (seconds) just to find out.
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), "torch.distributed"
    # The native parser: the same rules (and errors) as the C++ loader's.
    r, w = _stoker.rank_from_env()
    if "RANK" not in os.environ and "WORLD_SIZE" not in os.environ:
        return r, w, "the default (no RANK / WORLD_SIZE)"
    return r, w, "the RANK / WORLD_SIZE environment variables"


def default_rank_world():
    """(rank, world_size): torch.distributed's when it is initialised, else torchrun's
    RANK / WORLD_SIZE environment variables, else (0, 1)."""
    r, w, _ = _rank_world_with_source()
    return r, w


# --- argument checks: TypeError for a wrong type, ValueError for a wrong value, each
# naming the parameter (the native layer would say "incompatible function arguments").

def _token_id(name, value, tokenizer, options):
    """An id given as an int, or as a token's text looked up in the tokenizer file."""
    if value is None or isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return None if value is None else _integer(name, value, 0, 2**32 - 1)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a token id (int) or a token's text (str), got {type(value).__name__}")
    found = _stoker.Tokenizer(tokenizer, **options).token_id(value)
    if found is None:
        raise ValueError(f"{name}={value!r} is not a token of {tokenizer}")
    return found


def _integer(name, value, minimum=None, maximum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def _number(name, value, minimum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or (minimum is not None and value < minimum):
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _set_buckets(o, buckets):
    """LoaderOptions.buckets from buckets=: [(h, w), ...] or {"pixels": P, "step": S, "max_ratio": R}."""
    if isinstance(buckets, dict):
        unknown = set(buckets) - {"pixels", "step", "max_ratio"}
        if unknown or "pixels" not in buckets:
            raise ValueError(f'buckets: a dict takes "pixels" (required), "step" and "max_ratio", got {sorted(buckets)}')
        o.bucket_pixels = _integer("buckets['pixels']", buckets["pixels"], 1)
        o.bucket_step = _integer("buckets['step']", buckets.get("step", 64), 1, 8192)
        o.bucket_max_ratio = _number("buckets['max_ratio']", buckets.get("max_ratio", 2.0), 1)
        return
    if isinstance(buckets, (str, bytes)) or not hasattr(buckets, "__iter__"):
        raise TypeError(f"buckets must be a list of (height, width) or a dict, got {type(buckets).__name__}")
    sizes = []
    for b in buckets:
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise TypeError(f"buckets: each bucket is (height, width), got {b!r}")
        sizes.append((_integer("buckets: height", b[0], 1, 8192), _integer("buckets: width", b[1], 1, 8192)))
    if not sizes:
        raise ValueError("buckets: the list is empty")
    o.buckets = sizes


def _schema_fields(schema):
    """[(name, kind)] of a manifest's schema string ("jpg:image cls:int64 ...")."""
    out = []
    for item in schema.split():
        name, _, kind = item.rpartition(":")
        out.append((name, kind.split("/")[0]))
    return out


def _usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _flag(name, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def _choice(name, value, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {', '.join(map(repr, choices))}; "
                        f"got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _triple(name, value):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TypeError(f"{name} must be a sequence of 3 numbers (one per channel), got {type(value).__name__}")
    if len(value) != 3:
        raise ValueError(f"{name} must have 3 values (one per channel), got {len(value)}")
    return [_number(f"{name}[{i}]", v) for i, v in enumerate(value)]


# LoaderOptions::kAutoThreads: threads="auto".
_AUTO_THREADS = 0xFFFFFFFF


class Loader:
    """Batches of one epoch of a stoker dataset, as dicts of torch tensors.

    Image datasets give ``{"image": uint8 [B, size, size, 3], "label": int64 [B],
    "index": int64 [B]}``; token datasets ``{"tokens": [B, seq_len], "targets": [B,
    seq_len] (targets=True), "index": int64 [B]}`` (int64 tokens by default under torch,
    the stored dtype with numpy=True). The last batch is smaller unless drop_last; every
    rank gets the same number of batches of the same lengths (see drop_last).

    Args:
        path: the dataset directory (made by ``stoker pack`` / ``stoker.pack_*``), or a
            list of them: a weighted mixture (`weights`, default equal). Each batch then
            draws from the datasets in proportion, the same sequence per seed and epoch
            for any world size, resumable; ``"source"`` int64 [B] says which dataset each
            sample came from and ``"index"`` is its index there. An epoch is
            `samples_per_epoch` samples (default: the datasets' sizes summed); a dataset
            that runs out within it starts a reshuffled epoch of its own. Batches hold
            every output the datasets share (``__key__``, text, bytes and ragged ones
            too), each of which must agree across them (else InvalidArgumentError naming
            it); one only some datasets have is left out with a warning, and datasets
            that share nothing but ``index``/``__key__`` are an InvalidArgumentError.
            `source_fields`, one dict per dataset, renames its outputs for the mixture:
            ``source_fields=[{"jpg": "image"}, {"png": "image"}]`` mixes a dataset of
            jpg with one of png under the key "image".
            A directory can also be an ``http(s)://`` or ``s3://`` URL of one: its shards
            are then downloaded (parallel ranged GETs, every record's CRC checked) into
            `cache_dir` ahead of use and read from there.
        batch_size: samples per batch on this rank (not with max_tokens=).
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
            Video fields take ``stoker.VideoClip(...)`` (clips uint8 [B, T, H, W, 3] and
            ``name + ".pts"``), audio fields ``stoker.AudioClip(...)``; without one they
            come as their files' bytes.
        size: output side of "train"/"eval" images.
        buckets: aspect-ratio buckets for the first field, in schema order, that is a
            decoded image (with the fields that Follow it) or a video with a
            ``stoker.VideoClip``: a list of (height, width), or ``{"pixels": 512 * 512,
            "step": 64, "max_ratio": 2.0}`` (every h, w a multiple of step with h * w <=
            pixels and long / short side <= max_ratio, as kohya_ss makes them). Each
            record goes to the bucket nearest its aspect (its stored size, read from the
            image header, or a video's upright size from the media index stored at pack
            time, when the Loader opens; nothing is decoded); each global step
            (batch_size x world_size samples) is one bucket, so batch["image"] is [B, h,
            w, 3] (a clip [B, T, h, w, 3], [B, clips, T, h, w, 3] with clips > 1) of that
            bucket, varying between batches, and batch["bucket"] int64 [B] indexes
            ``loader.buckets``. Images are resized to cover the bucket, then cropped: at
            random with a flip for "train", centred for "eval"; a clip's frames the same
            way by its crop ("random": one window and flip for the whole clip, its scale
            and ratio unused; "center"; "none": the whole frame stretched to the
            bucket), its size unused. Each bucket's last partial
            step is dropped with drop_last, else completed by repeating that bucket's
            first samples of the epoch. The order depends on seed, epoch and the global
            batch: the same for every world size of one global batch; a resume must keep
            the global batch. Local datasets, on_error="error", no mixture.
        shuffle: a global shuffle keyed by (seed, epoch); False: dataset order.
        seed: the run's seed: order and augmentation are a function of (seed, epoch).
        drop_last: drop the final partial step (all ranks then get full batches).
            Without it the final step is shared out so every rank still gets the same
            number of batches, the last of equal length on every rank (as torch's
            DistributedSampler does): records are padded with the epoch order's first
            samples (fewer than world_size of them repeat, wrapping; "index" shows
            which), token rows are trimmed to a multiple of world_size (fewer than
            world_size rows are left out, since padding would decompress the first
            shuffle window again). With one rank nothing repeats or is left out.
        device: "cpu" or "cuda[:N]" (needs stoker built with CUDA and torch with CUDA):
            batches are then device tensors from the staging layer (pinned host slots,
            copies on their own stream into a ring of `device_slots` device batches,
            ordered on torch's current stream by events; a batch's device slot is
            reused after its tensors are freed and the kernels queued on that stream
            before then have run).
        threads: "auto" (default): the loader tunes its decode threads (and its ring, when
            `slots` is None) from the bottleneck verdict as it runs, within the CPU
            budget (affinity, cgroup quota, less reserve_cores) and memory_limit; each
            change is logged and listed in stats()["tune"]. A number: exactly that many,
            never tuned. None: the CPU plan's count (affinity, cgroup quota), not tuned.
        memory_limit: bytes the auto-tuned ring may take; None: a quarter of the cgroup's
            memory limit, or of the RAM.
        reserve_cores: cores kept for the training thread: the loader's threads are
            pinned off the CPU the first next() ran on. None: 1 with at least 4 CPUs, else 0.
        rank, world_size: None: torch.distributed's when initialised, else RANK /
            WORLD_SIZE (torchrun), else 0 of 1. Ranks get disjoint, interleaved samples.
        on_error: "error" (raise, naming shard and record) or "skip".
        max_skipped: on_error="skip"'s budget per epoch on this rank, past which the
            next batch raises stoker.DataLossError naming how many were skipped and the
            first reasons (a damaged shard header drops every record of the shard): a
            fraction of the rank's samples (< 1, e.g. 0.01), a count (>= 1), or
            math.inf for no limit. None: the larger of 1 % and 100 samples.
        as_tuple: yield (image, label) / (tokens[, targets]) tuples instead of dicts.
        numpy: yield numpy arrays (no torch needed) instead of torch tensors.
        targets: token data: also deliver next-token targets (an error for records).
        position_ids, loss_mask, doc_ids, cu_seqlens: token data packed with document
            boundaries (``stoker pack tokens ... --eos ID`` or a Megatron index):
            "position_ids" int32 [B, seq_len] (position in its document, 0 after each
            EOS; position_ids="row": a document begun in an earlier row counts from 0
            at the row's start, as Megatron's --reset-position-ids, so every position
            is < seq_len), "loss_mask" uint8 [B, seq_len] (0 where the target starts another
            document), "doc_ids" int32 [B, seq_len] (document within the row, from 0),
            "cu_seqlens" int32 [D + 1] (cumulative lengths of the rows' document pieces
            over the flattened batch, for varlen attention; with
            "cu_seqlens.offsets" [B + 1]: row j's entries).
        seq_len: records of varying length (a 1-D integer var-array "tokens", e.g.
            fine-tuning conversations; an optional uint8 var-array "loss_mask" marks the
            tokens trained on) packed into rows of seq_len tokens: "tokens" [B, seq_len]
            and, as asked, "targets", "position_ids" (position in its sample),
            "loss_mask" (the stored mask of each target, 0 at a sample's end and on
            padding), "doc_ids", "cu_seqlens" per sample, and always "sample_index"
            (the row's samples, values + offsets). Which samples share a row is fixed
            per seed (best-fit within windows of pack_window samples); rows are shuffled
            each epoch like token rows. A row's unused end holds pad_id (stats():
            padding_tokens). long_samples: a sample longer than a row is an "error" when
            the Loader opens, or is "truncate"d, or "split" over rows (None: "error",
            with a tokenizer "split").
        max_tokens: the same records (instead of seq_len) unpacked, one sample per row,
            in batches of a varying number B of samples padded to the longest one's
            length L, B x L <= max_tokens (batch_size is not used): "tokens" [B, L],
            "attention_mask" uint8 [B, L] (1 on the sample's tokens), "index" int64 [B]
            (the samples' records) and, as asked, "targets", "loss_mask" (as above) and
            "position_ids" (0.. along the sample); padding holds pad_id (stats():
            padding_tokens). Which samples share a batch is fixed per seed (a shuffle cut
            into windows of pack_window samples, at least 128 batches' worth, each sorted
            by length and cut under the budget); the batches are shuffled each epoch, the same global sequence for
            every world size: rank r takes batches r, r + W, ... Every rank gets the same
            count: a final step of fewer than W batches is dropped (drop_last) or
            completed with the epoch's first batches. long_samples: "error" (default)
            or "truncate" to max_tokens. Works with tokenizer= (documents as samples),
            and with a mixture: each dataset plans its own batches and the mixture draws
            whole ones (weights and samples_per_epoch then count batches; "source" [B]).
        tokenizer: a tokenizer file (as stoker.Tokenizer opens: .tiktoken, tokenizer.json,
            SentencePiece .model): the dataset's text field (text_field, or its one text
            field) is tokenised on the loader's threads, each document as [bos] + ids +
            [eos] (bos/eos: an id, or a token's text such as "<|endoftext|>"), and the
            documents are packed into rows of seq_len as above, each row starting at a
            document's start unless a longer one continues there (or, with max_tokens=,
            batched as samples are). Opening the Loader tokenises the dataset once, on
            its threads, to count every document's tokens for the plan, and keeps the
            counts in token_counts_dir (None: ~/.cache/stoker/token-counts, or under
            $XDG_CACHE_HOME; False: none kept): the next open with the same dataset and
            tokenizer, or another rank of the node opening at once, reads them instead
            (stats()["plan_s"], ["plan_tokenised"]). A URL dataset's shards come into
            cache_dir one at a time for that pass. The verdict names the stage
            "tokenize" when it bounds the feed. tokenizer_options: for a .tiktoken file
            of no known encoding, {"pattern": its split pattern, "special_tokens":
            {text: id}}, as stoker.Tokenizer takes them.
        slots: batches in the loader's ring (memory = slots x batch bytes); None: sized
            from the batch: as many as fit in 32 MiB, clamped to 4..64 (at least 4 even
            past 32 MiB: 224 px images in batches of 64 get 4); token data up to one
            shuffle window's batches per decode thread plus one, which may exceed 64
            while it fits in 32 MiB. stats()["slots"] says the count in use.
        metrics_port: serve stats() in the Prometheus text format at
            http://HOST:metrics_port/metrics, shared with this process's other loaders
            on that port (told apart by the label "loader"); None: the environment
            variable STOKER_METRICS_PORT, else off. A port in use raises, naming it.
        token_dtype: "int64", "int32", "uint16", "uint32" or "stored" (numpy only for
            the unsigned ones: torch 1.13 has no uint16/uint32).
        pixel_format: "u8_hwc" (default), "u8_chw", "f32_chw", "f16_chw", "f32_hwc",
            "f16_hwc" (float formats normalised with mean/std on the CPU).
        mean, std: per channel, on the 0..1 scale: float pixels are (x / 255 - mean) /
            std. Only with a float pixel_format (ValueError with uint8 output, which is
            not normalised); std must be in (0, 1] and mean in [0, 1] (values like
            123.7 or 58.4 are pixel-scale by mistake: ValueError).
        pin_memory: device="cpu": batch slots in pinned (page-locked) memory, so
            ``tensor.cuda(non_blocking=True)`` is an asynchronous copy. Needs stoker
            built with CUDA and a CUDA device (stoker.UnavailableError otherwise).
        order: "shuffled", "sequential", "chunk_local" (overrides shuffle).
        io_engine: "auto", "uring" or "pread".
        io_limit_mbps: throttle reads to this many MB/s (simulating slow storage).
        direct: read with O_DIRECT where the filesystem allows it (records under a
            block are read through the page cache all the same).
        map_cached: records under a block are taken straight from a read-only mapping
            of their shard, with no read and no copy, when the shard is in the page
            cache as an epoch starts. The process's RSS then counts the pages touched
            (the page cache's, shared and reclaimable). False: every record is read.
        cache_dir: a URL's node-local shard cache (required with a URL; ranks on one
            node share it and fetch each shard once).
        cache_limit: bytes the cache may hold; None: the dataset's size. At least
            the largest shard (else an error); the loader holds only the shards it
            is reading, so a few shards suffice for order "sequential" or
            "chunk_local" (README: what each order costs with a small cache).
        cache_prefetch: shards fetched ahead of the one being read.
        remote_reads: "auto", "shards" or "records": whole shards through the cache,
            or each record by its own ranged GET with nothing cached (records only;
            not token data). "auto": records for order "shuffled" when cache_limit
            holds fewer than all shards, which would otherwise fetch about a shard
            per record read.
        remote_connections: ranged GETs in flight at once; remote_profile: the S3
            credentials profile (None: $AWS_PROFILE or "default").
        remote_timeout: seconds: once no request to the server has succeeded for this
            long, a failing one is given up on and the batch raises stoker.IoError naming
            the URL and the fault (every request 503, reset or cut), whatever the batch
            size. A server that ignores Range (answers ranged GETs with whole objects,
            as ``python3 -m http.server`` does) is detected: one warning names it, shards
            are then fetched whole (one GET each) and never record by record;
            stats()["network"]["range_ignored"] and ["whole_fetches"] say so.
        device_slots: device="cuda": batches in the device ring. Holding all but one of
            them (``list(loader)``) makes further batches copies (one warning).

    Iterating starts the current epoch from its beginning (or from the point a
    ``load_state_dict`` restored); call ``set_epoch(e)`` before each epoch for a new
    order, as with DistributedSampler. One iteration at a time per Loader: a new iter()
    starts the epoch over and supersedes the previous iterator, whose next use raises
    RuntimeError (two iterators never split one epoch between them); next() entered from
    a second thread while another waits in it raises stoker.InvalidArgumentError; close()
    from another thread makes the iterating thread's loop raise (stoker.CancelledError),
    never end as a quietly short epoch.

    Processes: a Loader runs threads, which a fork() does not copy. Create it in the
    process that iterates it (inside a DataLoader worker, after the fork) or use the
    'spawn' start method; one used in a forked child raises stoker.UnavailableError.

    Arguments of the wrong type raise TypeError, out-of-range values ValueError, each
    naming the parameter.

    Lifetime: a tensor keeps its batch's memory alive until it is freed, also after the
    Loader is gone. Holding more batches than ``slots`` (``list(loader)``) works: the
    ring grows and one ``stoker.HeldBatchesWarning`` says so.
    """

    def __init__(self, path, batch_size=None, transform="train", size=224, shuffle=True, seed=0,
                 drop_last=False, device="cpu", threads="auto", rank=None, world_size=None,
                 on_error="error", as_tuple=False, numpy=False, targets=False, *, slots=None,
                 token_dtype=None, pixel_format="u8_hwc", mean=None, std=None, order=None,
                 chunk_size=None, window_chunks=None, io_engine="auto", io_limit_mbps=None,
                 direct=True, map_cached=True, device_slots=3, fields=None, max_skipped=None, pin_memory=False,
                 position_ids=False, loss_mask=False, doc_ids=False, cu_seqlens=False, weights=None,
                 samples_per_epoch=None, cache_dir=None, cache_limit=None, cache_prefetch=4,
                 remote_reads="auto", remote_connections=None, remote_profile=None, remote_timeout=60,
                 source_fields=None, metrics_port=None, memory_limit=None, reserve_cores=None, seq_len=None,
                 pack_window=1024, long_samples=None, pad_id=0, max_tokens=None, tokenizer=None, tokenizer_options=None,
                 text_field=None, bos=None, eos=None, token_counts_dir=None, buckets=None, _stage=None):
        sources = None
        if isinstance(path, (list, tuple)):
            sources = [os.fspath(p) for p in path]
            if not sources:
                raise ValueError("a mixture needs at least one dataset")
            weights = [1.0] * len(sources) if weights is None else [float(w) for w in weights]
            path = sources[0]
        elif weights is not None:
            raise ValueError("weights= goes with a list of datasets")
        if source_fields is not None:
            if sources is None:
                raise ValueError("source_fields= goes with a list of datasets")
            if not isinstance(source_fields, (list, tuple)) or not all(isinstance(m, dict) for m in source_fields):
                raise TypeError("source_fields must be a list of dicts, one per dataset: {its output name: the "
                                f"mixture's name}}, got {source_fields!r:.200}")
        path = os.fspath(path)
        self._numpy = _flag("numpy", numpy)
        self._as_tuple = _flag("as_tuple", as_tuple)
        self._device = self._parse_device(device)

        o = _stoker.LoaderOptions()
        o.path = path
        if sources is not None:
            o.sources, o.weights = sources, weights
            o.samples_per_epoch = int(samples_per_epoch or 0)
            if source_fields is not None:
                o.source_fields = [{str(k): str(v) for k, v in m.items()} for m in source_fields]
        if max_tokens is None:
            if batch_size is None:
                raise TypeError("stoker.Loader needs batch_size= (or max_tokens= for batches under a token budget)")
            o.batch_size = _integer("batch_size", batch_size, 1)
        elif batch_size is not None:
            raise ValueError("batch_size= and max_tokens=: a max_tokens batch holds as many samples as the budget "
                             "allows; give one of them")
        o.transform = to_image_transform(transform, _integer("size", size, 1, 8192))
        field_specs = {}
        if fields is not None:
            if not isinstance(fields, dict):
                raise TypeError(f"fields must be a dict of field name -> transform, got {type(fields).__name__}")
            field_specs = {str(k): to_field_transform(k, v) for k, v in fields.items()}
        # No decode: the first image field comes as stored (a list of bytes), as every
        # untransformed image does. (C++'s default leaves it out instead: read and checked
        # only, for measuring storage alone.)
        o.untransformed_image_as_stored = transform is None and sources is None
        if field_specs:
            o.fields = field_specs
        o.pixel_format = _choice("pixel_format", pixel_format, _PIXEL_FORMATS)
        if (mean is not None or std is not None) and pixel_format.startswith("u8"):
            raise ValueError(f"mean/std normalise float pixels, but pixel_format={pixel_format!r} gives uint8 "
                             "pixels as stored; pass a float pixel_format (e.g. 'f32_chw') or drop mean/std")
        if mean is not None:
            o.mean = _triple("mean", mean)
            if not all(0 <= m <= 1 for m in o.mean):
                raise ValueError(f"mean={list(mean)} is not on the 0..1 scale: pixels are normalised as "
                                 "(x / 255 - mean) / std, so give e.g. (0.485, 0.456, 0.406), not (123.7, ...)")
        if std is not None:
            o.std = _triple("std", std)
            if not all(0 < v <= 1 for v in o.std):
                raise ValueError(f"std={list(std)} must be in (0, 1] per channel: pixels are normalised as "
                                 "(x / 255 - mean) / std, so give e.g. (0.229, 0.224, 0.225), not 0 nor (58.4, ...)")
        o.targets = _flag("targets", targets)
        if position_ids not in (False, True, "document", "row"):
            raise ValueError(f"position_ids must be True/'document' or 'row', got {position_ids!r}")
        o.position_ids, o.loss_mask = bool(position_ids), bool(loss_mask)
        o.position_ids_from_row_start = position_ids == "row"
        o.doc_ids, o.cu_seqlens = bool(doc_ids), bool(cu_seqlens)
        if tokenizer is not None:
            o.tokenizer = os.fspath(tokenizer)
            if seq_len is None and max_tokens is None:
                raise ValueError("tokenizer= packs the tokenised documents into rows of seq_len= or pads them "
                                 "into batches of max_tokens=: give one")
            if text_field is not None:
                o.text_field = str(text_field)
            topt = dict(tokenizer_options or {})
            unknown = set(topt) - {"pattern", "special_tokens"}
            if unknown:
                raise ValueError(f"tokenizer_options takes 'pattern' and 'special_tokens', not {sorted(unknown)}")
            o.tokenizer_pattern = str(topt.get("pattern", ""))
            o.tokenizer_special_tokens = {str(k): int(v) for k, v in (topt.get("special_tokens") or {}).items()}
            o.bos, o.eos = _token_id("bos", bos, o.tokenizer, topt), _token_id("eos", eos, o.tokenizer, topt)
            if token_counts_dir is not None:
                o.token_counts_dir = "" if token_counts_dir is False else os.fspath(token_counts_dir)
        elif (text_field is not None or bos is not None or eos is not None or tokenizer_options is not None
              or token_counts_dir is not None):
            raise ValueError("text_field=, tokenizer_options=, bos=, eos= and token_counts_dir= go with tokenizer=")
        if seq_len is not None and max_tokens is not None:
            raise ValueError("seq_len= packs samples into rows, max_tokens= pads them into batches under a "
                             "token budget: give one of them")
        if seq_len is not None:
            o.seq_len = _integer("seq_len", seq_len, 1, 1 << 24)
            if long_samples is None:
                long_samples = "split" if tokenizer is not None else "error"
        if max_tokens is not None:
            o.max_tokens = _integer("max_tokens", max_tokens, 1, 1 << 40)
            if long_samples is None:
                long_samples = "error"
        if seq_len is not None or max_tokens is not None:
            o.pack_window = _integer("pack_window", pack_window, 1)
            o.long_samples = _choice("long_samples", long_samples, ("error", "truncate", "split"))
            o.pad_id = _integer("pad_id", pad_id, -2**63, 2**63 - 1)
        if token_dtype is None:
            token_dtype = "stored" if self._numpy else "int64"
        _choice("token_dtype", token_dtype, ("int64", "int32", "uint16", "uint32", "stored"))
        if not self._numpy and token_dtype in ("uint16", "uint32"):
            raise ValueError(f"token_dtype={token_dtype!r} has no torch type; use int64/int32, "
                             "or numpy=True")
        o.token_dtype = token_dtype
        if order is not None:
            o.order = _choice("order", order, ("shuffled", "sequential", "chunk_local"))
        else:
            o.order = "shuffled" if _flag("shuffle", shuffle) else "sequential"
        o.seed = _integer("seed", seed, 0, 2**64 - 1)
        if chunk_size is not None:
            o.chunk_size = _integer("chunk_size", chunk_size, 1)
        if window_chunks is not None:
            o.window_chunks = _integer("window_chunks", window_chunks, 1)
        o.drop_last = _flag("drop_last", drop_last)
        o.rank, o.world_size = self._rank_world(rank, world_size)
        if buckets is not None:
            _set_buckets(o, buckets)
        if isinstance(threads, str) and threads != "auto":
            raise TypeError(f'threads must be "auto", None or an integer, got str {threads!r}')
        if threads == "auto":
            o.threads = _AUTO_THREADS
        else:
            o.threads = 0 if threads is None else _integer("threads", threads, 0, 4096)
        if memory_limit is not None:
            o.memory_limit = _integer("memory_limit", memory_limit, 1)
        if reserve_cores is not None:
            o.reserve_cores = _integer("reserve_cores", reserve_cores, 0, 4096)
        if o.threads != _AUTO_THREADS and o.threads > 4 * _usable_cpus():
            # Legal (the threads just take turns), but far past any gain: almost surely a slip.
            warnings.warn(f"stoker: threads={o.threads} decode threads on {_usable_cpus()} usable CPUs; they will "
                          "only take turns. threads=None sizes them from the CPU plan", RuntimeWarning, stacklevel=2)
        o.slots = 0 if slots is None else _integer("slots", slots, 1, 1 << 20)
        o.metrics_port = 0 if metrics_port is None else _integer("metrics_port", metrics_port, 1, 65535)
        o.on_error = _choice("on_error", on_error, ("error", "skip"))
        if max_skipped is not None:
            o.max_skipped = _number("max_skipped", max_skipped, 0)
        o.io_engine = _choice("io_engine", io_engine, ("auto", "uring", "pread"))
        o.io_direct = _flag("direct", direct)
        o.io_map_cached = _flag("map_cached", map_cached)
        if io_limit_mbps is not None:
            o.io_limit_bytes_per_s = _number("io_limit_mbps", io_limit_mbps, 0) * 1e6
        o.pin_memory = _flag("pin_memory", pin_memory)
        if o.pin_memory and self._device is not None:
            raise ValueError("pin_memory=True is for device='cpu' batches; device='cuda' batches are staged "
                             "from pinned slots already")
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
        o.device_slots = _integer("device_slots", device_slots, 1, 64)
        remote = "://" in path or (sources is not None and any("://" in p for p in sources))
        if cache_dir is not None:
            o.cache_dir = os.fspath(cache_dir)
            if not remote:
                warnings.warn(f"stoker: cache_dir={o.cache_dir!r} is ignored: it caches a URL's shards, and {path} "
                              "is local (read in place)", RuntimeWarning, stacklevel=2)
        if cache_limit is not None:
            o.cache_limit = _integer("cache_limit", cache_limit, 0)
        o.cache_prefetch = _integer("cache_prefetch", cache_prefetch, 0, 1 << 20)
        o.remote_reads = _choice("remote_reads", remote_reads, ("auto", "shards", "records"))
        if remote_connections is not None:
            o.remote_connections = _integer("remote_connections", remote_connections, 1)
        if remote_profile is not None:
            o.remote_profile = str(remote_profile)
        o.remote_timeout = _number("remote_timeout", remote_timeout, 1)

        converter = None
        if not self._numpy:
            import torch.utils.dlpack
            converter = torch.utils.dlpack.from_dlpack
        # The C++ Loader opens the dataset (a URL's MANIFEST is fetched once, there) and
        # refuses the token outputs asked of records, naming the schema.
        self._impl = _stoker.Loader(o, converter, stream)
        self._buckets = (_stoker.resolve_buckets(o.buckets, o.bucket_pixels, o.bucket_step, o.bucket_max_ratio)
                         if o.buckets or o.bucket_pixels else None)
        self._tokens = any(kind == "tokens" for _, kind in _schema_fields(self._impl.schema))
        self._options = o
        self._fresh = True  # the next iteration continues where the loader stands
        self._generation = 0  # iterators made so far: only the latest may be used (_Iteration)
        # as_tuple: the outputs in the order the dataset's fields come (v1: image, label)
        self._tuple_keys = None
        self._fingerprint = {
            "dataset_samples": self._impl.epoch_samples,
            "dataset_generation": self._impl.generation,
            "sources": [sources, weights] if sources is not None else None,
            "schema": self._impl.schema,
            "order": o.order,
            "seed": o.seed,
            "transform": repr(o.transform) if not self._tokens else None,
            "fields": {k: repr(v) for k, v in (fields or {}).items()},
            "pixel_format": o.pixel_format if not self._tokens else None,
            "token_dtype": o.token_dtype if self._tokens else None,
            "targets": o.targets if self._tokens else None,
            "drop_last": o.drop_last,
            "buckets": self.buckets,
        }

    # --- iteration -------------------------------------------------------------------
    def __iter__(self):
        if not self._fresh:
            self._impl.set_epoch(self._impl.epoch)  # raises while another thread is inside next()
        self._fresh = False
        return _Iteration(self)

    def _post(self, b):
        if not self._as_tuple:
            return b
        if self._tuple_keys is None:
            keys = [k for k in b if k not in ("index", "__key__", "source") and not k.endswith(".offsets")]
            if self._tokens:
                keys = [k for k in ("tokens", "targets") if k in b] + \
                       [k for k in keys if k not in ("tokens", "targets")]
            elif "image" in b:  # version 1: (image, label)
                keys = [k for k in ("image", "label") if k in b] + [k for k in keys if k not in ("image", "label")]
            self._tuple_keys = keys
        return tuple(b[k] for k in self._tuple_keys)

    def __getitem__(self, i):
        # torch's DataLoader takes anything that is not an IterableDataset for a map-style
        # dataset and indexes it: say what to do instead of "not subscriptable".
        raise TypeError(
            "stoker.Loader is iterable, not indexable: it batches, shuffles and decodes on its own threads, so "
            "iterate it directly (for batch in loader) instead of wrapping it in torch.utils.data.DataLoader "
            "(README: 'stoker and torch's DataLoader')")

    def __len__(self):
        return int(self._impl.num_batches())

    def set_epoch(self, epoch):
        """Restart at the beginning of `epoch` (a new order and new augmentation draws).

        After load_state_dict(), and before the next batch, set_epoch() of the restored
        epoch keeps the restored position: the usual loop (set_epoch at the top of every
        epoch, started at the state's epoch) resumes where it stopped, repeating nothing.
        Another epoch then raises InvalidArgumentError, unless the restored position was
        the end of its epoch."""
        self._impl.set_epoch(_integer("epoch", epoch, 0, 2**64 - 1))
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
    def buckets(self):
        """The buckets (height, width), tallest first; batch["bucket"] indexes this list.
        None without buckets=."""
        return None if self._buckets is None else list(self._buckets)

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
        one handed out when the state was taken.

        What must match (ValueError naming it otherwise): the dataset (its manifest
        generation — records appended since the state was taken refuse the resume —,
        sample count and schema), the order kind and its chunk parameters, the seed and drop_last:
        the order state depends on these alone. What may change: the world size and
        batch size (the position is global: samples consumed by all ranks), and the
        transform, size, fields and output types — progressive resizing resumes with
        the same samples in the same order, decoded at the new size."""
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a stoker Loader state (version {_STATE_VERSION}): {state!r:.200}")
        theirs = state.get("fingerprint", {})
        # A state from before generations were recorded was taken on generation 1.
        saved_gen, gen = theirs.get("dataset_generation", 1), self._fingerprint["dataset_generation"]
        if saved_gen != gen:
            raise ValueError(
                f"state_dict was taken on generation {saved_gen} of the dataset ({theirs.get('dataset_samples')} "
                f"samples); this loader opened generation {gen} ({self._fingerprint['dataset_samples']} samples): "
                "records were appended since (or the dataset was replaced), so the saved position does not "
                "continue the same sample order; resume on a copy of that generation, or start a new epoch")
        diffs = [f"{k}: saved {theirs.get(k)!r}, loader {self._fingerprint[k]!r}"
                 for k in _RESUME_KEYS if theirs.get(k) != self._fingerprint[k]]
        if diffs:
            raise ValueError("state_dict was made with other options: " + "; ".join(diffs))
        self._impl.load_state(state["order_state"])
        self._fresh = True

    # --- figures ---------------------------------------------------------------------
    def stats(self):
        """Per-stage figures (LoaderStats) as a dict: throughput, busy/wait time of the
        IO and decode stages, consumer wait, ring occupancy, slots, IO engine, the
        bottleneck with its evidence, "stage" (the Stager's figures, device batches),
        "network" (a URL's fetches and cache: bytes and requests fetched and per second,
        requests in flight, the readers' wait on fetches, cache hits, misses and hit
        rate, cache bytes and limit; None for a local dataset) and "summary" (summary()
        of the same figures)."""
        return self._impl.stats()

    def summary(self):
        """stats() in one human-readable line (the same figures as its evidence)."""
        return self._impl.stats()["summary"]

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
        size = f"max_tokens={o.max_tokens}" if o.max_tokens else f"batch_size={o.batch_size}"
        return (f"stoker.Loader({o.path!r}, {size}, order={o.order!r}, "
                f"seed={o.seed}, rank={self.rank}/{self.world_size}, epoch={self.epoch})")

    # --- helpers ---------------------------------------------------------------------
    def _rank_world(self, rank, world_size):
        """(rank, world_size), checked, naming where each value came from."""
        src_r = src_w = "argument"
        if rank is None or world_size is None:
            dr, dw, where = _rank_world_with_source()
            if rank is None:
                rank, src_r = dr, where
            if world_size is None:
                world_size, src_w = dw, where
        rank = _integer("rank", rank)
        world_size = _integer("world_size", world_size)
        if world_size < 1:
            raise ValueError(f"world_size={world_size} (from {src_w}) must be >= 1")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} (from {src_r}) is not a rank of world_size={world_size} (from {src_w}): "
                             f"ranks run 0..{world_size - 1}")
        return rank, world_size

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

