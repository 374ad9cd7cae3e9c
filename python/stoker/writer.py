"""stoker.Writer: a dataset from any source, one sample dict at a time.

    with stoker.Writer("out", fields={"jpg": "image", "cls": "int64", "txt": "text",
                                      "emb": ("ndarray", "float32", (512,)),
                                      "boxes": ("vararray", "float32", (4,))}) as w:
        for key, jpg_bytes, label, caption, emb, boxes in source:
            w.write({"__key__": key, "jpg": jpg_bytes, "cls": label, "txt": caption,
                     "emb": emb, "boxes": boxes})

Field kinds (see shards/FORMAT.md): "image" (JPEG/PNG/WebP file bytes, checked by
magic), "video" / "audio" (a media file's bytes: mp4, mkv, webm ... / wav, flac, mp3 ...,
probed and decoded when written, stored with its keyframe index), "bytes", "text" (str), "int64" (int), "float32" / "float64" (float),
("ndarray", dtype, shape) for a fixed shape and ("vararray", dtype, inner_shape) for
arrays [n, *inner_shape] with n varying per sample (0 allowed). Every record also gets
a `__key__` (text): the sample's "__key__" value when it has one, else its index as
"%09d". Wrong types raise TypeError, wrong values (shapes, dtypes, missing or unknown
fields, bad images, invalid text) ValueError, each naming the field. A Writer left by
an exception (or closed with discard()) removes the shard files it wrote.
"""

import math
import numbers
import struct

import numpy as np

from . import _stoker

KEY = "__key__"
_SCALARS = {"int64", "float32", "float64", "text", "bytes", "image", "video", "audio"}
_DTYPES = {"uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32", "float64", "bool"}


