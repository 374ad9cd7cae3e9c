"""Batches from Python: layout, values against a direct decode, labels, determinism."""

import math
import time
import warnings

import numpy as np
import pytest
import torch

import stoker
from conftest import CLASS_NAMES, COLOURS, same

S = 32  # output side for the tests


def epoch_batches(loader, clone=True):
    return [{k: v.clone() if clone and hasattr(v, "clone") else v for k, v in b.items()} for b in loader]


def test_batch_layout_dtypes_and_epoch_coverage(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, seed=3, threads=2)
    assert len(loader) == math.ceil(n / 8)
    assert loader.epoch_samples == n
    seen = []
    batches = 0
    for b in loader:
        assert set(b) == {"image", "label", "index", "__key__"}
        img, label, index = b["image"], b["label"], b["index"]
        assert isinstance(img, torch.Tensor) and img.dtype == torch.uint8
        assert img.shape[1:] == (S, S, 3) and img.is_contiguous()
        assert label.dtype == torch.int64 and index.dtype == torch.int64
        assert img.shape[0] == label.shape[0] == index.shape[0]
        assert img.shape[0] == (8 if batches < len(loader) - 1 else n - 8 * (len(loader) - 1))
        seen += index.tolist()
        batches += 1
    assert batches == len(loader)
    assert sorted(seen) == list(range(n))          # every record once
    assert seen != list(range(n))                  # and shuffled


