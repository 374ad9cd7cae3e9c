"""state_dict / load_state_dict: resuming mid-epoch continues with the next batch."""

import json

import pytest
import torch

import stoker
from conftest import clone_batches as run, same

S = 16


@pytest.mark.parametrize("k", [0, 1, 3, 7])
def test_resume_after_k_batches_yields_the_rest_of_the_uninterrupted_run(image_dataset, k):
    path, _ = image_dataset
    opts = dict(batch_size=8, size=S, seed=21, threads=2)
    full = run(stoker.Loader(path, **opts))
    first = stoker.Loader(path, **opts)
    head = run(first, limit=k) if k else []
    state = json.loads(json.dumps(first.state_dict()))  # survives a checkpoint file
    second = stoker.Loader(path, **opts)
    second.load_state_dict(state)
    assert len(second) == len(full) - k
    tail = run(second)
    assert len(head) + len(tail) == len(full)
    for x, y in zip(head + tail, full):
        for key in y:
            assert same(x[key], y[key]), key


def test_resume_in_a_later_epoch(image_dataset):
    path, _ = image_dataset
    opts = dict(batch_size=8, size=S, seed=4, threads=2)
    ref = stoker.Loader(path, **opts)
    ref.set_epoch(3)
    full = run(ref)
    a = stoker.Loader(path, **opts)
    a.set_epoch(3)
    run(a, limit=2)
    b = stoker.Loader(path, **opts)
    b.load_state_dict(a.state_dict())
    assert b.epoch == 3
    tail = run(b)
    assert all(torch.equal(x["image"], y["image"]) for x, y in zip(tail, full[2:]))


def test_resume_on_a_different_batch_size_continues_the_sample_sequence(image_dataset):
    path, n = image_dataset
    full = torch.cat([b["index"] for b in run(stoker.Loader(path, batch_size=4, size=S, seed=8))])
    a = stoker.Loader(path, batch_size=4, size=S, seed=8)
    head = torch.cat([b["index"] for b in run(a, limit=3)])
    b = stoker.Loader(path, batch_size=10, size=S, seed=8)
    b.load_state_dict(a.state_dict())
    tail = torch.cat([x["index"] for x in run(b)])
    assert torch.equal(torch.cat([head, tail]), full) and len(full) == n


def test_state_dict_mid_iteration_then_continue(image_dataset):
    path, _ = image_dataset
    opts = dict(batch_size=8, size=S, seed=13, threads=2)
    a = stoker.Loader(path, **opts)
    seen = []
    states = []
    for b in a:
        seen.append(b["index"].clone())
        states.append(a.state_dict())
    for i in (0, 2, len(seen) - 1):
        c = stoker.Loader(path, **opts)
        c.load_state_dict(states[i])
        rest = [b["index"].clone() for b in c]
        assert len(rest) == len(seen) - i - 1
        assert all(torch.equal(x, y) for x, y in zip(rest, seen[i + 1:]))


def test_a_state_from_other_options_is_refused(image_dataset):
    path, _ = image_dataset
    a = stoker.Loader(path, batch_size=8, size=S, seed=1)
    run(a, limit=1)
    state = a.state_dict()
    with pytest.raises(ValueError, match="seed"):
        stoker.Loader(path, batch_size=8, size=S, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="drop_last"):
        stoker.Loader(path, batch_size=8, size=S, seed=1, drop_last=True).load_state_dict(state)
    bad = dict(state, order_state=state["order_state"].replace("consumed=8", "consumed=9"))
    with pytest.raises(stoker.DataLossError):
        stoker.Loader(path, batch_size=8, size=S, seed=1).load_state_dict(bad)
    with pytest.raises(ValueError, match="not a stoker Loader state"):
        stoker.Loader(path, batch_size=8, size=S, seed=1).load_state_dict({"foo": 1})
