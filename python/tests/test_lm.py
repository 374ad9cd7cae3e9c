"""Document outputs of token data: pack with eos=, then position_ids, loss_mask, doc_ids
and cu_seqlens against a reference from the raw stream."""

import numpy as np
import pytest
import torch

import stoker

EOS = 50256
N = 32


@pytest.fixture(scope="module")
def doc_dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    rng = np.random.default_rng(5)
    parts = []
    while sum(len(p) for p in parts) < 60000:
        n = int(rng.choice([1, 2, N, N + 1, 2000, int(rng.integers(1, 200))]))
        doc = rng.integers(0, 50000, size=n).astype(np.uint16)
        doc[-1] = EOS
        parts.append(doc)
    stream = np.concatenate(parts)
    stream.tofile(d / "train.bin")
    stoker.pack_tokens(str(d / "train.bin"), str(d / "ds"), dtype="uint16", seq_len=N, rows_per_record=5, zstd=3,
                       eos=EOS)
    return str(d / "ds"), stream


_POS = {}


def positions(stream):
    """Per stream token: its position in its document (0 after each EOS), vectorised."""
    key = id(stream)
    if key not in _POS:
        starts = np.zeros(len(stream), dtype=bool)
        starts[0] = True
        starts[1:] = stream[:-1] == EOS
        last_start = np.maximum.accumulate(np.where(starts, np.arange(len(stream)), 0))
        _POS[key] = (np.arange(len(stream)) - last_start, stream)
    return _POS[key][0]


def reference(stream, r):
    a = r * N
    pos = positions(stream)
    inp = stream[a: a + N]
    starts = [i for i in range(1, N) if stream[a + i - 1] == EOS]
    return pos[a: a + N], inp != EOS, np.cumsum([0] + [1 if i in starts else 0 for i in range(1, N)]), starts


def test_document_outputs_match_the_stream(doc_dataset):
    path, stream = doc_dataset
    loader = stoker.Loader(path, batch_size=6, seed=1, threads=2, position_ids=True, loss_mask=True,
                           doc_ids=True, cu_seqlens=True)
    checked = 0
    for b in loader:
        assert b["position_ids"].dtype == torch.int32 and b["position_ids"].shape == (len(b["index"]), N)
        assert b["loss_mask"].dtype == torch.uint8
        assert b["cu_seqlens"].dtype == torch.int32
        cu = [0]
        for j, r in enumerate(b["index"].tolist()):
            pos, mask, ids, starts = reference(stream, r)
            np.testing.assert_array_equal(b["position_ids"][j].numpy(), pos)
            np.testing.assert_array_equal(b["loss_mask"][j].numpy(), mask)
            np.testing.assert_array_equal(b["doc_ids"][j].numpy(), ids)
            cu += [j * N + s for s in starts] + [(j + 1) * N]
        assert b["cu_seqlens"].tolist() == cu
        assert b["cu_seqlens.offsets"][-1].item() == len(cu)
        checked += 1
        if checked == 12:
            break


def test_position_ids_from_the_row_start(doc_dataset):
    path, stream = doc_dataset
    b = next(iter(stoker.Loader(path, batch_size=64, shuffle=False, position_ids="row")))
    for j, r in enumerate(b["index"].tolist()):
        pos, _, _, _ = reference(stream, r)
        np.testing.assert_array_equal(b["position_ids"][j].numpy(), np.minimum(pos, np.arange(N)))
    assert b["position_ids"].max().item() < N
    with pytest.raises(ValueError, match="position_ids"):
        stoker.Loader(path, batch_size=4, position_ids="rows")


