"""stoker.Writer (a dataset from any source) and the v2 packers from Python: every
field kind round-trips, errors name the field, an aborted Writer leaves nothing."""

import io
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

import stoker


def image_bytes(fmt, colour=(200, 30, 30), size=(12, 8)):
    b = io.BytesIO()
    Image.new("RGB", size, colour).save(b, fmt)
    return b.getvalue()


FIELDS = {
    "jpg": "image",
    "png": "image",
    "cls": "int64",
    "score": "float32",
    "weight": "float64",
    "txt": "text",
    "raw": "bytes",
    "emb": ("ndarray", "float32", (2, 3)),
    "mask": ("ndarray", "bool", (2, 2)),
    "boxes": ("vararray", "float32", (4,)),
    "ids": ("vararray", "int64", ()),
}
CAPTIONS = ["a cat", "", "naïve café — 東京 🚀", "line\nbreak\ttab"]


def sample(i):
    return {
        "__key__": f"src/{i:04d}",
        "jpg": image_bytes("JPEG", (i * 30 % 255, 20, 20)),
        "png": image_bytes("PNG", (20, i * 30 % 255, 20)),
        "cls": i - 2,
        "score": 0.25 * i,
        "weight": -1.5e300 * i,
        "txt": CAPTIONS[i % len(CAPTIONS)],
        "raw": bytes(range(i * 7 % 256))[: i * 3],  # empty for i == 0
        "emb": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
        "mask": np.array([[True, False], [i % 2 == 0, True]]),
        "boxes": np.full((i % 3, 4), i, dtype=np.float32),  # 0, 1 or 2 boxes
        "ids": np.arange(i % 4, dtype=np.int64) * (1 << 40),
    }


def test_every_field_kind_round_trips(tmp_path):
    out = str(tmp_path / "ds")
    with stoker.Writer(out, fields=FIELDS, shard_size=8192, zstd=3) as w:
        for i in range(9):
            w.write(sample(i))
    assert w.summary["records"] == 9 and w.summary["shards"] > 1
    m = stoker.read_manifest(out)
    assert m["schema"].startswith("__key__:text jpg:image png:image cls:int64 score:float32")
    assert "boxes:vararray/float32/*x4" in m["schema"] and "emb:ndarray/float32/2x3" in m["schema"]
    for i in range(9):
        want, got = sample(i), stoker.read_record(out, i)
        assert got["__key__"] == want["__key__"]
        for k in ("jpg", "png", "raw"):
            assert got[k] == want[k], k
        assert got["cls"] == want["cls"] and got["txt"] == want["txt"]
        assert got["score"] == pytest.approx(want["score"]) and got["weight"] == want["weight"]
        for k in ("emb", "mask", "boxes", "ids"):
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
            np.testing.assert_array_equal(got[k], want[k])


def test_keys_are_generated_when_the_sample_has_none(tmp_path):
    out = str(tmp_path / "ds")
    with stoker.Writer(out, fields={"x": "int64"}) as w:
        for i in range(3):
            w.write({"x": i})
    assert [stoker.read_record(out, i)["__key__"] for i in range(3)] == ["000000000", "000000001", "000000002"]


@pytest.mark.parametrize("value, error, words", [
    ({"cls": "3"}, TypeError, ["'cls'", "int"]),
    ({"cls": True}, TypeError, ["'cls'"]),
    ({"score": "x"}, TypeError, ["'score'", "float"]),
    ({"txt": b"bytes"}, TypeError, ["'txt'", "str"]),
    ({"txt": "\ud800"}, ValueError, ["'txt'", "UTF-8"]),
    ({"jpg": "not bytes"}, TypeError, ["'jpg'", "bytes"]),
    ({"jpg": b"GIF89a......"}, ValueError, ["'jpg'", "JPEG, PNG or WebP"]),
    ({"emb": np.zeros((3, 2), np.float32)}, ValueError, ["'emb'", "(3, 2)"]),
    ({"emb": np.zeros((2, 3), np.float64)}, TypeError, ["'emb'", "float64"]),
    ({"boxes": np.zeros((2, 5), np.float32)}, ValueError, ["'boxes'", "(2, 5)"]),
    ({"boxes": [1, 2, 3]}, ValueError, ["'boxes'"]),
    ({"extra": 1}, ValueError, ["'extra'"]),
    ({"__key__": 7}, TypeError, ["'__key__'"]),
])
def test_bad_values_raise_naming_the_field(tmp_path, value, error, words):
    w = stoker.Writer(str(tmp_path / "ds"), fields=FIELDS)
    s = sample(1)
    s.update(value)
    with pytest.raises(error) as e:
        w.write(s)
    for word in words:
        assert word in str(e.value), str(e.value)
    w.write(sample(2))  # the writer is still usable
    assert w.close()["records"] == 1


