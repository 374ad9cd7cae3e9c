"""Pack on every rank of a torchrun job, then commit once:

    torchrun --nproc-per-node 8 -m stoker.pack imagefolder /data/imagenet/train /data/in1k --fast-crop
    torchrun --nnodes 4 --nproc-per-node 8 ... -m stoker.pack tokens train.bin /data/owt --seq-len 1024
    torchrun --nproc-per-node 8 -m stoker.pack videofolder /data/kinetics/train /data/k400 --video-gop 16

Rank r of a world of W packs part r/W of the input into OUT (stoker/pack.h: contiguous
ranges of the sorted image or video list, of the tars as given, of the token records), waits on
a barrier (torch.distributed, gloo: MASTER_ADDR/PORT, RANK and WORLD_SIZE from
torchrun's environment), and rank 0 then commits (stoker.commit). A rank whose pack
fails reports it through the barrier's all_gather, so rank 0 commits only when every
part is written, and every rank exits non-zero otherwise. OUT must be a directory every
rank can write (a shared file system). Without torchrun's environment it packs the
whole dataset as part 0/1 and commits it.
"""

import argparse
import os
import sys

from . import _stoker


def _parser():
    p = argparse.ArgumentParser(prog="python -m stoker.pack",
                                description="Pack part RANK/WORLD_SIZE on each torchrun rank; rank 0 commits.")
    sub = p.add_subparsers(dest="kind", required=True)

    def common(c):
        c.add_argument("--shard-size", type=int, default=256 << 20, help="bytes per shard (default 256 MiB)")
        c.add_argument("--threads", type=int, default=0, help="threads per rank (0: the CPUs allowed)")
        c.add_argument("--align", type=int, default=1, choices=(1, 4096))
        c.add_argument("--clean", action="store_true", help="commit --clean: remove stray files")

    def video(c):  # the CLI's re-encode flags (stoker pack videofolder --help)
        c.add_argument("--video-gop", type=int, default=0,
                       help="re-encode every video to a keyframe every N frames at a constant frame rate")
        c.add_argument("--max-side", type=int, default=0, help="with --video-gop: longer side at most S pixels")
        c.add_argument("--fps", type=float, default=0, help="with --video-gop: output frame rate (default: the source's)")
        c.add_argument("--video-crf", type=int, default=None, help="with --video-gop: libx264 quality (default 23)")
        c.add_argument("--video-encoder", choices=("libx264", "mpeg4"), default=None,
                       help="with --video-gop: libx264 (default) or mpeg4")

    c = sub.add_parser("imagefolder", help="an ImageFolder tree")
    c.add_argument("src")
    c.add_argument("out")
    c.add_argument("--fast-crop", action="store_true")
    c.add_argument("--baseline", action="store_true")
    c.add_argument("--skip-bad", action="store_true")
    c.add_argument("--no-check", action="store_true")
    common(c)
    c = sub.add_parser("videofolder", help="a tree of videos by class (SRC/<class>/<video>)")
    c.add_argument("src")
    c.add_argument("out")
    c.add_argument("--skip-bad", action="store_true")
    c.add_argument("--no-check", action="store_true")
    video(c)
    common(c)
    c = sub.add_parser("wds", help="WebDataset tars")
    c.add_argument("paths", nargs="+", metavar="TAR... OUT")
    c.add_argument("--fast-crop", action="store_true")
    c.add_argument("--skip-bad", action="store_true")
    c.add_argument("--skip-incomplete", action="store_true")
    c.add_argument("--no-check", action="store_true")
    video(c)
    common(c)
    c = sub.add_parser("tokens", help="a flat token file or a Megatron .bin/.idx pair")
    c.add_argument("file")
    c.add_argument("out")
    c.add_argument("--seq-len", type=int, required=True)
    c.add_argument("--dtype", default=None)
    c.add_argument("--zstd", type=int, default=0)
    c.add_argument("--rows-per-record", type=int, default=0)
    c.add_argument("--eos", type=int, default=None)
    common(c)
    c = sub.add_parser("text", help="text files / JSON Lines tokenised into token rows")
    c.add_argument("paths", nargs="+", metavar="SRC... OUT")
    c.add_argument("--tokenizer", required=True)
    c.add_argument("--seq-len", type=int, required=True)
    c.add_argument("--pattern", default="")
    c.add_argument("--bos", default=None)
    c.add_argument("--eos", default=None)
    c.add_argument("--jsonl-key", default="text")
    c.add_argument("--zstd", type=int, default=0)
    common(c)
    c = sub.add_parser("samples", help="JSON Lines of token lists, one record per sample")
    c.add_argument("paths", nargs="+", metavar="SRC... OUT")
    c.add_argument("--tokens-key", default="tokens")
    c.add_argument("--mask-key", default=None)
    c.add_argument("--dtype", default="int32")
    c.add_argument("--zstd", type=int, default=0)
    common(c)
    return p


