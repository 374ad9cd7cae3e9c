"""metrics_port=: a scrape over HTTP (urllib), parsed by Prometheus's own client library
(Debian's python3-prometheus-client): the types, counters that never go down over
epochs, two loaders of one process told apart by their labels, and a port in use
refused naming the port."""

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import stoker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    # urllib rather than the curl CLI, which a user's environment may not have.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        out = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(out)}


def values(family, **labels):
    """{loader label: value} of the family's samples matching `labels`."""
    return {s.labels["loader"]: s.value for s in family.samples
            if all(s.labels.get(k) == v for k, v in labels.items()) and not s.name.endswith("_created")}


def test_two_loaders_scraped_and_parsed(image_dataset):
    path, n = image_dataset
    port = free_port()
    a = stoker.Loader(path, batch_size=8, size=32, threads=2, metrics_port=port)
    b = stoker.Loader(path, batch_size=8, size=32, threads=1, metrics_port=port)
    for _ in a:
        pass
    next(iter(b))
    first = scrape(port)

    # Types: counters (the parser names the family without "_total"), gauges, the
    # verdict as a labelled gauge.
    assert first["stoker_samples"].type == "counter"
    assert first["stoker_decode_busy_seconds"].type == "counter"
    assert first["stoker_read_bytes"].type == "counter"
    assert first["stoker_skipped"].type == "counter"
    assert first["stoker_samples_per_second"].type == "gauge"
    assert first["stoker_slots"].type == "gauge"
    assert first["stoker_decode_threads"].type == "gauge"
    assert first["stoker_bottleneck"].type == "gauge"
    assert {s.labels["bottleneck"] for s in first["stoker_bottleneck"].samples} <= {
        "network", "storage", "decode", "copy", "consumer", "unknown"}

    # Two loaders, one port: told apart by "loader", the dataset and rank on both.
    samples = values(first["stoker_samples"])
    assert len(samples) == 2
    la, lb = sorted(samples, key=int)
    assert samples[la] == n
    assert 8 <= samples[lb] <= n
    assert values(first["stoker_decode_threads"]) == {la: 2, lb: 1}
    for s in first["stoker_samples"].samples:
        assert s.labels["dataset"] == path and s.labels["rank"] == "0"

    # Counters never go down: a's next epoch's run counts from 0 again.
    a.set_epoch(1)
    it = iter(a)
    next(it)
    second = scrape(port)
    for name, family in first.items():
        if family.type != "counter":
            continue
        before, after = values(family), values(second[name])
        for loader, v in before.items():
            assert after[loader] >= v, (name, loader, v, after[loader])
    assert values(second["stoker_samples"])[la] >= n + 8

    # A loader closed is gone from the page.
    b.close()
    del b
    import gc
    gc.collect()
    third = scrape(port)
    assert set(values(third["stoker_samples"])) == {la}


def test_a_port_in_use_is_an_error_naming_it(image_dataset):
    path, _ = image_dataset
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(stoker.UnavailableError, match=f"metrics port {port} is in use"):
            stoker.Loader(path, batch_size=8, size=32, metrics_port=port)


def test_metrics_port_is_checked(image_dataset):
    path, _ = image_dataset
    with pytest.raises(ValueError, match="metrics_port"):
        stoker.Loader(path, batch_size=8, metrics_port=70000)
