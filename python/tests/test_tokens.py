"""Token datasets: rows of the stream, next-token targets, dtypes."""

import numpy as np
import pytest
import torch

import stoker
from conftest import SEQ_LEN


def test_tokens_and_targets_are_rows_of_the_stream(token_dataset):
    path, stream, rows = token_dataset
    loader = stoker.Loader(path, batch_size=8, targets=True, seed=3, threads=2)
    assert loader.epoch_samples == rows
    seen = []
    for b in loader:
        assert set(b) == {"tokens", "targets", "index"}
        assert b["tokens"].dtype == torch.int64 and b["tokens"].shape[1:] == (SEQ_LEN,)
        for j, r in enumerate(b["index"].tolist()):
            want = stream[r * SEQ_LEN: r * SEQ_LEN + SEQ_LEN + 1].astype(np.int64)
            np.testing.assert_array_equal(b["tokens"][j].numpy(), want[:-1])
            np.testing.assert_array_equal(b["targets"][j].numpy(), want[1:])
        seen += b["index"].tolist()
    assert sorted(seen) == list(range(rows))


def test_numpy_delivers_the_stored_dtype(token_dataset):
    path, stream, _ = token_dataset
    b = next(iter(stoker.Loader(path, batch_size=4, shuffle=False, numpy=True)))
    assert b["tokens"].dtype == np.uint16
    np.testing.assert_array_equal(b["tokens"][0], stream[:SEQ_LEN])
    assert "targets" not in b


def test_token_dtype_choice(token_dataset):
    path, stream, _ = token_dataset
    b = next(iter(stoker.Loader(path, batch_size=4, shuffle=False, token_dtype="int32", as_tuple=True,
                                targets=True)))
    tokens, targets = b
    assert tokens.dtype == torch.int32 and targets.dtype == torch.int32
    assert tokens[1].tolist() == stream[SEQ_LEN: 2 * SEQ_LEN].tolist()
    with pytest.raises(ValueError, match="uint16"):
        stoker.Loader(path, batch_size=4, token_dtype="uint16")


def test_token_resume(token_dataset):
    path, _, _ = token_dataset
    opts = dict(batch_size=8, seed=5, threads=2)
    full = [b["index"].clone() for b in stoker.Loader(path, **opts)]
    a = stoker.Loader(path, **opts)
    it = iter(a)
    head = [next(it)["index"].clone() for _ in range(5)]
    b = stoker.Loader(path, **opts)
    b.load_state_dict(a.state_dict())
    tail = [x["index"].clone() for x in b]
    assert all(torch.equal(x, y) for x, y in zip(head + tail, full)) and len(head) + len(tail) == len(full)