def _video_reencode(a):
    """The packer's video_reencode from the re-encode flags: None without --video-gop."""
    given = {"max_side": a.max_side or None, "fps": a.fps or None, "crf": a.video_crf, "encoder": a.video_encoder}
    given = {k: v for k, v in given.items() if v is not None}
    if not a.video_gop:
        if given:
            flags = ", ".join("--" + {"crf": "video-crf", "encoder": "video-encoder"}.get(k, k.replace("_", "-"))
                              for k in given)
            raise SystemExit(f"stoker.pack {a.kind}: {flags} given without --video-gop (they set its re-encode)")
        return None
    return {"gop": a.video_gop, **given}


def pack_part(a, part):
    """Packs part `part` ("I/N") as the parsed arguments `a` say; returns the summary dict."""
    kw = dict(shard_size=a.shard_size, threads=a.threads, align=a.align, part=part)
    if a.kind == "imagefolder":
        return _stoker.pack_imagefolder(a.src, a.out, fast_crop=a.fast_crop, baseline=a.baseline,
                                        skip_bad=a.skip_bad, check=not a.no_check, **kw)
    if a.kind == "videofolder":
        return _stoker.pack_videofolder(a.src, a.out, skip_bad=a.skip_bad, check=not a.no_check,
                                        video_reencode=_video_reencode(a), **kw)
    if a.kind in ("text", "samples"):
        if len(a.paths) < 2:
            raise SystemExit(f"stoker.pack {a.kind}: give SRC... OUT")
        if a.kind == "text":
            return _stoker.pack_text(a.paths[:-1], a.paths[-1], tokenizer=a.tokenizer, seq_len=a.seq_len,
                                     pattern=a.pattern, bos=a.bos, eos=a.eos, jsonl_key=a.jsonl_key, zstd=a.zstd,
                                     **kw)
        return _stoker.pack_samples(a.paths[:-1], a.paths[-1], tokens_key=a.tokens_key, mask_key=a.mask_key,
                                    dtype=a.dtype, zstd=a.zstd, **kw)
    if a.kind == "wds":
        if len(a.paths) < 2:
            raise SystemExit("stoker.pack wds: give TAR... OUT")
        return _stoker.pack_wds(a.paths[:-1], a.paths[-1], fast_crop=a.fast_crop, skip_bad=a.skip_bad,
                                skip_incomplete=a.skip_incomplete, check=not a.no_check,
                                video_reencode=_video_reencode(a), **kw)
    return _stoker.pack_tokens(a.file, a.out, dtype=a.dtype, seq_len=a.seq_len, zstd=a.zstd,
                               rows_per_record=a.rows_per_record, eos=a.eos, **kw)


def main(argv=None):
    a = _parser().parse_args(argv)
    if a.kind in ("videofolder", "wds"):
        _video_reencode(a)  # flags that cannot be used stop every rank here, before the barrier
    out = a.paths[-1] if a.kind in ("wds", "text", "samples") else a.out
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    dist = None
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
    error = None
    try:
        s = pack_part(a, f"{rank}/{world}")
        print(f"rank {rank}: packed part {rank}/{world}: {s['records']} records into {s['shards']} shards "
              f"in {s['seconds']:.2f} s", flush=True)
    except Exception as e:  # reported to every rank below, then raised
        error = f"rank {rank}: part {rank}/{world}: {type(e).__name__}: {e}"
    errors = [error]
    if dist is not None:
        errors = [None] * world
        dist.all_gather_object(errors, error)  # the barrier: every part has finished or failed
    failed = [e for e in errors if e]
    code = 0
    if failed:
        if rank == 0:
            print("stoker.pack: not committing; failed parts:\n  " + "\n  ".join(failed), file=sys.stderr)
        code = 1
    elif rank == 0:
        try:
            r = _stoker.commit(out, clean=a.clean)
            print(f"{r['outcome']} {out}: {r['parts']} parts, {r['shards']} shards, {r['records']} records",
                  flush=True)
            if r["strays"]:
                print(f"  {len(r['strays'])} stray files" + (" (removed)" if r["strays_removed"] else ""), flush=True)
            if r["outcome"] == "lost race":
                code = 3
        except Exception as e:
            print(f"stoker.pack: commit {out}: {type(e).__name__}: {e}", file=sys.stderr)
            code = 1
    if dist is not None:
        ok = [code == 0 or rank != 0]
        dist.broadcast_object_list(ok, src=0)  # every rank exits with rank 0's verdict
        dist.destroy_process_group()
        if not ok[0]:
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
