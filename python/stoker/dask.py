"""Pack on a dask.distributed cluster: every partition is a part, the client commits.

    from dask.distributed import Client
    import stoker.dask
    client = Client("scheduler:8786")
    stoker.dask.pack("/data/imagenet/train", "/shared/in1k", kind="imagefolder", parts=64, fast_crop=True)
    stoker.dask.pack("/data/kinetics/train", "/shared/k400", kind="videofolder", video_reencode={"gop": 16})
    stoker.dask.pack(bag_of_sample_dicts, "/shared/captions", fields={"jpg": "image", "txt": "text"})

Two kinds of input:
  - kind="imagefolder" or "videofolder" (a directory), "wds" (a list of tar paths) or
    "tokens" (a token file): `parts` tasks (default: the cluster's worker threads) each
    run the C++ packer on part i/parts (stoker/pack.h says how the input is cut), with
    the packer's keyword options (fast_crop=True, seq_len=..., threads=...; videofolder
    and wds: video_reencode={"gop": 16, "max_side": 320, ...} as stoker.pack's
    --video-gop, --max-side, --fps, --video-crf and --video-encoder).
  - records: a dask bag of sample dicts, a dask dataframe (one record per row, columns
    as fields), or a list of lists of sample dicts: partition i is written by
    stoker.Writer(out, fields, part=(i, n)), so a record's fields are checked as the
    Writer checks them; `fields` is required, other keywords go to the Writer. Give
    each sample its "__key__": the Writer's default key (its index) restarts at 0 in
    every part.
The tasks run on the workers (OUT must be a directory they all write: a shared file
system); a failed task is retried `retries` times (a re-run replaces its part
atomically); when every task has finished, the client calls stoker.commit(out) and
returns its report. An exception from a part is raised here, naming it, and nothing is
committed.
"""

from . import _stoker

_PACKERS = {"imagefolder": "pack_imagefolder", "videofolder": "pack_videofolder", "wds": "pack_wds",
            "tokens": "pack_tokens"}


def _pack_part(kind, inputs, out, part, options):
    return getattr(_stoker, _PACKERS[kind])(inputs, out, part=part, **options)


def _write_part(records, out, fields, part, options):
    from .writer import Writer

    if hasattr(records, "to_dict"):  # a pandas partition of a dask dataframe
        records = records.to_dict("records")
    with Writer(out, fields, part=part, **options) as w:
        for r in records:
            w.write(r)
    return w.summary


def _default_parts(client):
    return max(1, sum(client.nthreads().values()))


def pack(inputs, out, *, kind=None, fields=None, parts=None, client=None, retries=1, clean=False, **options):
    """Packs `inputs` into `out` on the dask cluster of `client` (default: the current
    one) as described in the module doc; returns stoker.commit's report dict with
    "part_summaries" (each part's summary, in part order) added."""
    from dask.distributed import get_client

    client = client or get_client()
    out = str(out)
    if kind is not None:
        if kind not in _PACKERS:
            raise ValueError(f"kind must be one of {sorted(_PACKERS)} (or None for records), got {kind!r}")
        if fields is not None:
            raise ValueError("fields is for records; a packer kind makes its own schema")
        n = int(parts or _default_parts(client))
        if kind == "wds":
            inputs = [str(t) for t in inputs]
            n = min(n, len(inputs))  # a part gets at least one tar
        futures = [client.submit(_pack_part, kind, inputs, out, f"{i}/{n}", options, retries=retries, pure=False)
                   for i in range(n)]
    else:
        if fields is None:
            raise ValueError("records need fields={name: kind} (as stoker.Writer); or give kind= for a packer")
        if parts is not None:
            raise ValueError("records are split by their partitions; parts= is for a packer kind")
        if hasattr(inputs, "to_delayed"):  # dask bag or dataframe
            import dask

            delayed = inputs.to_delayed()
            n = len(delayed)
            tasks = [dask.delayed(_write_part)(d, out, fields, f"{i}/{n}", options) for i, d in enumerate(delayed)]
            futures = client.compute(tasks, retries=retries)
        else:
            chunks = [list(c) for c in inputs]
            n = len(chunks)
            futures = [client.submit(_write_part, c, out, fields, f"{i}/{n}", options, retries=retries, pure=False)
                       for i, c in enumerate(chunks)]
        if n == 0:
            raise ValueError("no partitions to pack")
    summaries = client.gather(futures)
    report = _stoker.commit(out, clean=clean)
    report["part_summaries"] = summaries
    return report
