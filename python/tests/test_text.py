"""stoker.Tokenizer: a ranks file opened from Python encodes, decodes, recognises its
special tokens only where allowed, replaces invalid UTF-8 as bytes.decode(errors="replace")
does, and bad files raise stoker's errors."""
import base64
import threading

import pytest

import stoker


def _ranks(tmp_path, name="small.tiktoken"):
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    for i, t in enumerate([b"th", b"the", b" the", b"aa"]):
        lines.append(f"{base64.b64encode(t).decode()} {256 + i}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


PATTERN = r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def test_encode_decode_and_specials(tmp_path):
    tok = stoker.Tokenizer(_ranks(tmp_path), pattern=PATTERN, special_tokens={"<|eot|>": 1000})
    assert tok.format == "tiktoken"
    assert tok.vocab_size == 1001
    assert tok.encode("the") == [257]
    assert tok.encode(" the aa") == [258, 32, 259]
    assert tok.encode("the<|eot|>", allowed_special="all") == [257, 1000]
    assert tok.encode("the<|eot|>", allowed_special=["<|eot|>"]) == [257, 1000]
    assert 1000 not in tok.encode("the<|eot|>")
    assert tok.decode([257, 1000]) == b"the<|eot|>"
    assert tok.special_token("<|eot|>") == 1000
    assert tok.token_id("the") == 257 and tok.token_id("nope") is None
    text = "wörld 🎉 the end"
    assert tok.decode(tok.encode(text)).decode() == text
    bad = b"a\xff\xe2\x82b"
    assert tok.decode(tok.encode(bad)) == bad.decode(errors="replace").encode()


def test_threads_share_one_tokenizer(tmp_path):
    tok = stoker.Tokenizer(_ranks(tmp_path), pattern=PATTERN)
    text = "the quick brown fox " * 2000
    want = tok.encode(text)
    got = []
    threads = [threading.Thread(target=lambda: got.append(tok.encode(text))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 4


def test_errors(tmp_path):
    with pytest.raises(stoker.NotFoundError):
        stoker.Tokenizer(str(tmp_path / "absent.tiktoken"))
    with pytest.raises(stoker.InvalidArgumentError, match="--pattern"):
        stoker.Tokenizer(_ranks(tmp_path))
    (tmp_path / "bad.tiktoken").write_text("YQ== 0\nnot base64! 1\n")
    with pytest.raises(stoker.InvalidArgumentError, match="bad.tiktoken:2"):
        stoker.Tokenizer(str(tmp_path / "bad.tiktoken"), pattern=PATTERN)
    tok = stoker.Tokenizer(_ranks(tmp_path), pattern=PATTERN)
    with pytest.raises(ValueError):
        tok.encode("x", allowed_special="some")


def test_loader_tokenises_text_into_packed_rows(tmp_path):
    """A text dataset read with tokenizer=: every document comes once per epoch as
    [bos] + its ids + [eos], rows start at a document, and the verdict stage is tokenize."""
    ranks = _ranks(tmp_path)
    specials = {"<bos>": 300, "<eos>": 301}
    tok = stoker.Tokenizer(ranks, pattern=PATTERN, special_tokens=specials)
    docs = [f"the {i} th{'e' * (i % 7)} aa " * (1 + i % 9) for i in range(200)] + ["", "ünï 🎉 <eos>"]
    with stoker.Writer(str(tmp_path / "text"), fields={"txt": "text"}) as w:
        for d in docs:
            w.write({"txt": d})
    loader = stoker.Loader(str(tmp_path / "text"), batch_size=4, seq_len=48, tokenizer=ranks,
                           tokenizer_options={"pattern": PATTERN, "special_tokens": specials},
                           bos="<bos>", eos=301, position_ids=True, numpy=True, threads=2)
    got = {}
    for b in loader:
        tokens, pos, samples, offs = b["tokens"], b["position_ids"], b["sample_index"], b["sample_index.offsets"]
        for j in range(len(tokens)):
            piece = offs[j] - 1
            for i in range(48):
                if i == 0 or pos[j][i] != pos[j][i - 1] + 1:
                    piece += 1
                if piece >= offs[j + 1]:
                    break
                got.setdefault(int(samples[piece]), {})[int(pos[j][i])] = int(tokens[j][i])
    assert sorted(got) == list(range(len(docs)))
    for i, d in enumerate(docs):
        want = [300] + tok.encode(d) + [301]
        assert [got[i][k] for k in range(len(got[i]))] == want, i
    assert loader.stats()["tokenize"] is True


def test_loader_keeps_document_token_counts_between_opens(tmp_path):
    """Opening tokenises the documents once to plan the rows and keeps the counts in
    token_counts_dir: the next open reads them (plan_tokenised 0) and delivers the same
    rows; token_counts_dir=False keeps none."""
    ranks = _ranks(tmp_path)
    with stoker.Writer(str(tmp_path / "text"), fields={"txt": "text"}) as w:
        for i in range(120):
            w.write({"txt": f"the {i} aa " * (1 + i % 11)})

    def rows(**kw):
        loader = stoker.Loader(str(tmp_path / "text"), batch_size=4, seq_len=32, tokenizer=ranks,
                               tokenizer_options={"pattern": PATTERN}, eos=10, numpy=True, threads=2, seed=3, **kw)
        got = [b["tokens"].tobytes() for b in loader]
        return got, loader.stats()["plan_tokenised"]

    first, n = rows(token_counts_dir=tmp_path / "counts")
    assert n == 120 and len(list((tmp_path / "counts").glob("*.counts"))) == 1
    again, n = rows(token_counts_dir=tmp_path / "counts")
    assert n == 0 and again == first
    none, n = rows(token_counts_dir=False)
    assert n == 120 and none == first
    with pytest.raises(ValueError, match="token_counts_dir"):
        stoker.Loader(str(tmp_path / "text"), batch_size=4, token_counts_dir=tmp_path / "counts")


def test_loader_takes_small_records_from_a_mapping_of_their_cached_shard(tmp_path):
    """Documents of a few dozen bytes are taken from a mapping of their shard when it is
    in the page cache (the one just written is): the rows are those the engine's reads
    give with map_cached=False."""
    ranks = _ranks(tmp_path)
    with stoker.Writer(str(tmp_path / "text"), fields={"txt": "text"}) as w:
        for i in range(200):
            w.write({"txt": f"the {i} aa " * (1 + i % 7)})

    def rows(map_cached):
        loader = stoker.Loader(str(tmp_path / "text"), batch_size=4, seq_len=32, tokenizer=ranks,
                               tokenizer_options={"pattern": PATTERN}, eos=10, numpy=True, threads=2, seed=5,
                               token_counts_dir=False, map_cached=map_cached)
        got = [b["tokens"].tobytes() for b in loader]
        return got, loader.stats()["io_mapped_records"]

    mapped, n = rows(True)
    assert n > 0
    read, n = rows(False)
    assert n == 0 and read == mapped


def test_pack_text_and_pack_samples_from_python(tmp_path):
    ranks = _ranks(tmp_path)
    (tmp_path / "a.txt").write_text("the cat and the hat " * 20)
    s = stoker.pack_text([str(tmp_path / "a.txt")], str(tmp_path / "tok"), tokenizer=ranks, pattern=PATTERN,
                         special_tokens={"<eos>": 300}, eos="<eos>", seq_len=8)
    assert s["records"] >= 1
    (tmp_path / "s.jsonl").write_text('{"ids": [1, 2, 3], "m": [0, 1, 1]}\n{"ids": [4], "m": [1]}\n')
    s = stoker.pack_samples([str(tmp_path / "s.jsonl")], str(tmp_path / "sft"), tokens_key="ids", mask_key="m")
    assert s["records"] == 2
    b = next(iter(stoker.Loader(str(tmp_path / "sft"), batch_size=1, seq_len=8, numpy=True, loss_mask=True)))
    assert sorted(b["tokens"][0][:4].tolist()) == [1, 2, 3, 4]
    (tmp_path / "bad.jsonl").write_text('{"ids": [1, "x"]}\n')
    with pytest.raises(stoker.InvalidArgumentError, match=r"bad.jsonl:1: \"ids\"\[1\] is not an integer"):
        stoker.pack_samples([str(tmp_path / "bad.jsonl")], str(tmp_path / "bad"), tokens_key="ids")


def test_stoker_pack_module_packs_samples_as_one_part_and_commits(tmp_path):
    """`python -m stoker.pack samples` without torchrun: part 0/1, then the commit."""
    import os
    import subprocess
    import sys
    (tmp_path / "s.jsonl").write_text("".join(f'{{"ids": [{i}, {i + 1}]}}\n' for i in range(20)))
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(stoker.__file__)))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "stoker.pack", "samples", str(tmp_path / "s.jsonl"),
                        str(tmp_path / "ds"), "--tokens-key", "ids"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(list(stoker.Loader(str(tmp_path / "ds"), batch_size=2, seq_len=8, numpy=True))) >= 1
