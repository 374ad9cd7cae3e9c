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
    # probes fine, so with pack's decode check off it packs, with a correct CRC, but
    # decoding fails. (With the check on, pack refuses it: test_pack.)
    buf = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 128, np.uint8), "RGB").save(buf, "JPEG", quality=95)
    data = buf.getvalue()
    sos = data.index(b"\xff\xda")
    bad = data[:sos + 20] + b"\xff\xd9"
    bad_file = os.path.join(src, "cls_b_green", "img_000.jpg")
    with open(bad_file, "wb") as f:
        f.write(bad)
    path = str(tmp_path / "ds")
    stoker.pack_imagefolder(src, path, check=False)
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


def test_not_found_and_io_errors_are_the_builtin_os_errors(tmp_path):
    assert issubclass(stoker.NotFoundError, FileNotFoundError) and issubclass(stoker.NotFoundError, stoker.Error)
    assert issubclass(stoker.IoError, OSError) and issubclass(stoker.IoError, stoker.Error)
    with pytest.raises(FileNotFoundError, match="missing"):
        stoker.Loader(str(tmp_path / "missing"), batch_size=4)


@pytest.mark.parametrize("kwargs, name", [
    (dict(cache_limit=-5), "cache_limit"),
    (dict(cache_prefetch=-1), "cache_prefetch"),
    (dict(remote_timeout=0), "remote_timeout"),
    (dict(position_ids=True), "position_ids"),
    (dict(cu_seqlens=True), "cu_seqlens"),
])
def test_bad_loader_arguments_name_the_parameter(image_dataset, kwargs, name):
    path, _ = image_dataset
    with pytest.raises((ValueError, TypeError), match=name):
        stoker.Loader(path, batch_size=4, size=S, **kwargs)


def test_set_epoch_checks_its_argument(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=4, size=S, threads=1)
    with pytest.raises(ValueError, match="epoch"):
        loader.set_epoch(-1)
    with pytest.raises(TypeError, match="epoch"):
        loader.set_epoch("1")


def test_oversubscribed_threads_and_a_local_cache_dir_warn(image_dataset, tmp_path):
    path, _ = image_dataset
    with pytest.warns(RuntimeWarning, match="threads=4096"):
        stoker.Loader(path, batch_size=4, size=S, threads=4096).close()
    with pytest.warns(RuntimeWarning, match="cache_dir"):
        stoker.Loader(path, batch_size=4, size=S, threads=1, cache_dir=str(tmp_path / "c")).close()


def test_pack_tokens_needs_a_dtype(tmp_path):
    np.arange(1000, dtype=np.uint32).tofile(tmp_path / "t.bin")
    with pytest.raises(stoker.InvalidArgumentError, match="dtype"):
        stoker.pack_tokens(str(tmp_path / "t.bin"), str(tmp_path / "ds"), seq_len=8)
    stoker.pack_tokens(str(tmp_path / "t.bin"), str(tmp_path / "ds"), dtype="uint32", seq_len=8)
    b = next(iter(stoker.Loader(str(tmp_path / "ds"), batch_size=2, shuffle=False, numpy=True)))
    assert b["tokens"][0].tolist() == list(range(8))