def test_drop_last_gives_full_batches(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=16, size=S, drop_last=True)
    sizes = [b["index"].shape[0] for b in loader]
    assert sizes == [16] * (n // 16) and len(loader) == n // 16


@pytest.mark.parametrize("transform", ["train", "eval"])
@pytest.mark.parametrize("epoch", [0, 2])
def test_samples_equal_a_direct_decode_of_their_record(image_dataset, transform, epoch):
    """Each sample is the C++ decoder's output for its record's bytes and per-sample seed."""
    path, _ = image_dataset
    seed = 11
    loader = stoker.Loader(path, batch_size=8, transform=transform, size=S, seed=seed, threads=2)
    loader.set_epoch(epoch)
    t = stoker.transforms.to_image_transform(transform, S)
    checked = 0
    for b in loader:
        for j, idx in enumerate(b["index"].tolist()):
            rec = stoker.read_record(path, idx)
            want = stoker.decode_image(rec["image"], t, stoker.sample_seed(seed, epoch, idx))
            np.testing.assert_array_equal(b["image"][j].numpy(), want)
            assert b["label"][j].item() == rec["label"]
            checked += 1
        if checked >= 24:
            break
    assert checked >= 24


def test_labels_name_the_class_the_pixels_show(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=16, transform="eval", size=S, threads=2)
    assert loader.class_names == CLASS_NAMES
    seen = 0
    for b in loader:
        mean_rgb = b["image"].double().mean(dim=(1, 2))  # [B, 3]
        for label, rgb in zip(b["label"].tolist(), mean_rgb):
            dominant = int(rgb.argmax())
            assert dominant == int(np.argmax(COLOURS[label])), (label, rgb)
            seen += 1
    assert seen == n


def test_same_seed_same_batches_whatever_the_thread_count(image_dataset):
    path, _ = image_dataset
    a = epoch_batches(stoker.Loader(path, batch_size=8, size=S, seed=5, threads=1))
    b = epoch_batches(stoker.Loader(path, batch_size=8, size=S, seed=5, threads=3, slots=2))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for k in x:
            assert same(x[k], y[k]), k
    c = epoch_batches(stoker.Loader(path, batch_size=8, size=S, seed=6, threads=2))
    assert not all(torch.equal(x["index"], y["index"]) for x, y in zip(a, c))


def test_set_epoch_changes_order_and_iteration_restarts_the_epoch(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, seed=5, threads=2)
    e0 = [b["index"].clone() for b in loader]
    e0_again = [b["index"].clone() for b in loader]  # no set_epoch: the same epoch again
    assert all(torch.equal(x, y) for x, y in zip(e0, e0_again))
    loader.set_epoch(1)
    e1 = [b["index"].clone() for b in loader]
    assert torch.cat(e1).sort().values.tolist() == torch.cat(e0).sort().values.tolist()
    assert not all(torch.equal(x, y) for x, y in zip(e0, e1))
    assert loader.epoch == 1


def test_abandoned_iteration_restarts_from_the_beginning(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, seed=2, threads=2)
    first = [b["index"].clone() for b in loader]
    it = iter(loader)
    next(it), next(it)
    again = [b["index"].clone() for b in loader]
    assert all(torch.equal(x, y) for x, y in zip(first, again)) and len(first) == len(again)


@pytest.mark.filterwarnings("ignore::stoker.HeldBatchesWarning")
def test_numpy_output_equals_torch_output(image_dataset):
    path, _ = image_dataset
    t = epoch_batches(stoker.Loader(path, batch_size=8, size=S, seed=1, threads=2))
    n = [dict(b) for b in stoker.Loader(path, batch_size=8, size=S, seed=1, threads=2, numpy=True)]
    assert len(t) == len(n)
    for x, y in zip(t, n):
        assert isinstance(y["image"], np.ndarray) and y["image"].dtype == np.uint8
        assert y["label"].dtype == np.int64
        for k in x:
            if k == "__key__":
                assert x[k] == y[k]
            else:
                np.testing.assert_array_equal(x[k].numpy(), y[k])


def test_as_tuple_yields_image_label(image_dataset):
    path, _ = image_dataset
    for img, label in stoker.Loader(path, batch_size=8, size=S, as_tuple=True, threads=2):
        assert img.shape[1:] == (S, S, 3) and label.dtype == torch.int64
        break


def test_transform_objects_equal_their_string_forms(image_dataset):
    path, _ = image_dataset
    T = stoker.transforms
    pairs = [
        ("train", [T.RandomResizedCrop(S), T.RandomHorizontalFlip()]),
        ("eval", T.Compose([T.Resize(round(S / 0.875)), T.CenterCrop(S)])),
    ]
    for name, objs in pairs:
        a = epoch_batches(stoker.Loader(path, batch_size=16, transform=name, size=S, seed=4, threads=2))
        b = epoch_batches(stoker.Loader(path, batch_size=16, transform=objs, seed=4, threads=2))
        for x, y in zip(a, b):
            assert torch.equal(x["image"], y["image"])
    with pytest.raises(ValueError, match="unsupported transform"):
        stoker.Loader(path, batch_size=4, transform=[T.CenterCrop(S)])


def test_no_flip_no_crop_train_transform_is_eval_like_and_flip_changes_pixels(image_dataset):
    path, _ = image_dataset
    T = stoker.transforms
    flip = epoch_batches(stoker.Loader(path, batch_size=60, transform=T.train(S, scale=(1, 1), ratio=(1, 1),
                                                                               flip_prob=1.0), seed=0))
    noflip = epoch_batches(stoker.Loader(path, batch_size=60, transform=T.train(S, scale=(1, 1), ratio=(1, 1),
                                                                                 flip_prob=0.0), seed=0))
    # Same crops (the flip draw comes last), mirrored columns.
    assert torch.equal(flip[0]["image"], noflip[0]["image"].flip(2))


def test_transform_none_delivers_images_as_stored_bytes(image_dataset):
    path, n = image_dataset
    batches = epoch_batches(stoker.Loader(path, batch_size=32, transform=None, shuffle=False))
    assert set(batches[0]) == {"image", "label", "index", "__key__"}
    assert batches[0]["image"][:3] == [stoker.read_record(path, i)["image"] for i in range(3)]
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(n))
    labels = torch.cat([b["label"] for b in batches]).tolist()
    assert labels == [stoker.read_record(path, i)["label"] for i in range(n)]


def test_stats_are_a_dict_of_stage_figures(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, threads=2, slots=4)
    for _ in loader:
        pass
    s = loader.stats()
    assert s["samples"] == n and s["batches"] == len(loader)
    assert s["slots"] == 4
    # The default ring: small batches get more slots, never more than 64.
    default = stoker.Loader(path, batch_size=8, size=S, threads=2)
    next(iter(default))
    assert 4 < default.stats()["slots"] <= 64
    for key in ("io", "decode", "consumer_wait_s", "wall_s"):
        assert key in s
    assert s["decode"]["items"] == n
    assert "samples/s" in loader.summary()


