"""Aspect-ratio buckets of video clips through the Python Loader: each batch one bucket
of shape [B, T, h, w, 3], the bucket nearest each video's stored size, the same sequence
on two ranks of one global batch, resume, nothing lost."""

import shutil

import numpy as np
import pytest

import stoker
from stoker import _stoker

from conftest import VIDEO_SIZES, make_videofolder

pytestmark = pytest.mark.skipif(not _stoker.media_available or shutil.which("ffmpeg") is None,
                                reason="needs a build with libav and the ffmpeg CLI")

BUCKETS = [(32, 64), (64, 32), (48, 48)]  # (h, w)
PER_CLASS = 9  # 2 classes x 9: 6 videos of each size


@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory):
    base = tmp_path_factory.mktemp("video_buckets")
    out = str(base / "ds")
    assert stoker.pack_videofolder(make_videofolder(str(base), PER_CLASS), out, threads=2)["records"] == 2 * PER_CLASS
    return out


def size_of(record):
    """(w, h) of a record: records go class by class, v_000 first."""
    return VIDEO_SIZES[(record % PER_CLASS) % 3]


def loader(path, batch_size, crop="random", **kw):
    return stoker.Loader(path, batch_size=batch_size, threads=2, seed=5, buckets=BUCKETS,
                         fields={"video": stoker.VideoClip(3, stride=4, crop=crop)}, **kw)


def epoch(ld):
    out = []
    for b in ld:
        video, bucket = b["video"], b["bucket"].numpy()
        assert (bucket == bucket[0]).all()
        h, w = ld.buckets[int(bucket[0])]
        assert tuple(video.shape) == (len(bucket), 3, h, w, 3)
        assert tuple(b["video.pts"].shape) == (len(bucket), 3)
        for i in b["index"].tolist():
            vw, vh = size_of(i)
            assert (h, w) == (vh, vw), f"record {i} of {vw}x{vh} in bucket {h}x{w}"
        out.append((b["index"].numpy().copy(), int(bucket[0]), video.numpy().copy()))
    return out


def test_clips_take_their_buckets_shape_and_none_is_lost(video_dataset):
    ld = loader(video_dataset, 4)
    assert ld.buckets == [(64, 32), (48, 48), (32, 64)]  # tallest first
    batches = epoch(ld)
    assert len(batches) == len(ld)
    assert {b for _, b, _ in batches} == {0, 1, 2}
    seen = np.concatenate([i for i, _, _ in batches])
    assert set(seen.tolist()) == set(range(2 * PER_CLASS))
    assert len(seen) - 2 * PER_CLASS == 3 * ((4 - 6 % 4) % 4)  # 6 a bucket: 2 repeats each


def test_two_ranks_deterministic_and_resume(video_dataset):
    one = epoch(loader(video_dataset, 4))
    again = epoch(loader(video_dataset, 4))
    assert all((a[0] == b[0]).all() and (a[2] == b[2]).all() for a, b in zip(one, again))
    ranks = [epoch(loader(video_dataset, 2, rank=r, world_size=2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(one)
    for k, (idx, bucket, video) in enumerate(one):
        assert ranks[0][k][1] == ranks[1][k][1] == bucket
        assert ranks[0][k][0].tolist() == idx[0::2].tolist()
        assert ranks[1][k][0].tolist() == idx[1::2].tolist()
        assert (ranks[0][k][2] == video[0::2]).all() and (ranks[1][k][2] == video[1::2]).all()

    ld = loader(video_dataset, 4)
    it = iter(ld)
    next(it), next(it)
    state = ld.state_dict()
    resumed = loader(video_dataset, 4)
    resumed.load_state_dict(state)
    rest = epoch(resumed)
    assert [i.tolist() for i, _, _ in rest] == [i.tolist() for i, _, _ in one[2:]]
    assert all((a[2] == b[2]).all() for a, b in zip(rest, one[2:]))


def test_centred_clip_is_the_unbucketed_centred_clip_of_that_size(video_dataset):
    ld = loader(video_dataset, 4, crop="center", shuffle=False, drop_last=True)
    bucketed = epoch(ld)
    checked = 0
    for h, w in ld.buckets:
        plain = stoker.Loader(video_dataset, batch_size=2 * PER_CLASS, threads=2, shuffle=False,
                              fields={"video": stoker.VideoClip(3, stride=4, crop="center", size=(h, w))})
        whole = next(iter(plain))["video"].numpy()
        for idx, bucket, video in bucketed:
            if ld.buckets[bucket] != (h, w):
                continue
            for j, i in enumerate(idx.tolist()):
                np.testing.assert_array_equal(video[j], whole[i])
                checked += 1
    assert checked == 3 * 4  # 6 records a bucket, the last partial group of 2 dropped
