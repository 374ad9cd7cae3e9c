// Packers from Python: the functions of include/stoker/pack.h, GIL released while they
// run, summaries returned as dicts.
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <thread>

#include "bindings.h"
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

}  // namespace

void init_pack(py::module_& m) {
  m.def(
      "pack_imagefolder",
      [](const std::string& src, const std::string& out, uint64_t shard_size, uint32_t align, int threads,
         bool skip_bad, bool overwrite, bool progress, bool baseline, bool fast_crop, uint64_t max_file_bytes) {
        ImageFolderPackOptions o;
        set_common(o, shard_size, align, threads, skip_bad, overwrite, progress);
        o.baseline = baseline;
        o.fast_crop = fast_crop;
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
      py::arg("max_file_bytes") = ImageFolderPackOptions{}.max_file_bytes);

  m.def(
      "pack_tokens",
      [](const std::string& file, const std::string& out, const std::optional<std::string>& dtype, uint32_t seq_len,
         uint32_t rows_per_record, int zstd, uint64_t shard_size, uint32_t align, int threads, bool overwrite,
         bool progress, std::optional<int64_t> eos) {
        TokensPackOptions o;
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
      py::arg("eos") = py::none());

  m.def(
      "pack_wds",
      [](const std::vector<std::string>& tars, const std::string& out, uint64_t shard_size, uint32_t align,
         int threads, bool skip_bad, bool skip_incomplete, bool overwrite, bool progress,
         const std::vector<std::string>& class_names) {
        WdsPackOptions o;
        set_common(o, shard_size, align, threads, skip_bad, overwrite, progress);
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
      py::arg("class_names") = std::vector<std::string>{},
      "Packs WebDataset tars (plain or compressed): one field per member extension, plus __key__.");

  m.def(
      "extract",
      [](const std::string& dataset, const std::string& out, int threads) {
        ExtractOptions o;
        o.threads = threads;
        PackSummary s;
        {
          py::gil_scoped_release nogil;
          s = extract_dataset(dataset, out, o);
        }
        return to_dict(s);
      },
      py::arg("dataset"), py::arg("out"), py::kw_only(), py::arg("threads") = 0,
      "Writes a dataset's records back out as files, under their __key__ names.");

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
