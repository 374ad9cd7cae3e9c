"""Randomized stop/resume: across a whole run, interrupted at random points and resumed
on random world and batch sizes with the README's loop (set_epoch at the top of every
epoch, from the checkpoint's epoch on), the delivered global sample sequence is the
uninterrupted one: nothing lost, nothing repeated.

Images, tokens, a mixture and the skip policy. The sweep's seed is printed on failure;
STOKER_RESUME_SEED=N replays it.
"""

import collections
import os
import random
import shutil

import numpy as np
import pytest

import stoker

S = 16
EPOCHS = 2


def _positions(batches, world):
    """One global step's samples in RankSchedule's order: (j, rank)."""
    out = []
    # Ranks' batches are one length, but for on_error="skip" on several ranks, where a
    # batch that lost samples goes out shorter.
    for j in range(max(len(b["index"]) for b in batches)):
        for r in range(world):
            b = batches[r]
            if j >= len(b["index"]):
                continue
            key = int(b["index"][j])
            out.append((int(b["source"][j]), key) if "source" in b else key)
    return out


def _run(make, schedule, rng):
    """Runs EPOCHS epochs in segments; each segment makes `world` loaders (batch size
    `batch`), restores the last checkpoint and stops after `stop` global steps (None: to
    the end). Returns {epoch: [global samples in order]} and the segment starts."""
    seqs = {e: [] for e in range(EPOCHS)}
    tails = {}  # epoch -> (position where the segment that ended it started, its world size)
    state = None
    for world, batch, stop in schedule:
        loaders = [make(batch, r, world) for r in range(world)]
        start_epoch = 0
        if state is not None:
            for l in loaders:
                l.load_state_dict(state)
            start_epoch = state["epoch"]
        steps = 0
        stopped = False
        its = []
        for epoch in range(start_epoch, EPOCHS):
            for l in loaders:
                l.set_epoch(epoch)  # the README's place, also on the restored epoch
            begin = len(seqs[epoch])
            its = [iter(l) for l in loaders]
            while True:
                if stop is not None and steps == stop:
                    stopped = True
                    break
                bs = [next(it, None) for it in its]
                if all(b is None for b in bs):
                    tails[epoch] = (begin, world)
                    break
                assert all(b is not None for b in bs), "ranks got different numbers of batches"
                seqs[epoch] += _positions(bs, world)
                steps += 1
            if stopped:
                state = loaders[rng.randrange(world)].state_dict()  # every rank's is the same
                assert all(l.state_dict()["order_state"] == state["order_state"] for l in loaders)
                break
        del its
        for l in loaders:
            l.close()
        if not stopped:
            return seqs, tails
    raise AssertionError("the schedule ended before the run")


def _schedule(rng, worlds):
    sched = [(rng.choice(worlds), rng.randint(1, 7), rng.randint(0, 6)) for _ in range(rng.randint(1, 5))]
    return sched + [(rng.choice(worlds), rng.randint(1, 7), None)]


def _expected(reference, epoch_size, tails, trim):
    """The uninterrupted sequence as the run's last segments deliver it: a final step padded
    with the epoch's first samples (records) or trimmed to a multiple of the world size
    (token rows)."""
    out = {}
    for e, ref in reference.items():
        begin, world = tails[e]
        if trim:
            out[e] = ref[:epoch_size - (epoch_size - begin) % world]
        else:
            out[e] = ref
    return out


def _sweep(name, make, epoch_size, worlds, trim=False, trials=3):
    seed = int(os.environ.get("STOKER_RESUME_SEED", random.randrange(1 << 32)))
    rng = random.Random(seed)
    reference, _ = _run(make, [(1, 5, None)], rng)
    for trial in range(trials):
        schedule = _schedule(rng, worlds)
        got, tails = _run(make, schedule, rng)
        want = _expected(reference, epoch_size, tails, trim)
        for e in range(EPOCHS):
            # Padding (records): positions past the epoch's end wrap to its start; they
            # come last in the final step, so the epoch's own samples are its first N.
            delivered = got[e] if trim else got[e][:epoch_size]
            padding = got[e][epoch_size:] if not trim else []
            assert delivered == want[e] and len(padding) < max(w for w, _, _ in schedule), (
                f"{name}: STOKER_RESUME_SEED={seed} trial {trial} schedule {schedule} (world, batch, stop after "
                f"steps) epoch {e}: delivered {len(delivered)} samples, expected {len(want[e])}; first difference at "
                f"{next((i for i, (a, b) in enumerate(zip(delivered, want[e])) if a != b), min(len(delivered), len(want[e])))}")


