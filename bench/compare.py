#!/usr/bin/env python3
"""Feed-rate comparison: stoker next to the feeders users run today, and the machine's limits.

Run by `stoker bench compare DATASET ...` (src/cli/bench_compare_cmd.cc), which passes its own
path as --stoker. In one run it measures:
  limits   raw read of the dataset through stoker's IO engine (`stoker bench io --json`) and
           the in-memory decode limit of stoker's decode code at each thread count
           (`stoker bench feed --json`: limit_samples_per_s);
  stoker   `stoker bench feed` at each thread count (images; tokens when --tokens is given);
  torch    torch.utils.data.DataLoader over the ImageFolder tree (--images) with PIL:
           RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor, as torchvision does
           them (torchvision is not required), num_workers = threads;
  videos   when DATASET's first decoded field is a video, or --videos is given (the
           videofolder DATASET was packed from): at each thread count, alternating A B A B
           (--rounds each), `stoker bench feed --field NAME=clip:FRAMES:STRIDE:SIZE` (--clip;
           feed and in-memory limit) and PyAV in a DataLoader with num_workers = threads
           decoding clips of the same frames and size from the files under --videos;
           clips/s, medians, stoker / PyAV and feed / limit (image rows are then run only
           when the first decoded field is an image);
  nanoGPT  get_batch() over the flat token file with np.memmap (as in nanoGPT's train.py);
  WebDataset, FFCV  when importable, else recorded as "not installed";
  fast-crop  with --fast-crop-dataset (the same images packed with `pack ... --fast-crop`):
           `stoker bench feed` on the plain dataset and on it, alternating A B A B (--rounds
           each), for the train and the eval transform at each thread count: the medians
           side by side and fast-crop / plain.
stoker's image rows take --transform and --field as `stoker bench feed` does (a multi-field
dataset: --field jpg=train:224 --field png=follow:jpg); the torch baseline, which reads the
ImageFolder's images only with the train transform, is then recorded as skipped.
Each measurement is bounded by --seconds. Writes compare.json, compare.md and compare.png
(samples/s against threads, with the limits drawn) into --out.

Uses only the standard library, numpy, torch, PIL, PyAV (videos) and matplotlib (Debian packages).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

from torch_dataloader import nanogpt_feed, parse_clip, pyav_feed, steady_rate, torch_feed, video_files  # beside this file

FEEDER_STOKER = "stoker"
FEEDER_TORCH = "torch DataLoader+PIL"
FEEDER_NANOGPT = "nanoGPT memmap get_batch"
FEEDER_PYAV = "PyAV DataLoader"
DECODED_KINDS = ("image", "video", "audio")  # fields a transform decodes (`stoker inspect --json` kinds)


def log(msg):
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def last_json_line(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            return json.loads(line)
    raise ValueError("no JSON object in output:\n" + text[-2000:])


def run_json(cmd, timeout):
    log(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-1000:]}")
    return last_json_line(p.stdout)


# ---- stoker ---------------------------------------------------------------------------------

def stoker_read_limit(stoker, dataset, seconds):
    j = run_json([stoker, "bench", "io", dataset, "--json", "--order", "shuffled"], timeout=120 + 10 * seconds)
    return {"samples_per_s": j["records_per_s"], "bytes_per_s": j["bytes_per_s"], "engine": j.get("engine", ""),
            "direct": j.get("direct", False), "records": j.get("records", 0)}


def stoker_feed(stoker, dataset, threads, seconds, batch, extra=(), limit_records=1000):
    # A small dataset is a short epoch: epochs repeat until the measurement's time is up
    # (--max-seconds ends the run), so every measurement lasts long enough for a verdict.
    cmd = [stoker, "bench", "feed", dataset, "--threads", str(threads), "--batch", str(batch), "--json",
           "--max-seconds", str(seconds), "--epochs", "10000", "--limit-seconds", str(max(1.0, seconds / 3)),
           "--limit-records", str(limit_records), *extra]
    return run_json(cmd, timeout=120 + 10 * seconds)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def fast_crop_rows(args, threads):
    """Plain and --fast-crop datasets of the same images, alternating, train and eval."""
    rows = []
    for transform in ("train", "eval"):
        for t in threads:
            row = {"transform": transform, "threads": t, "plain": [], "fast_crop": [], "plain_limit": [],
                   "fast_crop_limit": []}
            try:
                for _ in range(args.rounds):
                    for ds, key in ((args.dataset, "plain"), (args.fast_crop_dataset, "fast_crop")):
                        j = stoker_feed(args.stoker, ds, t, args.seconds, args.batch, ("--transform", transform))
                        row[key].append(j["samples_per_s"])
                        row[key + "_limit"].append(j["limit_samples_per_s"])
                a, b = median(row["plain"]), median(row["fast_crop"])
                row.update(plain_samples_per_s=a, fast_crop_samples_per_s=b, ratio=b / a if a else None,
                           plain_limit_samples_per_s=median(row["plain_limit"]),
                           fast_crop_limit_samples_per_s=median(row["fast_crop_limit"]))
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)
            rows.append(row)
    return rows


def decoded_fields(meta):
    """(kind of the first decoded field, name of the first video field) from `inspect --json`."""
    fields = meta.get("fields") or []
    first = next((f["kind"] for f in fields if f.get("kind") in DECODED_KINDS), None)
    return first, next((f["name"] for f in fields if f.get("kind") == "video"), None)


VIDEO_LIMIT_RECORDS = 64  # whole video files held in memory for the limit (MBs each)


def video_rows(args, threads, batch, field, ratio, have_torch):
    """stoker's clip feed and the PyAV DataLoader, alternating per round at each thread
    count: ([stoker row, PyAV row] per thread count, the in-memory limits); rates are medians."""
    frames, stride, size = args.clip
    clip = {"frames": frames, "stride": stride, "size": size}
    pyav_status, paths = None, []
    if not have_torch:
        pyav_status = "not installed (torch)"
    elif not importable("av"):
        pyav_status = "not installed (PyAV: python3-av)"
    elif not args.videos:
        pyav_status = "skipped (no --videos)"
    else:
        try:
            paths = video_files(args.videos)
        except Exception as e:  # noqa: BLE001
            pyav_status = f"skipped ({e})"
    rows, limits = [], []
    for t in threads:
        st = {"workload": "videos", "feeder": FEEDER_STOKER, "threads": t, "unit": "clips/s", "clip": clip,
              "rounds": [], "limit_rounds": [], "steady_rounds": []}
        av = {"workload": "videos", "feeder": FEEDER_PYAV, "threads": t, "unit": "clips/s", "clip": clip,
              "rounds": [], "steady_rounds": []}
        if pyav_status:
            av["status"] = pyav_status
        if field is None:
            st["error"] = f"{args.dataset} has no video field"
        for _ in range(args.rounds):
            if "error" not in st:
                try:
                    j = stoker_feed(args.stoker, args.dataset, t, args.seconds, batch,
                                    ("--field", f"{field}=clip:{frames}:{stride}:{size}"), VIDEO_LIMIT_RECORDS)
                    st["rounds"].append(j["samples_per_s"])
                    st["limit_rounds"].append(j["limit_samples_per_s"])
                    st["steady_rounds"].append(steady_rate(j["samples"], j["wall_s"], j.get("first_batch_s"), batch))
                    st.update(first_batch_s=j.get("first_batch_s"), bottleneck=j.get("bottleneck"),
                              evidence=(j.get("verdict") or {}).get("evidence"))
                except Exception as e:  # noqa: BLE001
                    st["error"] = str(e)
            if paths and "error" not in av:
                try:
                    log(f"PyAV DataLoader num_workers={t}")
                    r = pyav_feed(paths, frames, stride, size, t, args.seconds, batch)
                    av["rounds"].append(r["samples_per_s"])
                    av["steady_rounds"].append(r["steady_samples_per_s"])
                    av.update(first_batch_s=r["first_batch_s"], clip_shape=r["sample_shape"])
                except Exception as e:  # noqa: BLE001
                    av["error"] = f"{type(e).__name__}: {e}"
        lim = median(st["limit_rounds"])
        if lim is not None:
            limits.append({"threads": t, "samples_per_s": lim})
        for row in (st, av):
            if row["rounds"]:
                rate = median(row["rounds"])
                row.update(samples_per_s=rate, steady_samples_per_s=median([v for v in row["steady_rounds"] if v]),
                           ratio_to_limit=ratio(rate, lim))
        if st.get("samples_per_s") and av.get("samples_per_s"):
            st["stoker_per_pyav"] = st["samples_per_s"] / av["samples_per_s"]
            st["stoker_per_pyav_rounds"] = [a / b for a, b in zip(st["rounds"], av["rounds"])]
        rows += [st, av]
    return rows, limits


def stoker_inspect(stoker, dataset):
    try:
        return run_json([stoker, "inspect", dataset, "--json"], timeout=60)
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        log(f"inspect {dataset}: {e}")
        return {}


def find_tokens_bin(args, stoker, out):
    if args.tokens_bin:
        return args.tokens_bin
    sibling = args.tokens.rstrip("/") + ".bin"
    if os.path.isfile(sibling):
        return sibling
    ext = os.path.join(out, "tokens-extracted")
    if not os.path.isfile(os.path.join(ext, "tokens.bin")):
        log(f"extracting {args.tokens} -> {ext}")
        subprocess.run([stoker, "extract", args.tokens, ext], check=True, capture_output=True, timeout=600)
    return os.path.join(ext, "tokens.bin")


def token_params(meta):
    """(dtype, seq_len) of a token dataset from `stoker inspect --json`."""
    fields = meta.get("fields")
    if fields is None and isinstance(meta.get("schema"), dict):
        fields = meta["schema"].get("fields")
    for f in fields or []:
        if f.get("name") == "tokens":
            return f.get("dtype", "uint16"), int(f.get("seq_len", 1024))
    return "uint16", 1024


# ---- report ---------------------------------------------------------------------------------

def importable(name):
    try:
        __import__(name)
        return True
    except Exception:  # noqa: BLE001
        return False


def fmt_rate(v):
    return "—" if v is None else f"{v:,.0f}"


def fmt_clips(v):
    return "—" if v is None else f"{v:,.1f}"


def write_md(path, rep):
    L = []
    L.append("# Feed rates: stoker next to the feeders users run today")
    L.append("")
    m = rep["machine"]
    clip = rep.get("clip")
    clips = (f", or clips ({clip['frames']} frames {clip['stride']} apart, {clip['size']}x{clip['size']}; "
             f"batch {rep['video_batch']}, {rep['seconds_per_measurement']:g} s each)") if clip else ""
    L.append(f"Dataset `{rep['dataset']}`; {m['cpus']} CPUs; each image measurement is one epoch or "
             f"{rep['seconds_per_measurement']:g} s, whichever ends first (tokens: {rep['seconds_per_measurement'] / 2:g} s); "
             f"batch {rep['batch']} (tokens 32). Samples/s are images (224x224 train crops) or token rows{clips}.")
    L.append("")
    L.append("| limit | threads | samples/s |")
    L.append("|---|---|---|")
    lim = rep["limits"]
    r = lim.get("read")
    if r:
        L.append(f"| raw read (stoker bench io, {r['engine']}{' O_DIRECT' if r['direct'] else ''}, "
                 f"{r['bytes_per_s'] / 1e6:,.0f} MB/s) | — | {fmt_rate(r['samples_per_s'])} |")
    for d in lim.get("decode", []):
        L.append(f"| in-memory decode+transform (stoker's code, no IO) | {d['threads']} | {fmt_rate(d['samples_per_s'])} |")
    for d in lim.get("tokens_decode", []):
        L.append(f"| in-memory token unpack (rows) | {d['threads']} | {fmt_rate(d['samples_per_s'])} |")
    for d in lim.get("video_decode", []):
        L.append(f"| in-memory clip decode (stoker's code, no IO; clips) | {d['threads']} | "
                 f"{fmt_clips(d['samples_per_s'])} |")
    L.append("")
    L.append("| workload | feeder | threads | samples/s | after 1st batch | ratio to limit | note |")
    L.append("|---|---|---|---|---|---|---|")
    for x in rep["results"]:
        ratio = "—" if x.get("ratio_to_limit") is None else f"{x['ratio_to_limit']:.2f}"
        note = x.get("status", "")
        if x.get("bottleneck"):
            note = f"bottleneck: {x['bottleneck']}"
        if x.get("error"):
            note = "error: " + x["error"].splitlines()[0][:120]
        thr = "—" if x.get("threads") is None else str(x["threads"])
        fmt = fmt_clips if x["workload"] == "videos" else fmt_rate
        L.append(f"| {x['workload']} | {x['feeder']} | {thr} | {fmt(x.get('samples_per_s'))} | "
                 f"{fmt(x.get('steady_samples_per_s'))} | {ratio} | {note} |")
    L.append("")
    L.append("samples/s: over the whole measurement, start-up included; after 1st batch: start-up left out. "
             "Ratio to limit: samples/s over min(raw read, in-memory decode at the same thread count). "
             "Note: stoker's verdict (`bench feed --json` `bottleneck`). Videos: clips/s, medians of the rounds. "
             "Plot: compare.png.")
    if clip:
        L.append("")
        L.append("## Videos: stoker next to PyAV in a torch DataLoader")
        L.append("")
        L.append(f"`stoker bench feed --field NAME=clip:{clip['frames']}:{clip['stride']}:{clip['size']}` and PyAV "
                 f"decoding the same clips from `{rep['videos']}` (num_workers = threads), alternating, "
                 f"{rep['rounds']} round(s); medians. Target: stoker / PyAV >= 3.")
        L.append("")
        L.append("| threads | stoker clips/s | PyAV clips/s | stoker / PyAV | in-memory limit | stoker / limit |")
        L.append("|---|---|---|---|---|---|")
        lims = {d["threads"]: d["samples_per_s"] for d in rep["limits"].get("video_decode", [])}
        for st in (x for x in rep["results"] if x["workload"] == "videos" and x["feeder"] == FEEDER_STOKER):
            av = next((x for x in rep["results"] if x["workload"] == "videos" and x["feeder"] == FEEDER_PYAV
                       and x["threads"] == st["threads"]), {})
            vs = "—" if st.get("stoker_per_pyav") is None else f"**{st['stoker_per_pyav']:.2f}**"
            lim = lims.get(st["threads"])
            fl = "—" if not (lim and st.get("samples_per_s")) else f"{st['samples_per_s'] / lim:.3f}"
            pv = fmt_clips(av.get("samples_per_s")) if av.get("samples_per_s") else (
                av.get("status") or av.get("error", "—").splitlines()[0][:120])
            L.append(f"| {st['threads']} | {fmt_clips(st.get('samples_per_s'))} | {pv} | {vs} | {fmt_clips(lim)} | "
                     f"{fl} |")
    if rep.get("fast_crop_dataset"):
        L.append("")
        L.append(f"## `--fast-crop` vs plain: `{rep['fast_crop_dataset']}` next to `{rep['dataset']}`")
        L.append("")
        L.append(f"`stoker bench feed` on each, alternating plain / fast-crop, {rep['rounds']} round(s); medians.")
        L.append("")
        L.append("| transform | threads | plain samples/s | --fast-crop samples/s | fast-crop / plain | "
                 "plain limit | fast-crop limit |")
        L.append("|---|---|---|---|---|---|---|")
        for x in rep.get("fast_crop", []):
            if x.get("error"):
                L.append(f"| {x['transform']} | {x['threads']} | error: {x['error'].splitlines()[0][:120]} | | | | |")
                continue
            ratio = "—" if x.get("ratio") is None else f"**{x['ratio']:.2f}**"
            L.append(f"| {x['transform']} | {x['threads']} | {fmt_rate(x['plain_samples_per_s'])} | "
                     f"{fmt_rate(x['fast_crop_samples_per_s'])} | {ratio} | "
                     f"{fmt_rate(x['plain_limit_samples_per_s'])} | {fmt_rate(x['fast_crop_limit_samples_per_s'])} |")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def write_png(path, rep):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    workloads = [w for w in ("images", "videos", "tokens")
                 if any(r["workload"] == w and r.get("samples_per_s") for r in rep["results"])]
    if not workloads:
        workloads = ["images"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(6.5 * len(workloads), 4.5), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        feeders = sorted({r["feeder"] for r in rep["results"] if r["workload"] == w and r.get("samples_per_s")},
                         key=lambda f: (f != FEEDER_STOKER, f))
        colors = {FEEDER_STOKER: "tab:blue", FEEDER_TORCH: "tab:orange", FEEDER_NANOGPT: "tab:green",
                  FEEDER_PYAV: "tab:purple"}
        for fd in feeders:
            pts = sorted((r["threads"], r["samples_per_s"]) for r in rep["results"]
                         if r["workload"] == w and r["feeder"] == fd and r.get("samples_per_s"))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fd, color=colors.get(fd))
        key = {"images": "decode", "videos": "video_decode"}.get(w, "tokens_decode")
        dl = sorted((d["threads"], d["samples_per_s"]) for d in rep["limits"].get(key, []))
        if dl:
            ax.plot([p[0] for p in dl], [p[1] for p in dl], "k--", marker="x", markersize=9,
                    label="in-memory decode limit (stoker code, no IO)")
        ax.set_xticks(rep["threads"])
        ax.set_xlim(min(rep["threads"]) - 0.5, max(rep["threads"]) + 0.5)
        rd = rep["limits"].get("read")
        if w != "tokens" and rd and rd.get("samples_per_s"):
            ax.axhline(rd["samples_per_s"], color="tab:red", linestyle=":",
                       label=f"raw read limit ({rd['samples_per_s']:,.0f}/s)")
        ax.set_title(f"{w}: feed rate vs threads")
        ax.set_xlabel("threads (decode threads / DataLoader workers)")
        ax.set_ylabel({"images": "samples/s", "videos": "clips/s"}.get(w, "rows/s"))
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="a stoker dataset of images, or of videos (its first decoded field a video)")
    ap.add_argument("--stoker", default="stoker")
    ap.add_argument("--images", help="the ImageFolder tree the dataset was packed from (torch baseline)")
    ap.add_argument("--tokens", help="a stoker token dataset")
    ap.add_argument("--tokens-bin", help="the flat token file (nanoGPT); default: TOKENS.bin beside --tokens, "
                    "else extracted from --tokens")
    ap.add_argument("--threads", help="comma-separated thread counts (default 1,2, capped at the CPU count)")
    ap.add_argument("--seconds", type=float, default=8.0, help="time bound of each measurement")
    ap.add_argument("--batch", type=int, help="batch size (default 64 images, 8 clips; tokens: 32)")
    ap.add_argument("--out", default="compare")
    ap.add_argument("--transform", default="train", choices=("train", "eval", "none"),
                    help="stoker's image rows: the first image field's transform")
    ap.add_argument("--field", action="append", default=[],
                    help="stoker's image rows: a field's transform, as `stoker bench feed --field` (repeatable)")
    ap.add_argument("--fast-crop-dataset", help="the same images packed with --fast-crop: measured beside DATASET")
    ap.add_argument("--videos", help="the videofolder DATASET was packed from (PyAV baseline); implies the video rows")
    ap.add_argument("--clip", default="16:2:112", type=parse_clip,
                    help="the video rows' clips: FRAMES:STRIDE:SIZE (default 16:2:112)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="alternating rounds of the --fast-crop and of the video comparisons")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.batch is not None and args.batch < 1:
        ap.error("--batch must be at least 1")

    os.makedirs(args.out, exist_ok=True)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if args.threads:
        threads = sorted({max(1, int(t)) for t in args.threads.split(",") if t.strip()})
    else:
        threads = [1, 2]
    threads = sorted({min(t, cpus) for t in threads})
    t_start = time.perf_counter()
    # The video rows when DATASET's first decoded field is a video or --videos is given;
    # the image rows unless DATASET is videos (an unreadable schema: images, as ever).
    meta = stoker_inspect(args.stoker, args.dataset)
    first_kind, video_field = decoded_fields(meta)
    run_videos = first_kind == "video" or bool(args.videos)
    run_images = first_kind == "image" or (first_kind != "video" and not args.videos)
    video_batch = args.batch or 8
    args.batch = args.batch or 64
    rep = {"dataset": args.dataset, "images": args.images, "tokens": args.tokens, "batch": args.batch,
           "videos": args.videos, "video_batch": video_batch,
           "clip": dict(zip(("frames", "stride", "size"), args.clip)) if run_videos else None,
           "threads": threads, "seconds_per_measurement": args.seconds, "transform": args.transform,
           "fields": args.field, "fast_crop_dataset": args.fast_crop_dataset, "rounds": args.rounds,
           "machine": {"cpus": cpus, "python": platform.python_version(), "platform": platform.platform()},
           "limits": {"read": None, "decode": [], "tokens_decode": [], "video_decode": []}, "results": []}
    try:
        import torch
        rep["machine"]["torch"] = torch.__version__
        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001
        rep["machine"]["torch"] = None

    # Limits: raw read.
    try:
        rep["limits"]["read"] = stoker_read_limit(args.stoker, args.dataset, args.seconds)
    except Exception as e:  # noqa: BLE001
        log(f"read limit: {e}")
        rep["limits"]["read_error"] = str(e)

    def ratio(rate, limit):
        lims = [v for v in (limit, (rep["limits"]["read"] or {}).get("samples_per_s")) if v]
        return rate / min(lims) if lims and rate is not None else None

    # stoker, images (also gives the in-memory decode limit per thread count).
    for t in (threads if run_images else []):
        row = {"workload": "images", "feeder": FEEDER_STOKER, "threads": t}
        try:
            extra = ["--transform", args.transform]
            for f in args.field:
                extra += ["--field", f]
            j = stoker_feed(args.stoker, args.dataset, t, args.seconds, args.batch, extra)
            row["epochs"] = j.get("epochs")
            rep["limits"]["decode"].append({"threads": t, "samples_per_s": j["limit_samples_per_s"]})
            row.update(samples_per_s=j["samples_per_s"], samples=j["samples"], wall_s=j["wall_s"],
                       first_batch_s=j.get("first_batch_s"),
                       steady_samples_per_s=steady_rate(j["samples"], j["wall_s"], j.get("first_batch_s"), args.batch),
                       bottleneck=j.get("bottleneck"), evidence=(j.get("verdict") or {}).get("evidence"),
                       ratio_to_limit=ratio(j["samples_per_s"], j["limit_samples_per_s"]))
        except Exception as e:  # noqa: BLE001
            row["error"] = str(e)
        rep["results"].append(row)

    # torch DataLoader + PIL over the ImageFolder tree.
    dec_limit = {d["threads"]: d["samples_per_s"] for d in rep["limits"]["decode"]}
    for t in (threads if run_images else []):
        row = {"workload": "images", "feeder": FEEDER_TORCH, "threads": t}
        if rep["machine"]["torch"] is None:
            row.update(status="not installed (torch)")
        elif not args.images:
            row.update(status="skipped (no --images)")
        elif args.transform != "train" or args.field:
            row.update(status="skipped (the torch baseline is images with the train transform only)")
        else:
            try:
                log(f"torch DataLoader num_workers={t}")
                r = torch_feed(args.images, t, args.seconds, args.batch)
                row.update(r, ratio_to_limit=ratio(r["samples_per_s"], dec_limit.get(t)))
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"
        rep["results"].append(row)

    for mod, name in (("webdataset", "WebDataset"), ("ffcv", "FFCV")) if run_images else ():
        row = {"workload": "images", "feeder": name, "threads": None}
        row["status"] = "importable, not measured" if importable(mod) else "not installed"
        rep["results"].append(row)

    if args.fast_crop_dataset and run_images:
        rep["fast_crop"] = fast_crop_rows(args, threads)
    elif args.fast_crop_dataset:
        log("--fast-crop-dataset: not measured (DATASET is videos)")

    # Videos: stoker's clip feed vs PyAV in a DataLoader, alternating.
    if run_videos:
        field = video_field or (None if meta else "video")  # no schema read: videofolder's field
        rows, limits = video_rows(args, threads, video_batch, field, ratio, rep["machine"]["torch"] is not None)
        rep["results"] += rows
        rep["limits"]["video_decode"] = limits

    # Tokens: stoker vs nanoGPT's memmap get_batch.
    if args.tokens:
        meta = stoker_inspect(args.stoker, args.tokens)
        tdtype, seq_len = token_params(meta)
        tok_batch = 32
        for t in threads:
            row = {"workload": "tokens", "feeder": FEEDER_STOKER, "threads": t}
            try:
                j = stoker_feed(args.stoker, args.tokens, t, args.seconds / 2, tok_batch)
                row["epochs"] = j.get("epochs")
                rep["limits"]["tokens_decode"].append({"threads": t, "samples_per_s": j["limit_samples_per_s"]})
                row.update(samples_per_s=j["samples_per_s"], samples=j["samples"], wall_s=j["wall_s"],
                           first_batch_s=j.get("first_batch_s"),
                           steady_samples_per_s=steady_rate(j["samples"], j["wall_s"], j.get("first_batch_s"),
                                                            tok_batch),
                           bottleneck=j.get("bottleneck"), evidence=(j.get("verdict") or {}).get("evidence"),
                           ratio_to_limit=(j["samples_per_s"] / j["limit_samples_per_s"]
                                           if j.get("limit_samples_per_s") else None))
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)
            rep["results"].append(row)
        row = {"workload": "tokens", "feeder": FEEDER_NANOGPT, "threads": 1, "seq_len": seq_len, "dtype": tdtype}
        if rep["machine"]["torch"] is None:
            row["status"] = "not installed (torch)"
        else:
            try:
                tb = find_tokens_bin(args, args.stoker, args.out)
                row["tokens_bin"] = tb
                r = nanogpt_feed(tb, tdtype, seq_len, tok_batch, args.seconds / 2)
                lim = {d["threads"]: d["samples_per_s"] for d in rep["limits"]["tokens_decode"]}.get(1)
                row.update(r, ratio_to_limit=r["samples_per_s"] / lim if lim else None)
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"
        rep["results"].append(row)

    rep["total_s"] = time.perf_counter() - t_start
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(rep, f, indent=1)
    write_md(os.path.join(args.out, "compare.md"), rep)
    try:
        write_png(os.path.join(args.out, "compare.png"), rep)
    except Exception as e:  # noqa: BLE001
        log(f"compare.png not written: {type(e).__name__}: {e}")
        return 1
    log(f"wrote {args.out}/compare.json, compare.md, compare.png in {rep['total_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