def test_threads_auto_is_the_default_and_reports_its_knobs(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S)
    seen = sum(len(b[0]) if isinstance(b, tuple) else len(b["label"]) for b in loader)
    assert seen == n
    t = loader.stats()["tune"]
    assert t["enabled"] is True
    assert 1 <= t["threads"] <= t["threads_max"]
    assert t["slots"] <= t["slots_max"]
    assert isinstance(t["history"], list) and t["changes"] == len(t["history"])
    assert loader.stats()["decode"]["threads"] == t["threads"]
    # An explicit count is kept and not tuned; None is the CPU plan's, untuned too.
    for threads in (2, None):
        fixed = stoker.Loader(path, batch_size=8, size=S, threads=threads, reserve_cores=0, memory_limit=1 << 30)
        for _ in fixed:
            pass
        assert fixed.stats()["tune"]["enabled"] is False
        if threads == 2:
            assert fixed.stats()["decode"]["threads"] == 2
    with pytest.raises(ValueError, match="reserve_cores"):
        stoker.Loader(path, batch_size=8, size=S, reserve_cores=-1)
    with pytest.raises(TypeError, match="threads must be \"auto\""):
        stoker.Loader(path, batch_size=8, size=S, threads="fast")


def test_cuda_device_is_refused_clearly_without_cuda(image_dataset):
    path, _ = image_dataset
    if stoker.has_cuda and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(stoker.UnavailableError, match="cuda"):
        stoker.Loader(path, batch_size=4, device="cuda:0")


def test_closed_loader_raises(image_dataset):
    path, _ = image_dataset
    with stoker.Loader(path, batch_size=4, size=S) as loader:
        next(iter(loader))
    with pytest.raises(stoker.InvalidArgumentError, match="closed"):
        len(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.close()  # idempotent


# --- one consumer at a time ------------------------------------------------------------

def test_two_iterators_never_split_an_epoch(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, threads=1)
    first = iter(loader)
    next(first)
    second = iter(loader)  # starts the epoch over
    assert sum(len(b["index"]) for b in second) == n
    with pytest.raises(RuntimeError, match="superseded"):
        next(first)


def _slow_loader(path):
    # 5 KB/s of reads (after a first burst): a batch takes seconds, so another thread acts meanwhile.
    return stoker.Loader(path, batch_size=8, size=S, threads=1, shuffle=False, io_limit_mbps=0.005, direct=False)


def test_next_from_a_second_thread_is_refused(image_dataset):
    import threading
    path, _ = image_dataset
    loader = _slow_loader(path)
    it = iter(loader)
    next(it)  # the throttle's first burst: the next batch is the slow one
    got = []
    t = threading.Thread(target=lambda: got.append(next(it)))
    t.start()
    time.sleep(0.3)
    with pytest.raises(stoker.InvalidArgumentError, match="another thread"):
        next(it)
    with pytest.raises(stoker.InvalidArgumentError, match="another thread"):
        loader.set_epoch(1)
    t.join()
    assert len(got) == 1
    loader.close()


def test_close_from_another_thread_makes_the_loop_raise(image_dataset):
    import threading
    path, _ = image_dataset
    for trial in range(4):
        loader = _slow_loader(path)
        seen = []
        timer = threading.Timer(0.2 + 0.1 * trial, loader.close)
        timer.start()
        with pytest.raises(stoker.Error, match="closed"):
            for b in loader:
                seen.append(len(b["index"]))
        timer.join()


def test_torch_dataloader_gets_a_clear_error(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=8, size=S, threads=1)
    with pytest.raises(TypeError, match="iterate it directly"):
        next(iter(torch.utils.data.DataLoader(loader, batch_size=None)))


def test_keeping_every_batch_index_and_label_pins_no_slot(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=4, size=S, threads=1, slots=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", stoker.HeldBatchesWarning)
        kept = [(b["index"], b["label"]) for b in loader]
    assert loader.stats()["slots"] == 2
    assert sorted(torch.cat([i for i, _ in kept]).tolist()) == list(range(n))
