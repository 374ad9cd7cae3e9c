"""Packing from Python: the C++ packers, summaries as dicts, datasets the Loader reads."""

import os
import tarfile

import numpy as np

import stoker
from conftest import CLASS_NAMES, make_imagefolder


def test_pack_imagefolder_stores_files_unchanged_with_labels(tmp_path):
    src = make_imagefolder(str(tmp_path / "f"), per_class=3)
    out = str(tmp_path / "ds")
    s = stoker.pack_imagefolder(src, out, threads=1)
    assert s["records"] == 9 and s["shards"] == 1 and s["skipped"] == []
    m = stoker.read_manifest(out)
    assert m["class_names"] == CLASS_NAMES and m["records"] == 9
    assert m["schema"] == "__key__:text image:image label:int64"
    files = [(os.path.join(src, c, f), k) for k, c in enumerate(CLASS_NAMES)
             for f in sorted(os.listdir(os.path.join(src, c)))]
    for i, (f, label) in enumerate(files):
        rec = stoker.read_record(out, i)
        with open(f, "rb") as fh:
            assert rec["image"] == fh.read()
        assert rec["label"] == label
    assert s["input_bytes"] == sum(os.path.getsize(f) for f, _ in files)


def test_pack_imagefolder_fast_crop_gives_the_same_batches(tmp_path):
    src = make_imagefolder(str(tmp_path / "f"), per_class=3)
    plain, fast = str(tmp_path / "plain"), str(tmp_path / "fast")
    stoker.pack_imagefolder(src, plain, threads=1)
    s = stoker.pack_imagefolder(src, fast, threads=1, fast_crop=True)
    assert s["rewritten"] == 9
    assert stoker.read_manifest(fast)["meta"]["fast_crop"] == "1"
    assert stoker.read_record(fast, 0)["image"] != stoker.read_record(plain, 0)["image"]

    def batches(path):
        loader = stoker.Loader(path, batch_size=4, transform="train", size=64, threads=1, seed=5,
                               rank=0, world_size=1, numpy=True)
        return [(b["image"].copy(), b["label"].copy()) for b in loader]

    for (ia, la), (ib, lb) in zip(batches(plain), batches(fast), strict=True):
        assert np.array_equal(ia, ib) and np.array_equal(la, lb)


def test_pack_imagefolder_skip_bad_lists_the_bad_file(tmp_path):
    src = make_imagefolder(str(tmp_path / "f"), per_class=2)
    with open(os.path.join(src, CLASS_NAMES[1], "zz_not_a_jpeg.jpg"), "wb") as f:
        f.write(b"hello, not a jpeg")
    s = stoker.pack_imagefolder(src, str(tmp_path / "ds"), skip_bad=True)
    assert s["records"] == 6
    assert len(s["skipped"]) == 1 and "zz_not_a_jpeg.jpg" in s["skipped"][0]


def test_pack_tokens_rows_and_meta(tmp_path):
    stream = np.arange(1000, dtype=np.uint32) * 3
    f = str(tmp_path / "t.bin")
    stream.tofile(f)
    out = str(tmp_path / "ds")
    s = stoker.pack_tokens(f, out, dtype="uint32", seq_len=10, rows_per_record=4, zstd=0)
    rows = (1000 - 1) // 10
    assert s["records"] == (rows + 3) // 4
    m = stoker.read_manifest(out)
    assert m["meta"]["seq_len"] == "10" and m["meta"]["dtype"] == "uint32"
    rec = np.frombuffer(stoker.read_record(out, 1)["tokens"], dtype=np.uint32).reshape(-1, 11)
    np.testing.assert_array_equal(rec[0], stream[40:51])
    b = next(iter(stoker.Loader(out, batch_size=3, shuffle=False, numpy=True, targets=True)))
    np.testing.assert_array_equal(b["targets"][2], stream[21:31])


def test_sample_generators_make_packable_data(tmp_path):
    s = stoker.make_sample_imagefolder(str(tmp_path / "f"), images=6, classes=2, threads=1)
    assert s["records"] == 6
    d = stoker.pack_imagefolder(str(tmp_path / "f"), str(tmp_path / "ds"))
    assert d["records"] == 6
    info = stoker.probe_jpeg(stoker.read_record(str(tmp_path / "ds"), 0)["image"])
    assert info["width"] > 0 and info["components"] == 3
    stoker.make_sample_tokens(str(tmp_path / "t.bin"), tokens=5000, vocab=300, seed=1)
    stoker.make_sample_tokens(str(tmp_path / "t2.bin"), tokens=5000, vocab=300, seed=1)
    stoker.make_sample_tokens(str(tmp_path / "t3.bin"), tokens=5000, vocab=300, seed=2)
    arr = np.fromfile(str(tmp_path / "t.bin"), dtype=np.uint16)
    assert len(arr) == 5000 and arr.max() < 300
    assert (tmp_path / "t.bin").read_bytes() == (tmp_path / "t2.bin").read_bytes()
    assert (tmp_path / "t.bin").read_bytes() != (tmp_path / "t3.bin").read_bytes()


def test_pack_functions_are_documented_and_pack_wds_takes_fast_crop(tmp_path):
    for f in (stoker.pack_imagefolder, stoker.pack_tokens, stoker.pack_wds, stoker.extract):
        assert len(f.__doc__.split("\n")) > 3, f.__name__
    src = make_imagefolder(str(tmp_path / "f"), per_class=2)
    tar = tmp_path / "a.tar"
    with tarfile.open(tar, "w") as t:
        for c in sorted(os.listdir(src)):
            for name in sorted(os.listdir(os.path.join(src, c))):
                t.add(os.path.join(src, c, name), arcname=f"{c}-{os.path.splitext(name)[0]}.jpg")
    s = stoker.pack_wds([str(tar)], str(tmp_path / "ds"), fast_crop=True)
    assert s["rewritten"] == s["records"] == 6
    assert stoker.read_manifest(str(tmp_path / "ds"))["meta"]["fast_crop"] == "1"
    assert any(n.startswith("fast crop:") for n in s["notes"]), s["notes"]
