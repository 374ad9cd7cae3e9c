"""stoker.Loader over an http:// dataset (nginx on loopback) through the shard cache:
the same batches as the local dataset, epoch after epoch, each shard fetched once."""

import os
import shutil
import socket
import subprocess
import time

import pytest
import torch

import stoker


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(proc, port, what):
    """Returns once `proc` accepts connections on 127.0.0.1:port; skips if it died."""
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            if proc.poll() is not None:
                pytest.skip(f"{what} could not start on 127.0.0.1")
            time.sleep(0.02)


@pytest.fixture
def nginx(tmp_path, image_dataset):
    """(url of the image dataset, access log path): nginx serving a copy of it."""
    if shutil.which("nginx") is None:
        pytest.skip("nginx (Debian nginx-light) is not installed")
    root = tmp_path / "www"
    shutil.copytree(image_dataset[0], root / "ds")
    port = _free_port()
    log = tmp_path / "access.log"
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"daemon off; master_process off; worker_processes 1;\n"
        f"pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;\n"
        f"events {{ worker_connections 64; }}\n"
        f"http {{ log_format p '$uri'; access_log {log} p;\n"
        f"  client_body_temp_path {tmp_path}/b; proxy_temp_path {tmp_path}/p;\n"
        f"  fastcgi_temp_path {tmp_path}/f; uwsgi_temp_path {tmp_path}/u; scgi_temp_path {tmp_path}/s;\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} }} }}\n")
    proc = subprocess.Popen(["nginx", "-p", str(tmp_path), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(proc, port, "nginx")
        yield f"http://127.0.0.1:{port}/ds", log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _shard_requests(log):
    return sum(1 for line in log.read_text().splitlines() if line.endswith(".stk")) if log.exists() else 0


def _epoch(loader, e):
    loader.set_epoch(e)
    return [{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def test_a_url_gives_the_local_batches_and_later_epochs_fetch_nothing(nginx, image_dataset, tmp_path):
    url, log = nginx
    kw = dict(batch_size=8, transform="eval", size=32, seed=5, threads=2)
    local = stoker.Loader(image_dataset[0], **kw)
    remote = stoker.Loader(url, cache_dir=tmp_path / "cache", **kw)
    fetched = None
    for e in range(3):
        want, got = _epoch(local, e), _epoch(remote, e)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            assert g.keys() == w.keys()
            for k in w:
                if isinstance(w[k], torch.Tensor):
                    assert torch.equal(g[k], w[k]), (e, k)
                else:
                    assert g[k] == w[k], (e, k)
        if e == 0:
            fetched = _shard_requests(log)
            assert fetched >= len(stoker.read_manifest(image_dataset[0])["shards"])
        else:
            assert _shard_requests(log) == fetched, f"epoch {e} asked the server for shards again"


def test_opening_a_url_fetches_its_manifest_once(nginx, tmp_path):
    # The Python layer learns the schema from the C++ Loader, which fetched the MANIFEST
    # for its cache: one request, not one per layer.
    url, log = nginx
    remote = stoker.Loader(url, cache_dir=tmp_path / "cache", batch_size=8, transform=None, threads=1)
    assert remote._impl.schema.split()[1] == "image:image"
    batch = next(iter(remote))
    assert isinstance(batch["image"], list) and isinstance(batch["image"][0], bytes)  # transform=None: as stored
    manifests = [line for line in log.read_text().splitlines() if line.endswith("/MANIFEST")]
    assert len(manifests) == 1, manifests


def test_a_url_without_cache_dir_is_a_named_error(nginx):
    url, _ = nginx
    with pytest.raises(Exception, match="cache_dir"):
        stoker.Loader(url, batch_size=8, transform="eval", size=32)


def test_stats_carry_the_network_stage(nginx, image_dataset, tmp_path):
    url, log = nginx
    kw = dict(batch_size=8, transform="eval", size=32, seed=5, threads=2)
    shards = len(stoker.read_manifest(image_dataset[0])["shards"])
    remote = stoker.Loader(url, cache_dir=tmp_path / "cache", **kw)
    _epoch(remote, 0)
    n = remote.stats()["network"]
    assert n["bytes_fetched"] > 0 and n["bytes_per_s"] > 0
    assert n["requests"] >= shards and n["requests_per_s"] > 0
    assert n["hits"] + n["misses"] == shards
    assert 0 < n["cache_bytes"] <= n["cache_limit"]
    assert "network fetched" in remote.summary()
    # Epoch 2: every shard in place, nothing asked for.
    before = _shard_requests(log)
    _epoch(remote, 1)
    n = remote.stats()["network"]
    assert _shard_requests(log) == before
    assert n["requests"] == 0 and n["bytes_fetched"] == 0
    assert n["hit_rate"] == 1.0
    # A local dataset has none.
    local = stoker.Loader(image_dataset[0], **kw)
    _epoch(local, 0)
    assert local.stats()["network"] is None


def test_remote_reads_records_gives_the_local_batches_with_nothing_cached(nginx, image_dataset, tmp_path):
    url, log = nginx
    kw = dict(batch_size=8, transform="eval", size=32, seed=5, threads=2)
    local = stoker.Loader(image_dataset[0], **kw)
    remote = stoker.Loader(url, cache_dir=tmp_path / "cache", remote_reads="records", **kw)
    for e in range(2):
        want, got = _epoch(local, e), _epoch(remote, e)
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            for k in w:
                if isinstance(w[k], torch.Tensor):
                    assert torch.equal(g[k], w[k]), (e, k)
                else:
                    assert g[k] == w[k], (e, k)
        assert remote.stats()["network"]["reads"] == "records"
    assert not [p for p in (tmp_path / "cache").rglob("*.stk")], "records mode cached a shard"
    with pytest.raises(ValueError, match="remote_reads"):
        stoker.Loader(url, cache_dir=tmp_path / "cache", remote_reads="ranged", **kw)


@pytest.fixture
def plain_http(tmp_path, image_dataset):
    """url of a copy of the image dataset served by `python3 -m http.server`, which
    answers a ranged GET with the whole file (HTTP 200)."""
    import sys
    root = tmp_path / "plain"
    shutil.copytree(image_dataset[0], root / "ds")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root),
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(proc, port, "python3 -m http.server")
        yield f"http://127.0.0.1:{port}/ds"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_server_without_range_is_read_by_whole_shards_and_says_so(plain_http, image_dataset, tmp_path, caplog):
    import logging
    kw = dict(batch_size=8, transform="eval", size=16, seed=3, threads=1)
    want = _epoch(stoker.Loader(image_dataset[0], **kw), 0)
    with caplog.at_level(logging.WARNING, logger="stoker"):
        remote = stoker.Loader(plain_http, cache_dir=tmp_path / "cache", remote_reads="records", **kw)
        got = _epoch(remote, 0)
    assert [g["index"].tolist() for g in got] == [w["index"].tolist() for w in want]
    net = remote.stats()["network"]
    assert net["range_ignored"] and net["whole_fetches"] >= 1 and net["reads"] == "shards", net
    shards = [f for f in os.listdir(image_dataset[0]) if f.endswith(".stk")]
    size = sum(os.path.getsize(os.path.join(image_dataset[0], f)) for f in shards)
    assert net["bytes_fetched"] < 2 * size + (1 << 20), net
    assert any("ignores HTTP Range" in r.getMessage() and "127.0.0.1" in r.getMessage() for r in caplog.records)
