// _stoker.LoaderOptions and _stoker.FieldTransform: the options of a Python Loader,
// set by python/stoker/loader.py (which checks types and names the parameter) and read
// by bind_loader.cc. Enumerations go by their names ("u8_hwc", "shuffled", ...).
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "bindings.h"
#include "loader_options.h"
#include "stoker/buckets.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/order.h"
// The one internal header of the binding: the library's name tables (header-only
// templates, nothing linked), so the names Python accepts for pixel_format and
// token_dtype are parsed, and refused with the list of choices, as the library's are.
#include "util/enum_names.h"

namespace stoker::python {
namespace {

constexpr internal::EnumName<PixelFormat> kPixelFormats[] = {
    {PixelFormat::kU8HWC, "u8_hwc"},   {PixelFormat::kU8CHW, "u8_chw"},   {PixelFormat::kF32CHW, "f32_chw"},
    {PixelFormat::kF16CHW, "f16_chw"}, {PixelFormat::kF32HWC, "f32_hwc"}, {PixelFormat::kF16HWC, "f16_hwc"},
};

// The token types a Loader converts to (elem_type_name's names; "stored" is handled apart).
constexpr internal::EnumName<ElemType> kTokenTypes[] = {
    {ElemType::kUint16, "uint16"}, {ElemType::kUint32, "uint32"}, {ElemType::kInt32, "int32"}, {ElemType::kInt64, "int64"}};

std::vector<std::pair<int, int>> bucket_pairs(const std::vector<BucketSize>& sizes) {
  std::vector<std::pair<int, int>> out;
  for (const BucketSize& b : sizes) out.emplace_back(b.height, b.width);
  return out;
}

}  // namespace

void init_loader_options(py::module_& m) {
  m.def(
      "resolve_buckets",
      [](const std::vector<std::pair<int, int>>& sizes, uint64_t pixels, int step, double max_ratio) {
        BucketOptions o;
        for (const auto& [h, w] : sizes) o.sizes.push_back(BucketSize{h, w});
        o.pixels = pixels;
        o.step = step;
        o.max_ratio = max_ratio;
        return bucket_pairs(resolve_buckets(o));
      },
      py::arg("sizes"), py::arg("pixels"), py::arg("step"), py::arg("max_ratio"),
      "The bucket list (h, w) of LoaderOptions::buckets, sorted tallest first (stoker/buckets.h).");
  py::class_<FieldTransform> ft(m, "FieldTransform", "How one field becomes part of a batch (see include/stoker/loader.h).");
  py::enum_<FieldTransform::Kind>(ft, "Kind")
      .value("RANDOM_RESIZED_CROP", FieldTransform::Kind::kRandomResizedCrop)
      .value("CENTER_CROP", FieldTransform::Kind::kCenterCrop)
      .value("FOLLOW", FieldTransform::Kind::kFollow)
      .value("AS_STORED", FieldTransform::Kind::kAsStored)
      .value("VIDEO_CLIP", FieldTransform::Kind::kVideoClip)
      .value("AUDIO_CLIP", FieldTransform::Kind::kAudioClip);
  ft.def(py::init<>())
      .def_readwrite("kind", &FieldTransform::kind)
      .def_readwrite("size", &FieldTransform::size)
      .def_readwrite("scale_min", &FieldTransform::scale_min)
      .def_readwrite("scale_max", &FieldTransform::scale_max)
      .def_readwrite("ratio_min", &FieldTransform::ratio_min)
      .def_readwrite("ratio_max", &FieldTransform::ratio_max)
      .def_readwrite("flip_prob", &FieldTransform::flip_prob)
      .def_readwrite("resize", &FieldTransform::resize)
      .def_readwrite("follow", &FieldTransform::follow)
      .def_property(
          "interpolation",
          [](const FieldTransform& f) { return std::string(f.interpolation == Interpolation::kNearest ? "nearest" : "antialiased"); },
          [](FieldTransform& f, const std::string& v) {
            if (v == "nearest") f.interpolation = Interpolation::kNearest;
            else if (v == "antialiased" || v == "bilinear") f.interpolation = Interpolation::kAntialiased;
            else throw_error(ErrorCode::kInvalidArgument, "interpolation must be 'nearest' or 'antialiased', got '" + v + "'");
          })
      .def_readwrite("channels", &FieldTransform::channels)
      .def_readwrite("video", &FieldTransform::video)
      .def_readwrite("audio", &FieldTransform::audio);

  py::class_<PyLoaderOptions> o(m, "LoaderOptions", "Options of a Loader (see include/stoker/loader.h).");
  o.def(py::init<>())
      .def_property(
          "cache_dir", [](const PyLoaderOptions& x) { return x.o.cache_dir; },
          [](PyLoaderOptions& x, std::string v) { x.o.cache_dir = std::move(v); })
      .def_property(
          "cache_limit", [](const PyLoaderOptions& x) { return x.o.cache_limit; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.cache_limit = v; })
      .def_property(
          "cache_prefetch", [](const PyLoaderOptions& x) { return x.o.cache_prefetch; },
          [](PyLoaderOptions& x, unsigned v) { x.o.cache_prefetch = v; })
      .def_property(
          "remote_reads", [](const PyLoaderOptions& x) { return std::string(remote_reads_name(x.o.remote_reads)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.remote_reads = remote_reads_from_name(v); })
      .def_property(
          "remote_connections", [](const PyLoaderOptions& x) { return x.o.remote.connections; },
          [](PyLoaderOptions& x, unsigned v) { x.o.remote.connections = v; })
      .def_property(
          "remote_part_bytes", [](const PyLoaderOptions& x) { return x.o.remote.part_bytes; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.remote.part_bytes = v; })
      .def_property(
          "remote_timeout",
          [](const PyLoaderOptions& x) { return std::chrono::duration<double>(x.o.remote.timeout).count(); },
          [](PyLoaderOptions& x, double v) {
            x.o.remote.timeout = std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
          })
      .def_property(
          "remote_profile", [](const PyLoaderOptions& x) { return x.o.remote.aws_profile; },
          [](PyLoaderOptions& x, std::string v) { x.o.remote.aws_profile = std::move(v); })
      .def_property(
          "sources", [](const PyLoaderOptions& x) { return x.o.sources; },
          [](PyLoaderOptions& x, const std::vector<std::string>& v) { x.o.sources = v; })
      .def_property(
          "source_fields", [](const PyLoaderOptions& x) { return x.o.source_fields; },
          [](PyLoaderOptions& x, const std::vector<std::map<std::string, std::string>>& v) { x.o.source_fields = v; })
      .def_property(
          "weights", [](const PyLoaderOptions& x) { return x.o.weights; },
          [](PyLoaderOptions& x, const std::vector<double>& v) { x.o.weights = v; })
      .def_property(
          "samples_per_epoch", [](const PyLoaderOptions& x) { return x.o.samples_per_epoch; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.samples_per_epoch = v; })
      .def_property(
          "position_ids", [](const PyLoaderOptions& x) { return x.o.position_ids; },
          [](PyLoaderOptions& x, bool v) { x.o.position_ids = v; })
      .def_property(
          "position_ids_from_row_start", [](const PyLoaderOptions& x) { return x.o.position_ids_from_row_start; },
          [](PyLoaderOptions& x, bool v) { x.o.position_ids_from_row_start = v; })
      .def_property(
          "loss_mask", [](const PyLoaderOptions& x) { return x.o.loss_mask; },
          [](PyLoaderOptions& x, bool v) { x.o.loss_mask = v; })
      .def_property(
          "doc_ids", [](const PyLoaderOptions& x) { return x.o.doc_ids; },
          [](PyLoaderOptions& x, bool v) { x.o.doc_ids = v; })
      .def_property(
          "cu_seqlens", [](const PyLoaderOptions& x) { return x.o.cu_seqlens; },
          [](PyLoaderOptions& x, bool v) { x.o.cu_seqlens = v; })
      .def_property(
          "seq_len", [](const PyLoaderOptions& x) { return x.o.seq_len; },
          [](PyLoaderOptions& x, uint32_t v) { x.o.seq_len = v; })
      .def_property(
          "max_tokens", [](const PyLoaderOptions& x) { return x.o.max_tokens; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.max_tokens = v; })
      .def_property(
          "pack_window", [](const PyLoaderOptions& x) { return x.o.pack_window; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.pack_window = v; })
      .def_property(
          "long_samples", [](const PyLoaderOptions& x) { return std::string(long_samples_name(x.o.long_samples)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.long_samples = long_samples_from_name(v); })
      .def_property(
          "tokenizer", [](const PyLoaderOptions& x) { return x.o.tokenizer; },
          [](PyLoaderOptions& x, const std::string& v) { x.o.tokenizer = v; })
      .def_property(
          "tokenizer_pattern", [](const PyLoaderOptions& x) { return x.o.tokenizer_options.pattern; },
          [](PyLoaderOptions& x, const std::string& v) { x.o.tokenizer_options.pattern = v; })
      .def_property(
          "tokenizer_special_tokens", [](const PyLoaderOptions& x) { return x.o.tokenizer_options.special_tokens; },
          [](PyLoaderOptions& x, const std::map<std::string, uint32_t>& v) { x.o.tokenizer_options.special_tokens = v; })
      .def_property(
          "text_field", [](const PyLoaderOptions& x) { return x.o.text_field; },
          [](PyLoaderOptions& x, const std::string& v) { x.o.text_field = v; })
      .def_property(
          "bos", [](const PyLoaderOptions& x) { return x.o.bos; },
          [](PyLoaderOptions& x, std::optional<uint32_t> v) { x.o.bos = v; })
      .def_property(
          "eos", [](const PyLoaderOptions& x) { return x.o.eos; },
          [](PyLoaderOptions& x, std::optional<uint32_t> v) { x.o.eos = v; })
      .def_property(
          "token_counts_dir", [](const PyLoaderOptions& x) { return x.o.token_counts_dir; },
          [](PyLoaderOptions& x, std::optional<std::string> v) { x.o.token_counts_dir = std::move(v); })
      .def_property(
          "pad_id", [](const PyLoaderOptions& x) { return x.o.pad_id; },
          [](PyLoaderOptions& x, int64_t v) { x.o.pad_id = v; })
      .def_property(
          "fields", [](const PyLoaderOptions& x) { return x.o.fields; },
          [](PyLoaderOptions& x, const std::map<std::string, FieldTransform>& v) { x.o.fields = v; })
      .def_property(
          "path", [](const PyLoaderOptions& x) { return x.o.path; },
          [](PyLoaderOptions& x, const std::string& v) { x.o.path = v; })
      .def_property(
          "batch_size", [](const PyLoaderOptions& x) { return x.o.batch_size; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.batch_size = v; })
      .def_property(
          "transform", [](const PyLoaderOptions& x) { return x.o.transform; },
          [](PyLoaderOptions& x, const ImageTransform& v) { x.o.transform = v; })
      .def_property(
          "untransformed_image_as_stored", [](const PyLoaderOptions& x) { return x.o.untransformed_image_as_stored; },
          [](PyLoaderOptions& x, bool v) { x.o.untransformed_image_as_stored = v; })
      .def_property(
          "pixel_format",
          [](const PyLoaderOptions& x) { return std::string(internal::enum_name(kPixelFormats, x.o.pixel_format, "?")); },
          [](PyLoaderOptions& x, const std::string& v) {
            x.o.pixel_format = internal::enum_from_name(kPixelFormats, v, "pixel_format");
          })
      .def_property(
          "mean", [](const PyLoaderOptions& x) { return std::vector<float>(x.o.mean, x.o.mean + 3); },
          [](PyLoaderOptions& x, const std::vector<float>& v) {
            if (v.size() != 3) throw_error(ErrorCode::kInvalidArgument, "mean needs 3 values");
            std::copy(v.begin(), v.end(), x.o.mean);
          })
      .def_property(
          "std", [](const PyLoaderOptions& x) { return std::vector<float>(x.o.std, x.o.std + 3); },
          [](PyLoaderOptions& x, const std::vector<float>& v) {
            if (v.size() != 3) throw_error(ErrorCode::kInvalidArgument, "std needs 3 values");
            std::copy(v.begin(), v.end(), x.o.std);
          })
      .def_property(
          "targets", [](const PyLoaderOptions& x) { return x.o.targets; },
          [](PyLoaderOptions& x, bool v) { x.o.targets = v; })
      .def_property(
          "token_dtype",
          [](const PyLoaderOptions& x) {
            return std::string(x.o.token_type_is_stored ? "stored" : internal::enum_name(kTokenTypes, x.o.token_type, "?"));
          },
          [](PyLoaderOptions& x, const std::string& v) {
            if (v == "stored") {
              x.o.token_type_is_stored = true;
            } else {
              x.o.token_type = internal::enum_from_name(kTokenTypes, v, "token_dtype");
              x.o.token_type_is_stored = false;
            }
          })
      .def_property(
          "order", [](const PyLoaderOptions& x) { return std::string(order_kind_name(x.o.order.kind)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.order.kind = parse_order_kind(v); })
      .def_property(
          "seed", [](const PyLoaderOptions& x) { return x.o.order.seed; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.order.seed = v; })
      .def_property(
          "chunk_size", [](const PyLoaderOptions& x) { return x.o.order.chunk_size; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.order.chunk_size = v; })
      .def_property(
          "window_chunks", [](const PyLoaderOptions& x) { return x.o.order.window_chunks; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.order.window_chunks = v; })
      .def_property(
          "buckets",  // [(h, w), ...]
          [](const PyLoaderOptions& x) { return bucket_pairs(x.o.buckets.sizes); },
          [](PyLoaderOptions& x, const std::vector<std::pair<int, int>>& v) {
            x.o.buckets.sizes.clear();
            for (const auto& [h, w] : v) x.o.buckets.sizes.push_back(BucketSize{h, w});
          })
      .def_property(
          "bucket_pixels", [](const PyLoaderOptions& x) { return x.o.buckets.pixels; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.buckets.pixels = v; })
      .def_property(
          "bucket_step", [](const PyLoaderOptions& x) { return x.o.buckets.step; },
          [](PyLoaderOptions& x, int v) { x.o.buckets.step = v; })
      .def_property(
          "bucket_max_ratio", [](const PyLoaderOptions& x) { return x.o.buckets.max_ratio; },
          [](PyLoaderOptions& x, double v) { x.o.buckets.max_ratio = v; })
      .def_property(
          "drop_last", [](const PyLoaderOptions& x) { return x.o.drop_last; },
          [](PyLoaderOptions& x, bool v) { x.o.drop_last = v; })
      .def_property(
          "rank", [](const PyLoaderOptions& x) { return x.o.rank; },
          [](PyLoaderOptions& x, int v) { x.o.rank = v; })
      .def_property(
          "world_size", [](const PyLoaderOptions& x) { return x.o.world_size; },
          [](PyLoaderOptions& x, int v) { x.o.world_size = v; })
      .def_property(
          "threads", [](const PyLoaderOptions& x) { return x.o.threads; },
          [](PyLoaderOptions& x, unsigned v) { x.o.threads = v; })
      .def_property(
          "memory_limit", [](const PyLoaderOptions& x) { return x.o.memory_limit; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.memory_limit = v; })
      .def_property(
          "reserve_cores",  // -1: unset (the default rule)
          [](const PyLoaderOptions& x) { return x.o.reserve_cores ? static_cast<int64_t>(*x.o.reserve_cores) : -1; },
          [](PyLoaderOptions& x, int64_t v) {
            if (v < 0) x.o.reserve_cores.reset();
            else x.o.reserve_cores = static_cast<unsigned>(v);
          })
      .def_property(
          "slots", [](const PyLoaderOptions& x) { return x.o.slots; },
          [](PyLoaderOptions& x, unsigned v) { x.o.slots = v; })
      .def_property(
          "metrics_port", [](const PyLoaderOptions& x) { return x.o.metrics_port; },
          [](PyLoaderOptions& x, unsigned v) { x.o.metrics_port = v; })
      .def_property(
          "grow_when_held", [](const PyLoaderOptions& x) { return x.o.grow_when_held; },
          [](PyLoaderOptions& x, bool v) { x.o.grow_when_held = v; })
      .def_property(
          "on_error", [](const PyLoaderOptions& x) { return std::string(on_error_name(x.o.on_error)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.on_error = on_error_from_name(v); })
      .def_property(
          "io_engine", [](const PyLoaderOptions& x) { return std::string(io_engine_kind_name(x.o.io.engine)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.io.engine = io_engine_kind_from_name(v); })
      .def_property(
          "io_direct", [](const PyLoaderOptions& x) { return x.o.io.direct; },
          [](PyLoaderOptions& x, bool v) { x.o.io.direct = v; })
      .def_property(
          "io_map_cached", [](const PyLoaderOptions& x) { return x.o.io.map_cached; },
          [](PyLoaderOptions& x, bool v) { x.o.io.map_cached = v; })
      .def_property(
          "io_queue_depth", [](const PyLoaderOptions& x) { return x.o.io.queue_depth; },
          [](PyLoaderOptions& x, unsigned v) { x.o.io.queue_depth = v; })
      .def_property(
          "io_limit_bytes_per_s", [](const PyLoaderOptions& x) { return x.o.io.limit_bytes_per_s; },
          [](PyLoaderOptions& x, double v) { x.o.io.limit_bytes_per_s = v; })
      .def_property(
          "io_read_latency_s", [](const PyLoaderOptions& x) { return x.o.io.read_latency_s; },
          [](PyLoaderOptions& x, double v) { x.o.io.read_latency_s = v; })
      .def_readwrite("stage", &PyLoaderOptions::stage)
      .def_readwrite("device", &PyLoaderOptions::device)
      .def_readwrite("device_slots", &PyLoaderOptions::device_slots)
      .def_readwrite("pin_memory", &PyLoaderOptions::pin_memory)
      .def_property(
          "max_skipped", [](const PyLoaderOptions& x) { return x.o.max_skipped; },
          [](PyLoaderOptions& x, std::optional<double> v) { x.o.max_skipped = v; })
      .def_property(
          "max_record_bytes", [](const PyLoaderOptions& x) { return x.o.max_record_bytes; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.max_record_bytes = v; })
      .def_property(
          "gpu_pci_bus_id", [](const PyLoaderOptions& x) { return x.o.gpu_pci_bus_id; },
          [](PyLoaderOptions& x, std::optional<std::string> v) { x.o.gpu_pci_bus_id = std::move(v); });
}

}  // namespace stoker::python
