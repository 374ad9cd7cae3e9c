// Packers from Python: the functions of include/stoker/pack.h, GIL released while they
// run, summaries returned as dicts.
#include <map>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <thread>

#include "bindings.h"
#include "stoker/commit.h"
#include "stoker/remote.h"
#include "stoker/pack.h"
#include "stoker/shard.h"

namespace stoker::python {
namespace {

py::dict to_dict(const PackSummary& s) {
  py::dict d;
  d["records"] = s.records;
  d["shards"] = s.shards;
  d["bytes"] = s.bytes;
  d["raw_bytes"] = s.raw_bytes;
  d["stored_bytes"] = s.stored_bytes;
  d["input_bytes"] = s.input_bytes;
  d["rewritten"] = s.rewritten;
  d["skipped"] = s.skipped;
  d["tokens_dropped"] = s.tokens_dropped;
  d["notes"] = s.notes;
  d["seconds"] = s.seconds;
  return d;
}

void set_common(PackOptions& o, uint64_t shard_size, uint32_t align, int threads, bool skip_bad, bool overwrite,
                bool progress) {
  o.shard_size = shard_size;
  o.align = align;
  o.threads = threads;
  o.skip_bad = skip_bad;
  o.overwrite = overwrite;
  o.progress = progress;
}

// part: "I/N", or "" for a whole dataset.
void set_part(PackOptions& o, const std::string& part) {
  if (!part.empty()) o.part = PartSpec::parse(part);
}

void set_image(ImagePackOptions& o, bool fast_crop, bool check, bool exif_transpose) {
  o.fast_crop = fast_crop;
  o.check_decode = check;
  o.exif_transpose = exif_transpose;
}

// Runs a packer on a worker thread while this (the calling) thread keeps Python's
// signal handling alive: Ctrl-C sets the packer's cancel flag, so it stops between
// records and removes its partial output, and KeyboardInterrupt is raised here. Called
// with the GIL held.
PackSummary run_cancellable(const std::function<PackSummary(const std::atomic<bool>*)>& fn) {
  std::atomic<bool> cancel{false};
  std::promise<PackSummary> done;
  std::future<PackSummary> result = done.get_future();
  std::thread worker([&] {
    try {
      done.set_value(fn(&cancel));
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  bool interrupted = false;
  for (;;) {
    std::future_status st;
    {
      py::gil_scoped_release nogil;
      st = result.wait_for(std::chrono::milliseconds(100));
    }
    if (st == std::future_status::ready) break;
    if (PyErr_CheckSignals() != 0) {  // a handler raised (KeyboardInterrupt): stop the packer
      cancel.store(true);
      interrupted = true;
      break;
    }
  }
  {
    py::gil_scoped_release nogil;
    worker.join();
  }
  if (interrupted) {
    try {
      result.get();  // the packer's own kCancelled (or a result that raced the signal)
    } catch (...) {
    }
    throw py::error_already_set();
  }
  return result.get();
}

constexpr const char* kPackImageFolderDoc = R"(Packs an ImageFolder tree into a dataset; returns the summary as a dict.

src: root with one sub-directory per class (SRC/<class>/<...>/<image>); labels are the
    class indices in byte-wise order of the names, class names go to the manifest.
out: dataset directory to write. A dataset already there is refused unless
    overwrite=True; it then stays whole until the new one is complete.
Files are taken by extension, as torchvision's ImageFolder does (jpg jpeg png webp;
others such as .DS_Store are ignored and counted in "notes"); each image's format is
sniffed from its bytes. check=True (default) decodes every image's data once, so an
image the loader would fail on is refused now (or skipped and listed in "skipped"
with skip_bad=True); check=False checks headers only.
baseline: rewrite progressive JPEGs as baseline (lossless).
fast_crop: rewrite every JPEG losslessly with a restart-interval index, so training
    crops decode only the part they cover.
exif_transpose: turn JPEGs upright by their EXIF orientation, losslessly (as PIL's
    ImageOps.exif_transpose); without it pixels train as the camera stored them.
shard_size (bytes), align (1 or 4096), threads (0: every CPU allowed), progress,
max_file_bytes: as the CLI's options of the same names.
Ctrl-C stops the pack, removes what it wrote and raises KeyboardInterrupt. Errors
raise stoker.Error subclasses naming the file and the reason.)";

constexpr const char* kPackVideoFolderDoc = R"(Packs a tree of videos by class into a dataset; returns the summary as a dict.

src: root with one sub-directory per class (SRC/<class>/<...>/<video>: mp4, mkv, webm,
    mov, avi; other files are ignored and counted in "notes"); labels are the class
    indices in byte-wise order of the names. Records: __key__:text video:video label:int64.
out: dataset directory to write (overwrite=True replaces a dataset there, which stays
    whole until the new one is complete).
Each video is probed with libavformat and stored behind its keyframe index; check=True
(default) also decodes every frame, so a file the loader would fail on (a codec without
a decoder included) is refused now, naming it, or skipped with skip_bad=True.
video_reencode: None, or {"gop": N, "max_side": S, "fps": F, "crf": Q, "encoder": "libx264"|"mpeg4"}:
    re-encode every video to a keyframe every N frames at a constant frame rate, as the
    CLI's --video-gop, --max-side, --fps, --video-crf and --video-encoder.
shard_size (bytes), align (1 or 4096), threads (0: every CPU allowed), progress, part
("I/N": write part I of N, then stoker.commit): as the CLI's options of the same names.
Ctrl-C stops the pack, removes what it wrote and raises KeyboardInterrupt. A build
without libav raises stoker.UnavailableError.)";

constexpr const char* kPackTokensDoc = R"(Packs a token stream into a dataset of rows; returns the summary as a dict.

file: a flat little-endian token file (nanoGPT's train.bin) of `dtype`, or a
    Megatron-LM .bin/.idx pair (the index names its own dtype).
out: dataset directory to write (overwrite=True replaces a dataset there, which stays
    whole until the new one is complete).
seq_len: training sequence length N; each row holds N+1 tokens, rows overlap by one.
rows_per_record: rows per record (0: as many as fit in ~256 KiB). zstd: 0 stores raw,
    1..19 compresses each record.
eos: end-of-document token id of a flat file: stores document boundaries (for
    position_ids, loss_mask, doc_ids, cu_seqlens). An id that never occurs is an error.
The trailing tokens that make no full row are dropped and counted ("tokens_dropped").)";

constexpr const char* kPackWdsDoc = R"(Packs WebDataset tars (plain or compressed) into a dataset; returns the summary.

tars: the tar files, in order; out: dataset directory to write.
One field per member extension, plus __key__: jpg/jpeg (one field, "jpg"), png, webp:
image; cls: int64; txt/json: text; npy: array; anything else: bytes.
check=True (default) decodes every image once so that one the loader would fail on is
refused now; skip_bad=True skips (and lists in "skipped") bad samples and the rest of a
truncated tar instead; skip_incomplete=True skips samples lacking a member others have.
A pack that would write 0 records raises.
fast_crop: rewrite JPEGs losslessly for fast training crops (as pack_imagefolder).
exif_transpose: turn JPEGs upright by their EXIF orientation (as pack_imagefolder).
class_names: names stored in the manifest; labels must be below their count.
video_reencode: None, or {"gop": N, "max_side": S, "fps": F, "crf": Q, "encoder": "libx264"|"mpeg4"}:
re-encode video members to a keyframe every N frames at a constant frame rate (as `stoker pack wds
--video-gop N`; see stoker.reencode_video).
overwrite=True replaces a dataset at out, kept whole until the new one is complete.)";

constexpr const char* kPackTextDoc = R"(Tokenises text into a token dataset of rows with document boundaries; returns the summary.

inputs: .txt files (one document each), .jsonl/.ndjson files (one document per line, the
    string under jsonl_key), WebDataset tars (each .txt member), stoker datasets (each
    record's text field: text_field, or its one text field), or directories of files, in
    order; out: dataset directory.
tokenizer: a .tiktoken ranks file, a tokenizer.json or a SentencePiece .model;
    pattern / special_tokens for a .tiktoken file not named after a known encoding.
bos, eos: put around every document: an id or a token's text ("<|endoftext|>").
seq_len, rows_per_record, zstd: as pack_tokens. part: "I/N" packs part I of N (whole
documents; then stoker.commit). Errors name the file and line.)";

constexpr const char* kPackSamplesDoc = R"(Packs fine-tuning samples given as token lists into a dataset, one record each; returns the summary.

inputs: JSON Lines files (one sample per line: an object holding the keys) or
    directories of them, in order; out: dataset directory.
tokens_key: the key of each sample's token ids; mask_key: the key of its 0/1 loss mask
    (one per token), or None. dtype: uint16, uint32, int32 (default) or int64.
Read it with stoker.Loader(out, seq_len=N, ...) to pack the samples into rows. part:
"I/N" packs part I of N (whole lines; then stoker.commit). Errors name the file and line.)";

}  // namespace