def test_images(image_dataset):
    path, n = image_dataset
    _sweep("images", lambda b, r, w: stoker.Loader(path, batch_size=b, size=S, seed=5, threads=1, rank=r,
                                                     world_size=w), n, worlds=(1, 2, 3))


def test_tokens(token_dataset):
    path, _, rows = token_dataset
    _sweep("tokens", lambda b, r, w: stoker.Loader(path, batch_size=b, seed=6, threads=1, rank=r, world_size=w),
           rows, worlds=(1, 2, 3), trim=True)


def test_mixture(image_dataset, big_image_dataset):
    a, n_a = image_dataset
    b, n_b = big_image_dataset
    # An epoch shorter than the sources' sum: the small source runs out and restarts.
    _sweep("mixture", lambda bs, r, w: stoker.Loader([a, b], weights=[2, 1], samples_per_epoch=100, batch_size=bs,
                                                      size=S, seed=7, threads=1, rank=r, world_size=w),
           100, worlds=(1, 2, 3), trials=2)


@pytest.fixture(scope="module")
def damaged_dataset(image_dataset, tmp_path_factory):
    """A copy of image_dataset with three records' bytes flipped (their CRCs fail)."""
    src, n = image_dataset
    out = str(tmp_path_factory.mktemp("damaged") / "ds")
    shutil.copytree(src, out)
    bad = [3, 17, 18]
    shards = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".stk"))
    for i in bad:
        payload = next(v for v in stoker.read_record(src, i).values() if isinstance(v, bytes) and len(v) > 64)
        for shard in shards:
            data = bytearray(open(shard, "rb").read())
            at = data.find(payload)
            if at >= 0:
                data[at + len(payload) // 2] ^= 0x5A
                open(shard, "wb").write(bytes(data))
                break
        else:
            raise AssertionError(f"record {i} not found in any shard")
    return out, n, bad


def test_skip(damaged_dataset):
    path, n, bad = damaged_dataset
    make = lambda b, r, w: stoker.Loader(path, batch_size=b, size=S, seed=8, threads=1, rank=r,  # noqa: E731
                                         world_size=w, on_error="skip")
    ref, _ = _run(make, [(1, 4, None)], random.Random(0))
    assert all(len(ref[e]) == n - len(bad) and not set(bad) & set(ref[e]) for e in ref)
    # Skipped samples are filled in from later ones on each rank: one rank keeps the
    # global order exactly, across any batch size and resume point.
    _sweep("skip", make, n - len(bad), worlds=(1,))


def test_skip_on_several_ranks(damaged_dataset):
    # A batch that lost samples goes out shorter: every rank delivers the same number of
    # batches (_run asserts it), the ranks' states agree, and across resumes on any world
    # size every good record comes once per epoch (plus the end-of-epoch padding).
    path, n, bad = damaged_dataset
    make = lambda b, r, w: stoker.Loader(path, batch_size=b, size=S, seed=8, threads=1, rank=r,  # noqa: E731
                                         world_size=w, on_error="skip")
    seed = int(os.environ.get("STOKER_RESUME_SEED", random.randrange(1 << 32)))
    rng = random.Random(seed)
    good = set(range(n)) - set(bad)
    for trial in range(3):
        schedule = _schedule(rng, (2, 3))
        got, _ = _run(make, schedule, rng)
        for e in range(EPOCHS):
            count = collections.Counter(got[e])
            repeated = sum(c - 1 for c in count.values())
            assert set(count) == good and repeated < max(w for w, _, _ in schedule), (
                f"STOKER_RESUME_SEED={seed} trial {trial} schedule {schedule} epoch {e}: missing "
                f"{sorted(good - set(count))}, bad delivered {sorted(set(count) - good)}, {repeated} repeated")


def test_set_epoch_after_restore_keeps_the_position_and_another_epoch_is_refused(image_dataset):
    path, n = image_dataset
    a = stoker.Loader(path, batch_size=8, size=S, seed=2, threads=1)
    a.set_epoch(1)
    it = iter(a)
    next(it)
    state = a.state_dict()
    del it
    b = stoker.Loader(path, batch_size=8, size=S, seed=2, threads=1)
    b.load_state_dict(state)
    with pytest.raises(stoker.InvalidArgumentError, match="restored epoch 1 at sample 8"):
        b.set_epoch(0)
    b.set_epoch(1)
    assert len(b) == (n - 8 + 7) // 8
    assert sum(len(x["index"]) for x in b) == n - 8