def _parse_field(name, spec):
    """(name, kind, dtype, shape) from a user's field spec; ValueError naming the field."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"field names must be non-empty str, got {name!r}")
    if isinstance(spec, str):
        if spec not in _SCALARS:
            raise ValueError(f"field {name!r}: unknown kind {spec!r} (expected one of "
                             f"{sorted(_SCALARS)} or ('ndarray'|'vararray', dtype, shape))")
        return (name, spec, "", [])
    if isinstance(spec, (tuple, list)) and len(spec) == 3 and spec[0] in ("ndarray", "vararray"):
        kind, dtype, shape = spec
        dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
        if dtype not in _DTYPES:
            raise ValueError(f"field {name!r}: dtype {dtype!r} is not one of {sorted(_DTYPES)}")
        if isinstance(shape, int):
            shape = (shape,)
        try:
            shape = [int(d) for d in shape]
        except TypeError:
            raise TypeError(f"field {name!r}: shape must be a tuple of ints, got {shape!r}") from None
        if any(d < 1 for d in shape):
            raise ValueError(f"field {name!r}: shape {tuple(shape)} has a dimension < 1")
        return (name, kind, dtype, shape)
    raise ValueError(f"field {name!r}: spec {spec!r} is not a kind name or ('ndarray'|'vararray', dtype, shape)")


def _part_text(part):
    """"I/N" from None, "I/N" or (I, N)."""
    if part is None:
        return ""
    if isinstance(part, str):
        return part
    if isinstance(part, (tuple, list)) and len(part) == 2:
        return f"{int(part[0])}/{int(part[1])}"
    raise TypeError(f"part must be 'I/N' or (I, N), got {part!r}")


class Writer:
    """Writes a stoker dataset (format version 2) from sample dicts; see the module doc.

    out: the dataset directory (created); fields: {name: spec}; shard_size: roll to a new
    shard past this many bytes; zstd: 0 (none) or a zstd level 1..19 per record;
    overwrite: replace a dataset already in `out`; class_names / meta: stored in the
    manifest (labels index class_names). part="I/N" (or a tuple (I, N)): write part I of N
    of a dataset (shards under part-unique names and a part manifest, no MANIFEST);
    stoker.commit(out) publishes it once all N parts are written (stoker/commit.h).
    append=True: add the records to the dataset in `out` as its next generation (same
    fields, class names and meta; a Loader already open keeps the generation it opened).
    video_reencode: None, or {"gop": N, "max_side": S, "fps": F, "crf": Q, "encoder": E}:
    re-encode every video value before it is stored, as ``stoker pack videofolder
    --video-gop N`` does (stoker.reencode_video); the manifest's meta "video_reencode" says how."""

    def __init__(self, out, fields, *, shard_size=256 << 20, zstd=0, align=1, overwrite=False,
                 class_names=None, meta=None, part=None, append=False, video_reencode=None):
        if not isinstance(fields, dict) or not fields:
            raise TypeError("fields must be a non-empty dict {name: kind}")
        if isinstance(shard_size, bool) or not isinstance(shard_size, numbers.Integral):
            raise TypeError(f"shard_size must be an int, got {shard_size!r}")
        if isinstance(zstd, bool) or not isinstance(zstd, numbers.Integral):
            raise TypeError(f"zstd must be an int level, got {zstd!r}")
        if not 0 <= zstd <= 19:
            raise ValueError(f"zstd must be 0 (off) or a level 1..19, got {zstd}")
        specs = [_parse_field(n, s) for n, s in fields.items() if n != KEY]
        if KEY in fields and fields[KEY] != "text":
            raise ValueError(f"field {KEY!r} is the record's key and must be 'text'")
        self._fields = [(KEY, "text", "", [])] + specs
        self._meta = {str(k): str(v) for k, v in (meta or {}).items()}
        self._meta.setdefault("source", "writer")
        self._class_names = [str(c) for c in (class_names or [])]
        self._native = _stoker._NativeWriter(str(out), [tuple(f) for f in self._fields], int(shard_size),
                                             int(zstd), int(align), bool(overwrite), _part_text(part),
                                             bool(append), video_reencode)
        self._count = 0
        self.summary = None

    # -- value conversion, one per kind; each raises TypeError/ValueError naming the field

    @staticmethod
    def _bytes_like(name, kind, v):
        if isinstance(v, (bytes, bytearray, memoryview)):
            return v
        raise TypeError(f"field {name!r} ({kind}) takes bytes, got {type(v).__name__}")

    def _convert(self, name, kind, dtype, shape, v):
        if kind in ("image", "bytes", "video", "audio"):
            return self._bytes_like(name, kind, v)
        if kind == "text":
            if not isinstance(v, str):
                raise TypeError(f"field {name!r} (text) takes str, got {type(v).__name__}")
            try:
                return v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"field {name!r} (text): not encodable as UTF-8: {e}") from None
        if kind == "int64":
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
                raise TypeError(f"field {name!r} (int64) takes an int, got {type(v).__name__}")
            v = int(v)
            if not -(1 << 63) <= v < (1 << 63):
                raise ValueError(f"field {name!r} (int64): {v} is out of range")
            return struct.pack("<q", v)
        if kind in ("float32", "float64"):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating, np.integer)):
                raise TypeError(f"field {name!r} ({kind}) takes a float, got {type(v).__name__}")
            v = float(v)
            if kind == "float32" and math.isfinite(v) and abs(v) > 3.4028234663852886e38:
                raise ValueError(f"field {name!r} (float32): {v} is out of range")
            return struct.pack("<f" if kind == "float32" else "<d", v)
        # ndarray / vararray
        if not isinstance(v, np.ndarray):
            if isinstance(v, (list, tuple)):
                v = np.asarray(v, dtype=dtype)
            else:
                raise TypeError(f"field {name!r} ({kind}) takes a numpy array, got {type(v).__name__}")
        if v.dtype != np.dtype(dtype):
            raise TypeError(f"field {name!r} ({kind}) holds {dtype}, got an array of {v.dtype}")
        want = tuple(shape)
        if kind == "ndarray" and v.shape != want:
            raise ValueError(f"field {name!r} (ndarray): shape {v.shape} is not {want}")
        if kind == "vararray" and (v.ndim != len(want) + 1 or v.shape[1:] != want):
            raise ValueError(f"field {name!r} (vararray): shape {v.shape} is not (n, {', '.join(map(str, want))})"
                             .replace(", )", ")"))
        return np.ascontiguousarray(v, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()

    def write(self, sample):
        """Appends one sample: a dict with a value for every field (and optionally "__key__")."""
        if not isinstance(sample, dict):
            raise TypeError(f"write() takes a dict, got {type(sample).__name__}")
        names = {f[0] for f in self._fields}
        unknown = [k for k in sample if k not in names]
        if unknown:
            raise ValueError(f"sample has field {unknown[0]!r}, which the Writer's fields do not declare "
                             f"({sorted(names - {KEY})})")
        key = sample.get(KEY, "%09d" % self._count)
        if not isinstance(key, str):
            raise TypeError(f"field {KEY!r} takes str, got {type(key).__name__}")
        values = [self._convert(KEY, "text", "", [], key)]
        for name, kind, dtype, shape in self._fields[1:]:
            if name not in sample:
                raise ValueError(f"sample {key!r} has no value for field {name!r}")
            values.append(self._convert(name, kind, dtype, shape, sample[name]))
        self._native.add(values)
        self._count += 1

    def close(self):
        """Finishes the last shard and writes the manifest; returns a summary dict."""
        if self.summary is None:
            self.summary = self._native.finish(self._meta, self._class_names)
        return self.summary

    def discard(self):
        """Gives up: removes the shard files written so far. Returns how many."""
        return self._native.discard()

    @property
    def records(self):
        return self._count

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.discard()
        return False
