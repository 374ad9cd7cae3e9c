"""Aspect-ratio buckets through the Python Loader: buckets=, batch["bucket"],
loader.buckets, world sizes of one global batch, resume."""

import numpy as np
import pytest

import stoker

# conftest's image_dataset: (w, h) of 48x40, 40x56, 64x48, 33x45 in turn: two landscape,
# two portrait aspects.
BUCKETS = [(32, 40), (40, 32)]  # (h, w): landscape, portrait


def epoch(loader):
    out = []
    for b in loader:
        image, bucket = b["image"], b["bucket"].cpu().numpy()
        assert (bucket == bucket[0]).all()
        h, w = loader.buckets[int(bucket[0])]
        assert tuple(image.shape) == (len(bucket), h, w, 3)
        out.append((b["index"].cpu().numpy().copy(), int(bucket[0]), image.cpu().numpy().copy()))
    return out


def test_batches_take_their_buckets_shape(image_dataset):
    path, n = image_dataset
    loader = stoker.Loader(path, batch_size=4, size=32, buckets=BUCKETS, threads=2)
    assert loader.buckets == [(40, 32), (32, 40)]  # tallest first
    batches = epoch(loader)
    assert len(batches) == len(loader)
    assert {b for _, b, _ in batches} == {0, 1}
    seen = np.concatenate([i for i, _, _ in batches])
    assert set(seen.tolist()) == set(range(n))  # nothing lost; repeats only fill each bucket's last batch
    assert len(seen) - n == sum((4 - c % 4) % 4 for c in (30, 30))


def test_pixel_budget(image_dataset):
    path, _ = image_dataset
    loader = stoker.Loader(path, batch_size=4, buckets={"pixels": 512 * 512, "step": 64}, threads=2)
    assert loader.buckets == [(640, 384), (576, 448), (512, 512), (448, 576), (384, 640)]
    assert epoch(loader)


def test_same_sequence_on_two_ranks_and_resume(image_dataset):
    path, _ = image_dataset
    one = epoch(stoker.Loader(path, batch_size=8, size=32, buckets=BUCKETS, threads=2, seed=3))
    ranks = [epoch(stoker.Loader(path, batch_size=4, size=32, buckets=BUCKETS, threads=2, seed=3,
                                 rank=r, world_size=2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(one)
    for k, (idx, bucket, _) in enumerate(one):
        assert ranks[0][k][1] == ranks[1][k][1] == bucket
        assert ranks[0][k][0].tolist() == idx[0::2].tolist()
        assert ranks[1][k][0].tolist() == idx[1::2].tolist()

    loader = stoker.Loader(path, batch_size=8, size=32, buckets=BUCKETS, threads=2, seed=3)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    resumed = stoker.Loader(path, batch_size=8, size=32, buckets=BUCKETS, threads=2, seed=3)
    resumed.load_state_dict(state)
    rest = epoch(resumed)
    assert [i.tolist() for i, _, _ in rest] == [i.tolist() for i, _, _ in one[2:]]
    assert all((a[2] == b[2]).all() for a, b in zip(rest, one[2:]))
    other = stoker.Loader(path, batch_size=4, size=32, buckets=BUCKETS, threads=2, seed=3)
    with pytest.raises(Exception, match="global batch"):
        other.load_state_dict(state)


def test_bad_buckets_are_named(image_dataset):
    path, _ = image_dataset
    with pytest.raises(TypeError, match="buckets"):
        stoker.Loader(path, batch_size=4, buckets=512)
    with pytest.raises(ValueError, match="buckets"):
        stoker.Loader(path, batch_size=4, buckets={"step": 64})
    with pytest.raises(ValueError, match="buckets"):
        stoker.Loader(path, batch_size=4, buckets=[(0, 32)])
    with pytest.raises(ValueError, match="buckets"):
        stoker.Loader(path, batch_size=4, buckets=BUCKETS, on_error="skip")


def test_a_follower_takes_its_leaders_bucket(tmp_path):
    from test_fields import COLOURS, pair

    path = str(tmp_path / "seg")
    with stoker.Writer(path, fields={"jpg": "image", "png": "image"}) as w:
        for i in range(24):
            img, mask = pair(*((64, 40) if i % 2 else (40, 64)), i)
            w.write({"__key__": f"s{i}", "jpg": img, "png": mask})
    loader = stoker.Loader(path, batch_size=4, seed=2, threads=2, buckets=[(32, 48), (48, 32)], fields={
        "jpg": stoker.RandomResizedCrop(32, flip=0.5), "png": stoker.Follow("jpg")})
    palette = np.array(COLOURS, dtype=np.int32)
    shapes = set()
    for b in loader:
        h, w = loader.buckets[int(b["bucket"][0])]
        n = len(b["bucket"])
        assert tuple(b["jpg"].shape) == (n, h, w, 3) and tuple(b["png"].shape) == (n, h, w, 1)
        shapes.add((h, w))
        for j in range(n):
            img = b["jpg"][j].numpy().astype(np.int32)
            dist = np.abs(img[:, :, None, :] - palette[None, None]).sum(-1)
            clear = dist.min(-1) <= 30
            assert (dist.argmin(-1)[clear] == b["png"][j].numpy()[:, :, 0][clear]).all()
    assert shapes == {(32, 48), (48, 32)}


def test_chw_float_output_has_the_buckets_shape(image_dataset):
    path, _ = image_dataset
    u8 = stoker.Loader(path, batch_size=4, size=32, buckets=BUCKETS, threads=2, seed=5, transform="eval")
    f32 = stoker.Loader(path, batch_size=4, size=32, buckets=BUCKETS, threads=2, seed=5, transform="eval",
                        pixel_format="f32_chw", mean=(0, 0, 0), std=(1, 1, 1))
    for a, b in zip(u8, f32):
        n = len(a["bucket"])
        h, w = u8.buckets[int(a["bucket"][0])]
        assert tuple(b["image"].shape) == (n, 3, h, w)
        want = a["image"].numpy().astype(np.float32).transpose(0, 3, 1, 2) / 255
        assert np.allclose(b["image"].numpy(), want, atol=1e-6)


def test_staged_batches_change_shape_with_their_bucket(image_dataset, staged):
    """The staging ring (device="cuda" on a GPU, its host backend everywhere) sizes its slots for
    the largest bucket and passes each batch's shape through."""
    path, _ = image_dataset
    opts = dict(batch_size=4, size=32, buckets=BUCKETS, threads=2, seed=4)
    plain = epoch(stoker.Loader(path, **opts))
    got = epoch(stoker.Loader(path, **staged, **opts))
    assert [(i.tolist(), b) for i, b, _ in got] == [(i.tolist(), b) for i, b, _ in plain]
    assert all((a[2] == b[2]).all() for a, b in zip(got, plain))
