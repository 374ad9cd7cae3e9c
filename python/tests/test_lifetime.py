"""The lifetime contract: a tensor keeps its slot until it is freed; holding more
batches than the ring has slots grows the ring (one warning) instead of deadlocking or
overwriting live memory."""

import gc
import warnings

import pytest
import torch

import stoker

S = 16


def test_tensors_stay_valid_while_the_loader_advances(big_image_dataset):
    path, n = big_image_dataset
    # slots=3: ours, the previous batch the for-loop variable holds, one in flight.
    loader = stoker.Loader(path, batch_size=6, size=S, seed=1, threads=2, slots=3)
    it = iter(loader)
    first = next(it)
    kept_img, kept_idx = first["image"], first["index"]
    clone_img, clone_idx = kept_img.clone(), kept_idx.clone()
    del first
    with warnings.catch_warnings():
        warnings.simplefilter("error", stoker.HeldBatchesWarning)
        consumed = sum(1 for _ in it)  # many times the ring: slots other than ours recycle
    assert loader.stats()["slots"] == 3
    assert consumed == len(loader) - 1 > 10
    assert torch.equal(kept_img, clone_img)
    assert torch.equal(kept_idx, clone_idx)


def test_a_normal_loop_recycles_the_ring_without_growing(big_image_dataset):
    path, _ = big_image_dataset
    slots = 3
    loader = stoker.Loader(path, batch_size=6, size=S, threads=2, slots=slots)
    ptrs = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error", stoker.HeldBatchesWarning)
        for b in loader:
            ptrs.add(b["image"].data_ptr())
            del b
    # Zero-copy: every batch's image lies in one of the ring's slots, reused in turn.
    assert 1 <= len(ptrs) <= slots
    assert loader.stats()["slots"] == slots


def test_list_of_an_epoch_longer_than_the_ring_works_and_warns_once(big_image_dataset):
    path, n = big_image_dataset
    slots = 2
    loader = stoker.Loader(path, batch_size=6, size=S, seed=9, threads=2, slots=slots)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = list(loader)
    held = [w for w in caught if issubclass(w.category, stoker.HeldBatchesWarning)]
    assert len(held) == 1, [str(w.message) for w in caught]
    assert "holds all 2 batch slots" in str(held[0].message)
    assert len(batches) == len(loader) == n // 6 and len(batches) >= 10 * slots
    # Distinct memory for every held batch, none overwritten: compare with a run that
    # copies each batch as it comes.
    assert len({b["image"].data_ptr() for b in batches}) == len(batches)
    ref = [{k: v.clone() if hasattr(v, "clone") else v for k, v in b.items()} for b in
           stoker.Loader(path, batch_size=6, size=S, seed=9, threads=2, slots=slots)]
    for x, y in zip(batches, ref):
        assert torch.equal(x["image"], y["image"]) and torch.equal(x["index"], y["index"])
    assert loader.stats()["slots"] > slots
    # A second epoch holding everything again does not warn again.
    with warnings.catch_warnings(record=True) as caught2:
        warnings.simplefilter("always")
        more = list(loader)
    assert not [w for w in caught2 if issubclass(w.category, stoker.HeldBatchesWarning)]
    assert len(more) == len(batches)


def test_tensors_outlive_the_loader(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, threads=2)
    b = next(iter(loader))
    img, clone = b["image"], b["image"].clone()
    arr = next(iter(stoker.Loader(path, batch_size=8, size=S, threads=2, numpy=True)))["image"]
    arr_clone = arr.copy()
    del loader, b
    gc.collect()
    assert torch.equal(img, clone)
    assert (arr == arr_clone).all()


def test_numpy_arrays_keep_their_slot(big_image_dataset):
    path, _ = big_image_dataset
    loader = stoker.Loader(path, batch_size=6, size=S, threads=2, slots=3, numpy=True)
    it = iter(loader)
    kept = next(it)["image"]
    assert kept.base is not None  # a view onto the slot, not a copy
    clone = kept.copy()
    for _ in it:
        pass
    assert (kept == clone).all()


def test_views_of_a_batch_keep_it_alive(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, threads=2, slots=1)
    it = iter(loader)
    view = next(it)["image"][2:4, :, :, 1]  # the batch dict and base tensor are gone
    clone = view.clone()
    with pytest.warns(stoker.HeldBatchesWarning):
        for _ in it:
            pass
    assert torch.equal(view, clone)
