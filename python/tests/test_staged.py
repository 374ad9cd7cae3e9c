"""The staged path: device="cuda" on a GPU, and everywhere the Stager's host backend (the
same ring, events and release protocol, with memcpy for the copies); see conftest's
`staged` fixture."""

import os
import shutil
import warnings

import pytest
import torch

import stoker
from conftest import clone_batches as run, same as same_entry, staged_backend

S = 16


def same(a, b):
    return len(a) == len(b) and all(same_entry(x[k], y[k]) for x, y in zip(a, b) for k in y)


def test_staged_batches_equal_direct_batches(image_dataset, staged):
    path, _ = image_dataset
    opts = dict(batch_size=8, size=S, seed=3, threads=2)
    direct = run(stoker.Loader(path, **opts))
    staged_loader = stoker.Loader(path, **staged, **opts)
    batches = run(staged_loader)
    assert same(batches, direct)
    want = staged_backend(staged)
    assert {b["image"].device.type for b in batches} == {"cpu" if want == "host" else "cuda"}
    st = staged_loader.stats()["stage"]
    assert st["backend"] == want and st["batches"] == len(direct)


def test_staged_set_epoch_and_restart(image_dataset, staged):
    path, _ = image_dataset
    opts = dict(batch_size=8, size=S, seed=3, threads=2)
    ref = stoker.Loader(path, **opts)
    ref.set_epoch(2)
    want = run(ref)
    loader = stoker.Loader(path, **staged, **opts)
    run(loader, limit=2)
    loader.set_epoch(2)
    assert loader.epoch == 2 and len(loader) == len(want)
    assert same(run(loader), want)
    assert same(run(loader), want)  # a new iteration restarts the epoch


@pytest.mark.parametrize("k", [0, 3])
def test_staged_resume_continues_with_the_next_batch(image_dataset, k, staged):
    path, _ = image_dataset
    opts = dict(batch_size=8, size=S, seed=17, threads=2)
    full = run(stoker.Loader(path, **opts))
    a = stoker.Loader(path, **staged, **opts)
    head = run(a, limit=k) if k else []
    state = a.state_dict()
    b = stoker.Loader(path, **staged, **opts)
    b.load_state_dict(state)
    assert len(b) == len(full) - k
    assert same(head + run(b), full)
    # The state is the same as the unstaged loader's after k batches.
    c = stoker.Loader(path, **opts)
    if k:
        run(c, limit=k)
    assert c.state_dict()["order_state"] == state["order_state"]


def test_staged_list_copies_when_the_device_ring_is_held_and_warns_once(big_image_dataset, staged):
    path, _ = big_image_dataset
    opts = dict(batch_size=6, size=S, seed=5, threads=2)
    ref = run(stoker.Loader(path, **opts))
    loader = stoker.Loader(path, **staged, device_slots=3, **opts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        held = list(loader)
    warned = [w for w in caught if issubclass(w.category, stoker.HeldBatchesWarning)]
    assert len(warned) == 1 and "device batch slots" in str(warned[0].message)
    assert same(held, ref)


def test_staged_tensors_stay_valid_while_the_loader_advances(big_image_dataset, staged):
    path, _ = big_image_dataset
    # device_slots=4: ours, the previous batch the loop variable holds, the new one, one free.
    loader = stoker.Loader(path, batch_size=6, size=S, threads=2, **staged, device_slots=4)
    it = iter(loader)
    kept = next(it)["image"]
    clone = kept.clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error", stoker.HeldBatchesWarning)
        n = sum(1 for _ in it)
    assert n == len(loader) - 1 > 10
    assert torch.equal(kept, clone)


def test_staged_errors_name_the_record(image_dataset, tmp_path, staged):
    path = str(tmp_path / "ds")
    shutil.copytree(image_dataset[0], path)
    loc = stoker.record_location(path, 5)
    with open(loc["shard"], "r+b") as f:
        f.seek(loc["offset"] + 3)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(stoker.DataLossError, match=f"record {loc['record']}"):
        for _ in stoker.Loader(path, batch_size=4, size=S, shuffle=False, **staged):
            pass


def test_staged_numpy_is_refused(image_dataset):
    with pytest.raises(stoker.InvalidArgumentError, match="numpy"):
        stoker.Loader(image_dataset[0], batch_size=4, numpy=True, _stage="host")