def test_missing_field_and_bad_specs(tmp_path):
    w = stoker.Writer(str(tmp_path / "ds"), fields={"a": "int64", "b": "text"})
    with pytest.raises(ValueError, match="no value for field 'b'"):
        w.write({"a": 1})
    w.discard()
    with pytest.raises(ValueError, match="'x'.*unknown kind"):
        stoker.Writer(str(tmp_path / "d2"), fields={"x": "jpeg2000"})
    with pytest.raises(ValueError, match="'v'.*dtype"):
        stoker.Writer(str(tmp_path / "d3"), fields={"v": ("ndarray", "complex64", (2,))})
    with pytest.raises(ValueError, match="'v'"):
        stoker.Writer(str(tmp_path / "d4"), fields={"v": ("vararray", "float32", (0,))})
    with pytest.raises(ValueError, match="zstd"):
        stoker.Writer(str(tmp_path / "d5"), fields={"a": "int64"}, zstd=42)


def test_an_exception_inside_the_block_leaves_no_dataset(tmp_path):
    out = tmp_path / "ds"
    with pytest.raises(RuntimeError):
        with stoker.Writer(str(out), fields={"a": "bytes"}, shard_size=4096) as w:
            for i in range(50):
                w.write({"a": bytes(300)})
            raise RuntimeError("source failed")
    assert not any(out.iterdir())  # no shard, no .tmp, no MANIFEST


def test_pack_wds_from_python_reads_compressed_tars_and_extract_restores_them(tmp_path):
    members = {}
    for i in range(4):
        k = f"d/{i:03d}"
        members[k + ".jpg"] = image_bytes("JPEG", (i * 50, 0, 0))
        members[k + ".cls"] = str(i).encode()
        members[k + ".txt"] = f"caption {i} é".encode()
        b = io.BytesIO()
        np.save(b, np.full((i, 4), i, dtype=np.float32))
        members[k + ".npy"] = b.getvalue()
    tar = tmp_path / "a.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    s = stoker.pack_wds([str(tar)], str(tmp_path / "ds"))
    assert s["records"] == 4
    m = stoker.read_manifest(str(tmp_path / "ds"))
    assert m["schema"] == "__key__:text cls:int64 jpg:image npy:vararray/float32/*x4 txt:text"
    r = stoker.read_record(str(tmp_path / "ds"), 3)
    assert r["__key__"] == "d/003" and r["cls"] == 3 and r["txt"] == "caption 3 é"
    np.testing.assert_array_equal(r["npy"], np.full((3, 4), 3, np.float32))
    stoker.extract(str(tmp_path / "ds"), str(tmp_path / "x"))
    for name, data in members.items():
        assert (tmp_path / "x" / name).read_bytes() == data, name


def test_pack_tokens_reports_the_dropped_tail(tmp_path):
    f = tmp_path / "t.bin"
    np.arange(100, dtype=np.uint16).tofile(f)
    s = stoker.pack_tokens(str(f), str(tmp_path / "ds"), dtype="uint16", seq_len=8)
    assert s["tokens_dropped"] == 100 - (12 * 8 + 1)
    assert "dropped the last 3 of 100 tokens" in s["notes"][0]
    assert stoker.read_manifest(str(tmp_path / "ds"))["meta"]["tokens_dropped"] == "3"


def test_ctrl_c_during_a_pack_raises_keyboardinterrupt_and_leaves_nothing(tmp_path):
    import signal
    import threading
    f = tmp_path / "t.bin"
    f.write_bytes(np.random.default_rng(1).integers(0, 64, 24 << 20, dtype=np.uint16).tobytes())
    out = tmp_path / "ds"
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            # Compressible tokens at zstd 19 on one thread: ~6 s on the 2-core VM, far longer
            # than the second before the interrupt (incompressible ones took 1 s: zstd only
            # stores them).
            stoker.pack_tokens(str(f), str(out), dtype="uint16", seq_len=1024, zstd=19, threads=1,
                               shard_size=1 << 20)
    finally:
        timer.cancel()
    assert not out.exists() or not any(out.iterdir())  # no .tmp, no shard, no MANIFEST