def test_position_ids_need_boundaries(tmp_path):
    np.arange(3000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    stoker.pack_tokens(str(tmp_path / "t.bin"), str(tmp_path / "ds"), dtype="uint16", seq_len=16)
    with pytest.raises(stoker.InvalidArgumentError, match="--eos"):
        stoker.Loader(str(tmp_path / "ds"), batch_size=4, position_ids=True)


def test_mixture_with_position_ids(doc_dataset, tmp_path):
    path_a, stream_a = doc_dataset
    rng = np.random.default_rng(9)
    stream_b = rng.integers(0, 50000, size=20000).astype(np.uint16)
    stream_b[rng.integers(0, 20000, size=300)] = EOS
    stream_b.tofile(tmp_path / "b.bin")
    stoker.pack_tokens(str(tmp_path / "b.bin"), str(tmp_path / "b"), dtype="uint16", seq_len=N, rows_per_record=7,
                       eos=EOS)
    streams = [stream_a, stream_b]
    opts = dict(batch_size=8, seed=2, threads=1, weights=[3, 1], position_ids=True)
    full = stoker.Loader([path_a, str(tmp_path / "b")], **opts)
    seq, counts = [], [0, 0]
    for b in full:
        for j, (s, r) in enumerate(zip(b["source"].tolist(), b["index"].tolist())):
            pos, _, _, _ = reference(streams[s], r)
            np.testing.assert_array_equal(b["position_ids"][j].numpy(), pos)
            counts[s] += 1
            seq.append((s, r))
    assert abs(counts[0] / sum(counts) - 0.75) < 0.03
    # Two ranks stop after 20 steps; three resume from the state and finish the epoch.
    seen = []
    for rank in range(2):
        lo = stoker.Loader([path_a, str(tmp_path / "b")], rank=rank, world_size=2, **opts)
        it = iter(lo)
        for _ in range(20):
            b = next(it)
            seen += list(zip(b["source"].tolist(), b["index"].tolist()))
        state = lo.state_dict()
    for rank in range(3):
        lo = stoker.Loader([path_a, str(tmp_path / "b")], rank=rank, world_size=3, **opts)
        lo.load_state_dict(state)
        for b in lo:
            seen += list(zip(b["source"].tolist(), b["index"].tolist()))
    # Without drop_last the final step is padded so every rank gets as many batches
    # (DistributedSampler's rule): fewer than world_size samples repeat, the epoch's first.
    pad = len(seen) - len(seq)
    assert 0 <= pad < 3
    assert sorted(seen) == sorted(seq + seq[:pad])


def test_packed_samples_deliver_every_token_once_with_its_mask_and_resume(tmp_path):
    """Fine-tuning samples of varying length written by stoker.Writer, packed into rows:
    every token of every sample comes once per epoch, targets and loss_mask follow the
    stored mask, and a resumed loader delivers the rest exactly."""
    rng = np.random.default_rng(3)
    lengths = np.clip(rng.lognormal(3.0, 0.7, size=300).astype(int), 1, 64)
    with stoker.Writer(str(tmp_path / "sft"), fields={"tokens": ("vararray", "int32", ()),
                                                    "loss_mask": ("vararray", "uint8", ())}) as w:
        for i, n in enumerate(lengths):
            k = np.arange(n)
            w.write({"tokens": (i * 100 + k).astype(np.int32), "loss_mask": (k >= n // 2).astype(np.uint8)})

    def make():
        return stoker.Loader(str(tmp_path / "sft"), batch_size=4, seq_len=64, seed=3, targets=True,
                             loss_mask=True, position_ids=True, cu_seqlens=True, pad_id=-1)

    loader = make()
    seen = np.zeros((len(lengths), 64), dtype=int)
    batches = []
    for b in loader:
        assert b["tokens"].shape == (len(b["index"]), 64) and b["tokens"].dtype == torch.int64
        batches.append(b["index"].clone())
        tok, tgt, mask, pos = b["tokens"].numpy(), b["targets"].numpy(), b["loss_mask"].numpy(), b["position_ids"].numpy()
        real = tok >= 0
        s, k = tok[real] // 100, tok[real] % 100
        np.add.at(seen, (s, k), 1)
        assert (pos[real] == k).all()
        last = k + 1 == lengths[s]
        assert (tgt[real][~last] == tok[real][~last] + 1).all() and (tgt[real][last] == -1).all()
        assert (mask[real] == ((k + 1 >= lengths[s] // 2) & ~last)).all()
        assert (mask[~real] == 0).all()
    for i, n in enumerate(lengths):
        assert (seen[i, :n] == 1).all() and (seen[i, n:] == 0).all()
    assert loader.stats()["padding_tokens"] == 64 * sum(len(x) for x in batches) - int(lengths.sum())

    first = make()
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    rest = [b["index"].clone() for b in again]
    assert len(rest) + 3 == len(batches)
    assert all(torch.equal(x, y) for x, y in zip(rest, batches[3:]))


def test_packed_samples_mix_and_text_resumes(tmp_path):
    """Two packed sources mix (each row from one source), and a tokenising loader resumed
    mid-epoch delivers the rest of the rows exactly."""
    for name, base in (("a", 0), ("b", 100000)):
        with stoker.Writer(str(tmp_path / name), fields={"tokens": ("vararray", "int32", ()),
                                                         "txt": "text"}) as w:
            for i in range(120):
                w.write({"tokens": (base + i * 100 + np.arange(1 + i % 50)).astype(np.int32),
                         "txt": f"doc {name} {i} " + "x y " * (i % 40)})
    mix = stoker.Loader([str(tmp_path / "a"), str(tmp_path / "b")], batch_size=4, seq_len=64, numpy=True)
    rows = 0
    for b in mix:
        real = b["tokens"] > 0
        for j, s in enumerate(b["source"]):
            assert ((b["tokens"][j][real[j]] >= 100000) == bool(s)).all()
        rows += len(b["source"])
    assert rows > 0 and mix.stats()["padding_tokens"] > 0

    ranks = tmp_path / "r.tiktoken"
    import base64
    ranks.write_text("".join(f"{base64.b64encode(bytes([c])).decode()} {c}\n" for c in range(256)))

    def text_loader():
        return stoker.Loader(str(tmp_path / "a"), batch_size=2, seq_len=32, tokenizer=str(ranks), numpy=True,
                             tokenizer_options={"pattern": r"\S+|\s+"}, eos=10, seed=4)

    whole = [b["index"].copy() for b in text_loader()]
    first = text_loader()
    it = iter(first)
    for _ in range(5):
        next(it)
    again = text_loader()
    again.load_state_dict(first.state_dict())
    rest = [b["index"].copy() for b in again]
    assert len(rest) == len(whole) - 5 and all((x == y).all() for x, y in zip(rest, whole[5:]))


def test_max_tokens_batches_pad_to_the_longest_under_the_budget_over_ranks_and_resume(tmp_path):
    """max_tokens=: batches of a varying number of whole samples, padded to the longest,
    B x L within the budget, an attention mask on the real tokens; every sample once per
    epoch; two ranks take the one sequence's batches in turn, as many each; a resumed
    loader delivers the rest exactly; text tokenised in the loader batches the same way."""
    rng = np.random.default_rng(8)
    lengths = np.clip(rng.lognormal(3.5, 0.8, size=400).astype(int), 1, 200)
    with stoker.Writer(str(tmp_path / "sft"), fields={"tokens": ("vararray", "int32", ()),
                                                    "loss_mask": ("vararray", "uint8", ()),
                                                    "txt": "text"}) as w:
        for i, n in enumerate(lengths):
            k = np.arange(n)
            w.write({"tokens": (i * 1000 + k).astype(np.int32), "loss_mask": (k >= n // 2).astype(np.uint8),
                     "txt": "ab " * int(n)})

    def make(**kw):
        return stoker.Loader(str(tmp_path / "sft"), max_tokens=1024, seed=5, targets=True, loss_mask=True,
                             position_ids=True, pad_id=-1, pack_window=128, **kw)

    loader = make()
    seen = np.zeros(len(lengths), dtype=int)
    batches = []
    padding = 0
    for b in loader:
        B, L = b["tokens"].shape
        assert B * L <= 1024 and b["index"].shape == (B,) and b["attention_mask"].dtype == torch.uint8
        idx = b["index"].numpy()
        batches.append(idx.copy())
        seen[idx] += 1
        assert L == lengths[idx].max()
        att = b["attention_mask"].numpy().astype(bool)
        assert (att == (np.arange(L)[None, :] < lengths[idx][:, None])).all()
        tok, tgt, mask = b["tokens"].numpy(), b["targets"].numpy(), b["loss_mask"].numpy()
        k = np.arange(L)[None, :]
        assert (tok[att] == (idx[:, None] * 1000 + k)[att]).all() and (tok[~att] == -1).all()
        last = k + 1 == lengths[idx][:, None]
        assert (tgt[att & ~last] == tok[att & ~last] + 1).all() and (tgt[last | ~att] == -1).all()
        assert (mask == (att & ~last & (k + 1 >= lengths[idx][:, None] // 2))).all()
        assert (b["position_ids"].numpy()[att] == np.broadcast_to(k, att.shape)[att]).all()
        padding += int((~att).sum())
    assert (seen == 1).all() and len(loader) == len(batches) and "max_tokens=1024" in repr(loader)
    assert loader.stats()["padding_tokens"] == padding

    ranks = [[b["index"].numpy().copy() for b in make(rank=r, world_size=2)] for r in range(2)]
    steps = (len(batches) + 1) // 2
    assert len(ranks[0]) == len(ranks[1]) == steps
    for k in range(steps):
        for r in range(2):
            assert (ranks[r][k] == batches[(2 * k + r) % len(batches)]).all()

    first = make()
    it = iter(first)
    for _ in range(3):
        next(it)
    again = make()
    again.load_state_dict(first.state_dict())
    rest = [b["index"].numpy().copy() for b in again]
    assert len(rest) + 3 == len(batches) and all((x == y).all() for x, y in zip(rest, batches[3:]))

    ranks_file = tmp_path / "r.tiktoken"
    import base64
    ranks_file.write_text("".join(f"{base64.b64encode(bytes([c])).decode()} {c}\n" for c in range(256)))
    text = stoker.Loader(str(tmp_path / "sft"), max_tokens=2048, tokenizer=str(ranks_file), text_field="txt",
                         tokenizer_options={"pattern": r"\S+|\s+"}, numpy=True, seed=1)
    docs = 0
    for b in text:
        B, L = b["tokens"].shape
        assert B * L <= 2048
        # "ab " per stored token, one id per byte: 3 n ids.
        assert (b["attention_mask"].sum(axis=1) == 3 * lengths[b["index"]]).all()
        docs += B
    assert docs == len(lengths)
    with pytest.raises(ValueError, match="give one of them"):
        stoker.Loader(str(tmp_path / "sft"), batch_size=4, max_tokens=1024)

    # A mixture (the dataset twice, weights 1:2): each batch one source's planned batch,
    # whole, with "source" per sample; the weights count batches.
    mix = stoker.Loader([str(tmp_path / "sft"), str(tmp_path / "sft")], weights=[1, 2], max_tokens=1024, seed=2,
                        numpy=True)
    drawn = []
    for b in mix:
        B, L = b["tokens"].shape
        assert B * L <= 1024 and b["source"].shape == (B,) and len(set(b["source"].tolist())) == 1
        assert (b["tokens"][:, 0] == b["index"] * 1000).all()
        drawn.append(int(b["source"][0]))
    assert len(drawn) == len(mix) and 0.5 < drawn.count(1) / len(drawn) < 0.85
