"""The traps of issue #18 on the Python side: argument errors that name the parameter,
silently accepted options, forks, the skip budget, warnings printed twice, stats that
disagreed, resuming with a new size, pinned memory and ranks with uneven batch counts."""

import logging
import os
import shutil
import time
import warnings

import pytest

import stoker

S = 16


def indices(loader):
    return [b["index"].tolist() for b in loader]


# --- 3: argument errors --------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(batch_size=2.5), TypeError, ["batch_size", "integer", "float"]),
    (dict(batch_size="8"), TypeError, ["batch_size", "str"]),
    (dict(batch_size=0), ValueError, ["batch_size", ">= 1"]),
    (dict(batch_size=4, slots=-1), ValueError, ["slots", ">= 1"]),
    (dict(batch_size=4, threads="2"), TypeError, ["threads"]),
    (dict(batch_size=4, seed=-1), ValueError, ["seed"]),
    (dict(batch_size=4, size=1.5), TypeError, ["size"]),
    (dict(batch_size=4, on_error=1), TypeError, ["on_error", "'skip'"]),
    (dict(batch_size=4, drop_last="yes"), TypeError, ["drop_last"]),
    (dict(batch_size=4, mean=0.5, pixel_format="f32_chw"), TypeError, ["mean", "3"]),
    (dict(batch_size=4, max_skipped=-1), ValueError, ["max_skipped"]),
])
def test_bad_arguments_name_the_parameter(image_dataset, kwargs, exc, words):
    path, _ = image_dataset
    with pytest.raises(exc) as e:
        stoker.Loader(path, **kwargs)
    msg = str(e.value)
    assert "incompatible function arguments" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_a_bad_rank_says_why_and_where_each_value_came_from(image_dataset, monkeypatch):
    path, _ = image_dataset
    with pytest.raises(ValueError) as e:
        stoker.Loader(path, batch_size=4, rank=3, world_size=2)
    msg = str(e.value)
    assert "rank=3 (from argument)" in msg and "world_size=2 (from argument)" in msg and "0..1" in msg
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError) as e:
        stoker.Loader(path, batch_size=4, rank=3)
    msg = str(e.value)
    assert "rank=3 (from argument)" in msg
    assert "world_size=2 (from the RANK / WORLD_SIZE environment variables)" in msg


# --- 4: options accepted silently ----------------------------------------------------

def test_normalisation_needs_float_pixels_and_the_0_to_1_scale(image_dataset):
    path, _ = image_dataset
    with pytest.raises(ValueError, match="uint8"):
        stoker.Loader(path, batch_size=4, mean=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="std"):
        stoker.Loader(path, batch_size=4, pixel_format="f32_chw", std=(0, 0.2, 0.2))
    with pytest.raises(ValueError, match="0..1 scale"):
        stoker.Loader(path, batch_size=4, pixel_format="f32_chw", mean=(123.7, 116.3, 103.5))
    with pytest.raises(ValueError, match="std"):
        stoker.Loader(path, batch_size=4, pixel_format="f32_chw", std=(58.4, 57.1, 57.4))
    # Right: float pixels, 0..1 scale.
    b = next(iter(stoker.Loader(path, batch_size=4, size=S, pixel_format="f32_chw",
                                mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))))
    assert b["image"].dtype.is_floating_point


def test_targets_on_an_image_dataset_is_an_error(image_dataset):
    path, _ = image_dataset
    with pytest.raises(ValueError, match="targets"):
        stoker.Loader(path, batch_size=4, targets=True)


# --- 2: fork ---------------------------------------------------------------------------

def test_a_loader_used_after_fork_raises_saying_what_to_do(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=4, size=S, threads=1)
    first = indices(loader)  # threads running in the parent
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened, never return into pytest
        code = 1
        try:
            os.close(r)
            try:
                next(iter(loader))
                msg = "no error"
            except stoker.UnavailableError as e:
                msg = "raised: " + str(e)
            try:
                len(loader)
            except stoker.UnavailableError:
                msg += " | len raised"
            loader.close()  # must not hang on the parent's threads
            del loader
            os.write(w, msg.encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    import select
    ready, _, _ = select.select([r], [], [], 60)
    if not ready:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung using the Loader")
    msg = os.read(r, 4096).decode()
    _, status = os.waitpid(pid, 0)
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, msg)
    assert msg.startswith("raised: "), msg
    assert "fork" in msg and "spawn" in msg and "len raised" in msg, msg
    # The parent's loader is untouched.
    assert indices(loader) == first


# --- 5: the skip budget ----------------------------------------------------------------

def broken_header_copy(src, dst):
    shutil.copytree(src, dst)
    shard = stoker.record_location(dst, 0)["shard"]
    with open(shard, "r+b") as f:
        f.seek(40)
        b = f.read(1)
        f.seek(40)
        f.write(bytes([b[0] ^ 0x10]))
    return shard