void init_pack(py::module_& m) {
  m.def(
      "pack_text",
      [](const std::vector<std::string>& inputs, const std::string& out, const std::string& tokenizer,
         uint32_t seq_len, const std::string& pattern, const std::map<std::string, uint32_t>& special_tokens,
         const std::optional<std::string>& bos, const std::optional<std::string>& eos, const std::string& jsonl_key,
         const std::string& text_field, uint32_t rows_per_record, int zstd, uint64_t shard_size, uint32_t align, int threads, bool overwrite,
         bool progress, const std::string& part) {
        TextPackOptions o;
        set_common(o, shard_size, align, threads, false, overwrite, progress);
        set_part(o, part);
        o.tokenizer = tokenizer;
        o.tokenizer_options.pattern = pattern;
        o.tokenizer_options.special_tokens = special_tokens;
        o.bos = bos;
        o.eos = eos;
        o.jsonl_key = jsonl_key;
        o.text_field = text_field;
        o.seq_len = seq_len;
        o.rows_per_record = rows_per_record;
        o.zstd_level = zstd;
        PackSummary s = run_cancellable([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return pack_text(inputs, out, o);
        });
        return to_dict(s);
      },
      py::arg("inputs"), py::arg("out"), py::kw_only(), py::arg("tokenizer"), py::arg("seq_len") = 1024,
      py::arg("pattern") = "", py::arg("special_tokens") = std::map<std::string, uint32_t>{},
      py::arg("bos") = py::none(), py::arg("eos") = py::none(), py::arg("jsonl_key") = "text",
      py::arg("text_field") = "", py::arg("rows_per_record") = 0, py::arg("zstd") = 0, py::arg("shard_size") = PackOptions{}.shard_size,
      py::arg("align") = 1, py::arg("threads") = 0, py::arg("overwrite") = false, py::arg("progress") = false,
      py::arg("part") = "", kPackTextDoc);

  m.def(
      "pack_samples",
      [](const std::vector<std::string>& inputs, const std::string& out, const std::string& tokens_key,
         const std::optional<std::string>& mask_key, const std::string& dtype, int zstd, uint64_t shard_size,
         uint32_t align, int threads, bool overwrite, bool progress, const std::string& part) {
        SamplesPackOptions o;
        set_common(o, shard_size, align, threads, false, overwrite, progress);
        set_part(o, part);
        o.tokens_key = tokens_key;
        o.mask_key = mask_key.value_or("");
        o.dtype = dtype_from_name(dtype);
        o.zstd_level = zstd;
        PackSummary s = run_cancellable([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return pack_samples(inputs, out, o);
        });
        return to_dict(s);
      },
      py::arg("inputs"), py::arg("out"), py::kw_only(), py::arg("tokens_key") = "tokens",
      py::arg("mask_key") = py::none(), py::arg("dtype") = "int32", py::arg("zstd") = 0,
      py::arg("shard_size") = PackOptions{}.shard_size, py::arg("align") = 1, py::arg("threads") = 0,
      py::arg("overwrite") = false, py::arg("progress") = false, py::arg("part") = "", kPackSamplesDoc);

  m.def(
      "pack_imagefolder",
      [](const std::string& src, const std::string& out, uint64_t shard_size, uint32_t align, int threads,
         bool skip_bad, bool overwrite, bool progress, bool baseline, bool fast_crop, uint64_t max_file_bytes,
         bool check, bool exif_transpose, const std::string& part) {
        ImageFolderPackOptions o;
        set_part(o, part);
        set_common(o, shard_size, align, threads, skip_bad, overwrite, progress);
        set_image(o, fast_crop, check, exif_transpose);
        o.baseline = baseline;
        o.max_file_bytes = max_file_bytes;
        PackSummary s = run_cancellable([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return pack_imagefolder(src, out, o);
        });
        return to_dict(s);
      },
      py::arg("src"), py::arg("out"), py::kw_only(), py::arg("shard_size") = PackOptions{}.shard_size,
      py::arg("align") = 1, py::arg("threads") = 0, py::arg("skip_bad") = false, py::arg("overwrite") = false,
      py::arg("progress") = false, py::arg("baseline") = false, py::arg("fast_crop") = false,
      py::arg("max_file_bytes") = ImageFolderPackOptions{}.max_file_bytes, py::arg("check") = true,
      py::arg("exif_transpose") = false, py::arg("part") = "", kPackImageFolderDoc);

  m.def(
      "pack_videofolder",
      [](const std::string& src, const std::string& out, uint64_t shard_size, uint32_t align, int threads,
         bool skip_bad, bool overwrite, bool progress, bool check, const std::string& part,
         const py::object& video_reencode) {
        PackOptions o;
        set_part(o, part);
        o.video_reencode = video_reencode_from(video_reencode);
        set_common(o, shard_size, align, threads, skip_bad, overwrite, progress);
        o.check_decode = check;
        PackSummary s = run_cancellable([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return pack_videofolder(src, out, o);
        });
        return to_dict(s);
      },
      py::arg("src"), py::arg("out"), py::kw_only(), py::arg("shard_size") = PackOptions{}.shard_size,
      py::arg("align") = 1, py::arg("threads") = 0, py::arg("skip_bad") = false, py::arg("overwrite") = false,
      py::arg("progress") = false, py::arg("check") = true, py::arg("part") = "",
      py::arg("video_reencode") = py::none(), kPackVideoFolderDoc);

  m.def(
      "pack_tokens",
      [](const std::string& file, const std::string& out, const std::optional<std::string>& dtype, uint32_t seq_len,
         uint32_t rows_per_record, int zstd, uint64_t shard_size, uint32_t align, int threads, bool overwrite,
         bool progress, std::optional<int64_t> eos, const std::string& part) {
        TokensPackOptions o;
        set_part(o, part);
        o.eos = eos;
        set_common(o, shard_size, align, threads, false, overwrite, progress);
        // No default, as the CLI's --dtype has none: a uint32 file read as uint16 would
        // pack without a word as [4464, 1, 4465, 1, ...]. Unset, a flat file is refused
        // (naming dtype); a Megatron .idx names its own.
        o.dtype = !dtype || dtype->empty() || *dtype == "none" ? DType::kNone : dtype_from_name(*dtype);
        o.seq_len = seq_len;
        o.rows_per_record = rows_per_record;
        o.zstd_level = zstd;
        PackSummary s = run_cancellable([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return pack_tokens(file, out, o);
        });
        return to_dict(s);
      },
      py::arg("file"), py::arg("out"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("seq_len") = 1024,
      py::arg("rows_per_record") = 0, py::arg("zstd") = 0, py::arg("shard_size") = PackOptions{}.shard_size,
      py::arg("align") = 1, py::arg("threads") = 0, py::arg("overwrite") = false, py::arg("progress") = false,
      py::arg("eos") = py::none(), py::arg("part") = "",
      kPackTokensDoc);

  m.def(
      "pack_wds",
      [](const std::vector<std::string>& tars, const std::string& out, uint64_t shard_size, uint32_t align,
         int threads, bool skip_bad, bool skip_incomplete, bool overwrite, bool progress,
         const std::vector<std::string>& class_names, bool fast_crop, bool check, bool exif_transpose,
         const std::string& part, const py::object& video_reencode) {
        WdsPackOptions o;
        set_part(o, part);
        o.video_reencode = video_reencode_from(video_reencode);
        set_common(o, shard_size, align, threads, skip_bad, overwrite, progress);
        set_image(o, fast_crop, check, exif_transpose);
        o.skip_incomplete = skip_incomplete;
        o.class_names = class_names;
        PackSummary s = run_cancellable([&](const std::atomic<bool>* cancel) {
          o.cancel = cancel;
          return pack_wds(tars, out, o);
        });
        return to_dict(s);
      },
      py::arg("tars"), py::arg("out"), py::kw_only(), py::arg("shard_size") = PackOptions{}.shard_size,
      py::arg("align") = 1, py::arg("threads") = 0, py::arg("skip_bad") = false, py::arg("skip_incomplete") = false,
      py::arg("overwrite") = false, py::arg("progress") = false,
      py::arg("class_names") = std::vector<std::string>{}, py::arg("fast_crop") = false, py::arg("check") = true,
      py::arg("exif_transpose") = false, py::arg("part") = "", py::arg("video_reencode") = py::none(), kPackWdsDoc);

  m.def(
      "commit",
      [](const std::string& dir, bool clean) {
        CommitOptions o;
        o.clean = clean;
        CommitReport r;
        {
          py::gil_scoped_release nogil;
          r = commit_parts(*open_dataset_store(dir), o);
        }
        py::dict d;
        d["outcome"] = r.outcome == CommitReport::Outcome::kCommitted          ? "committed"
                       : r.outcome == CommitReport::Outcome::kAlreadyCommitted ? "already committed"
                                                                              : "lost race";
        d["parts"] = r.parts;
        d["shards"] = r.shards;
        d["records"] = r.records;
        d["bytes"] = r.bytes;
        d["strays"] = r.strays;
        d["strays_removed"] = r.strays_removed;
        d["seconds"] = r.seconds;
        return d;
      },
      py::arg("dir"), py::kw_only(), py::arg("clean") = false,
      R"(Publishes the MANIFEST of a dataset packed in parts (part="I/N" of the packers or
stoker.Writer) once all N parts are complete (stoker/commit.h): returns a dict with
"outcome" ("committed", "already committed" or "lost race": another commit published
first), parts, shards, records, bytes and "strays" (files no manifest names; removed
with clean=True). Raises naming every missing or incomplete part.)");

  m.def(
      "extract",
      [](const std::string& dataset, const std::string& out, int threads, bool skip_bad) {
        ExtractOptions o;
        o.threads = threads;
        o.skip_bad = skip_bad;
        PackSummary s;
        {
          py::gil_scoped_release nogil;
          s = extract_dataset(dataset, out, o);
        }
        return to_dict(s);
      },
      py::arg("dataset"), py::arg("out"), py::kw_only(), py::arg("threads") = 0, py::arg("skip_bad") = false,
      "Writes a dataset's records back out as files, under their __key__ names, into `out` (absent or empty;\n"
      "it appears only when complete). skip_bad=True skips records whose checksum fails (listed in\n"
      "\"skipped\") instead of raising.");

  m.def(
      "make_sample_imagefolder",
      [](const std::string& out, uint64_t images, uint32_t classes, uint64_t seed, int quality,
         double progressive_frac, int threads) {
        SampleImageFolderOptions o;
        o.images = images;
        o.classes = classes;
        o.seed = seed;
        o.quality = quality;
        o.progressive_frac = progressive_frac;
        o.threads = threads;
        PackSummary s;
        {
          py::gil_scoped_release nogil;
          s = make_sample_imagefolder(out, o);
        }
        return to_dict(s);
      },
      py::arg("out"), py::kw_only(), py::arg("images") = 1000, py::arg("classes") = 10, py::arg("seed") = 0,
      py::arg("quality") = 90, py::arg("progressive_frac") = SampleImageFolderOptions{}.progressive_frac,
      py::arg("threads") = 0);

  m.def(
      "make_sample_tokens",
      [](const std::string& path, uint64_t tokens, uint32_t vocab, const std::string& dtype, uint64_t seed) {
        SampleTokensOptions o;
        o.tokens = tokens;
        o.vocab = vocab;
        o.dtype = dtype_from_name(dtype);
        o.seed = seed;
        PackSummary s;
        {
          py::gil_scoped_release nogil;
          s = make_sample_tokens(path, o);
        }
        return to_dict(s);
      },
      py::arg("path"), py::kw_only(), py::arg("tokens") = 1 << 20, py::arg("vocab") = 50257,
      py::arg("dtype") = "uint16", py::arg("seed") = 0);
}

}  // namespace stoker::python
