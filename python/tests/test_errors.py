"""Errors reach Python as stoker.Error subclasses naming shard and record."""

import io
import os
import shutil

import numpy as np
import pytest

import stoker
from conftest import make_imagefolder

S = 16


def test_error_hierarchy():
    assert issubclass(stoker.Error, RuntimeError)
    assert issubclass(stoker.DataLossError, stoker.Error)
    assert issubclass(stoker.InvalidArgumentError, ValueError)
    assert stoker.DataLossError.code == "data_loss"
    assert stoker.NotFoundError.code == "not_found"
    assert issubclass(stoker.HeldBatchesWarning, UserWarning)


def test_a_flipped_byte_fails_the_crc_naming_shard_and_record(image_dataset, tmp_path):
    src, n = image_dataset
    path = str(tmp_path / "ds")
    shutil.copytree(src, path)
    victim = 37
    loc = stoker.record_location(path, victim)
    with open(loc["shard"], "r+b") as f:
        f.seek(loc["offset"] + loc["stored_size"] // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    loader = stoker.Loader(path, batch_size=8, size=S, shuffle=False, threads=2)
    got = []
    with pytest.raises(stoker.DataLossError) as e:
        for b in loader:
            got += b["index"].tolist()
    msg = str(e.value)
    assert os.path.basename(loc["shard"]) in msg
    assert f"record {loc['record']}" in msg
    assert got == list(range(32))  # the batches before the bad one came through


def test_a_corrupt_jpeg_with_a_valid_crc_fails_in_decode_naming_the_record(tmp_path):
    from PIL import Image

    src = make_imagefolder(str(tmp_path / "folder"), per_class=2)
    # Replace one image by a JPEG whose entropy-coded data is cut short: the header
    # probes fine (so it packs, with a correct CRC) but decoding fails.
    buf = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 128, np.uint8), "RGB").save(buf, "JPEG", quality=95)
    data = buf.getvalue()
    sos = data.index(b"\xff\xda")
    bad = data[:sos + 20] + b"\xff\xd9"
    bad_file = os.path.join(src, "cls_b_green", "img_000.jpg")
    with open(bad_file, "wb") as f:
        f.write(bad)
    path = str(tmp_path / "ds")
    stoker.pack_imagefolder(src, path)
    victim = 2  # cls_a_red has 2 images, then cls_b_green/img_000
    assert stoker.read_record(path, victim)["image"] == bad
    loc = stoker.record_location(path, victim)
    with pytest.raises(stoker.DataLossError) as e:
        for _ in stoker.Loader(path, batch_size=2, transform="eval", size=S, shuffle=False):
            pass
    msg = str(e.value)
    assert os.path.basename(loc["shard"]) in msg and f"record {loc['record']}" in msg


def test_bad_arguments_raise_value_errors(image_dataset, tmp_path):
    path, _ = image_dataset
    with pytest.raises(stoker.NotFoundError):
        stoker.Loader(str(tmp_path / "nope"), batch_size=4)
    with pytest.raises(ValueError):
        stoker.Loader(path, batch_size=0)
    with pytest.raises(ValueError, match="transform"):
        stoker.Loader(path, batch_size=4, transform="bogus")
    with pytest.raises(ValueError, match="rank"):
        stoker.Loader(path, batch_size=4, rank=2, world_size=2)
    with pytest.raises(ValueError, match="on_error"):
        stoker.Loader(path, batch_size=4, on_error="ignore")
    with pytest.raises(ValueError, match="pixel_format"):
        stoker.Loader(path, batch_size=4, pixel_format="rgb")


def test_pack_errors_are_typed(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(stoker.InvalidArgumentError):
        stoker.pack_imagefolder(str(tmp_path / "empty"), str(tmp_path / "out"))
    with pytest.raises(stoker.Error):
        stoker.pack_tokens(str(tmp_path / "missing.bin"), str(tmp_path / "out2"), seq_len=8)