def test_skip_stops_past_its_budget_and_names_a_broken_shard_once(image_dataset, tmp_path, capfd, caplog):
    src, n = image_dataset
    path = str(tmp_path / "ds")
    shard = broken_header_copy(src, path)
    # Messages from the library's threads reach Python's logging through a queue.
    named = lambda: [r for r in caplog.records if "skipping every record of" in r.getMessage()]  # noqa: E731

    def settle():
        deadline = time.monotonic() + 5
        while not named() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # a second message, if there were one, would have come by now

    with caplog.at_level(logging.WARNING, logger="stoker"):
        loader = stoker.Loader(path, batch_size=4, size=S, shuffle=False, threads=1, on_error="skip", max_skipped=3)
        with pytest.raises(stoker.DataLossError) as e:
            for _ in loader:
                pass
        msg = str(e.value)
        assert "samples skipped" in msg and "max_skipped" in msg and os.path.basename(shard) in msg, msg
        settle()  # this loader's own message, before the next one's are counted
        del loader
        caplog.clear()
        # Without a limit the epoch goes on, and the shard is named once, not per record.
        loader = stoker.Loader(path, batch_size=4, size=S, shuffle=False, threads=1, on_error="skip",
                               max_skipped=float("inf"))
        got = sum(len(b) for b in indices(loader))
        settle()
    assert 0 < got < n and loader.stats()["skipped"] == n - got
    assert len(named()) == 1, [r.getMessage() for r in caplog.records]


# --- 7: one warning ----------------------------------------------------------------------

def test_holding_every_slot_warns_once_and_prints_nothing(image_dataset, capfd):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=4, size=S, threads=1, slots=2)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = list(loader)
    held = [w for w in caught if issubclass(w.category, stoker.HeldBatchesWarning)]
    assert len(held) == 1 and len(kept) == len(loader)
    assert "stoker: warning" not in capfd.readouterr().err


# --- 6: stats ------------------------------------------------------------------------------

def test_stats_is_a_dict_and_summary_shows_its_figures(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=4, size=S, threads=1)
    for _ in loader:
        pass
    s = loader.stats()
    assert isinstance(s, dict) and isinstance(s["io"], dict)
    assert "samples/s" in loader.summary()
    wait = f"consumer waited {100 * s['consumer_wait_frac']:.0f}%"
    assert wait in s["summary"], (wait, s["summary"])
    if "consumer waited" in s["evidence"]:
        assert wait in s["evidence"], (wait, s["evidence"])


# --- 9: resume after a resize ----------------------------------------------------------------

def test_resume_with_a_new_size_continues_the_same_samples(image_dataset):
    path, _ = image_dataset
    full = indices(stoker.Loader(path, batch_size=8, size=S, seed=5, threads=1))
    a = stoker.Loader(path, batch_size=8, size=S, seed=5, threads=1)
    it = iter(a)
    head = [next(it)["index"].tolist() for _ in range(3)]
    state = a.state_dict()
    b = stoker.Loader(path, batch_size=8, size=S + 8, seed=5, threads=1, transform="eval")
    b.load_state_dict(state)
    tail = []
    for batch in b:
        assert batch["image"].shape[1] == S + 8
        tail.append(batch["index"].tolist())
    assert head + tail == full


# --- 8: pinned memory -----------------------------------------------------------------------

def test_pin_memory(image_dataset):
    import torch
    path, _ = image_dataset
    if not (stoker.has_cuda and torch.cuda.is_available()):
        with pytest.raises(stoker.UnavailableError, match="pin_memory"):
            stoker.Loader(path, batch_size=4, size=S, pin_memory=True)
        return
    loader = stoker.Loader(path, batch_size=4, size=S, pin_memory=True)
    b = next(iter(loader))
    assert b["image"].is_pinned()
    assert loader.stats()["slot_memory"] == "pinned"
    assert not next(iter(stoker.Loader(path, batch_size=4, size=S)))["image"].is_pinned()


# --- 1: ranks -----------------------------------------------------------------------------

def test_every_rank_gets_the_same_batches_without_drop_last(image_dataset):
    path, n = image_dataset  # 60 samples; world 7, batch 7: 49 + 11 -> 2 each in the last step
    per_rank = [indices(stoker.Loader(path, batch_size=7, size=S, seed=3, threads=1, rank=r, world_size=7))
                for r in range(7)]
    assert {len(b) for b in per_rank} == {2}
    assert {len(b[-1]) for b in per_rank} == {2}
    seen = [i for b in per_rank for batch in b for i in batch]
    assert set(seen) == set(range(n)) and len(seen) == n + 3  # 3 padding samples repeat
