"""Ranks: defaults from torch.distributed (gloo, two processes) and from torchrun's env."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import stoker

WORKER = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    import stoker
    dist.init_process_group("gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from the env
    path, out = sys.argv[1], sys.argv[2]
    loader = stoker.Loader(path, batch_size=4, size=16, seed=7, threads=1)
    idx = [i for b in loader for i in b["index"].tolist()]
    # Every rank must see the same number of batches or collectives would hang.
    n = [None] * dist.get_world_size()
    dist.all_gather_object(n, len(loader))
    with open(out, "w") as f:
        json.dump({"rank": loader.rank, "world": loader.world_size, "indices": idx, "lens": n}, f)
    dist.destroy_process_group()
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_get_disjoint_sets_covering_the_epoch(image_dataset, tmp_path):
    path, n = image_dataset
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(free_port())
    procs = []
    for rank in range(2):
        # USE_LIBUV=0: Debian 13's torch asks its TCP store for libuv by default but is
        # built without it; the plain store is what every torch has.
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2",
                   USE_LIBUV="0")
        procs.append(subprocess.Popen([sys.executable, str(script), path, str(tmp_path / f"r{rank}.json")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    res = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in res] == [0, 1] and all(r["world"] == 2 for r in res)
    a, b = set(res[0]["indices"]), set(res[1]["indices"])
    assert len(a) == len(res[0]["indices"]) and len(b) == len(res[1]["indices"])
    assert not a & b
    assert a | b == set(range(n))
    assert res[0]["lens"] == res[1]["lens"]


def test_ranks_default_from_torchrun_env(image_dataset, monkeypatch):
    path, n = image_dataset
    got = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        loader = stoker.Loader(path, batch_size=5, size=16, seed=1, threads=1)
        assert (loader.rank, loader.world_size) == (rank, 3)
        got.append([i for b in loader for i in b["index"].tolist()])
    assert sorted(sum(got, [])) == list(range(n))
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        stoker.Loader(path, batch_size=5)
    monkeypatch.delenv("RANK")
    assert stoker.default_rank_world() == (0, 1)


def test_explicit_rank_wins_over_env(image_dataset, monkeypatch):
    path, _ = image_dataset
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = stoker.Loader(path, batch_size=5, size=16, rank=0, world_size=4)
    assert (loader.rank, loader.world_size) == (0, 4)
