// stoker.Writer's native half: a DatasetWriter fed one record at a time from Python.
//
// The Python layer (python/stoker/writer.py) turns a sample dict into one buffer per
// field (checking types and shapes, naming the field); this binding builds the schema,
// checks each buffer against its field (size rules, UTF-8, image magic) and prepares
// and appends the record with the GIL released (zstd and CRC32C run outside Python).
#include <pybind11/stl.h>

#include "bindings.h"
#include "stoker/dataset.h"
#include "stoker/dataset_store.h"
#include "stoker/remote.h"
#include "stoker/error.h"
#include "stoker/media.h"
#include "stoker/pack.h"
#include "stoker/shard.h"

namespace stoker::python {
namespace {

class NativeWriter {
 public:
  NativeWriter(const std::string& out, const std::vector<py::tuple>& fields, uint64_t shard_size, int zstd,
               uint32_t align, bool overwrite, const std::string& part, bool append, const py::object& video_reencode)
      : reencode_(video_reencode_from(video_reencode)) {
    Schema schema;
    for (const py::tuple& t : fields) {
      if (t.size() != 4) throw py::value_error("field spec must be (name, kind, dtype, shape)");
      Field f;
      f.name = t[0].cast<std::string>();
      f.kind = field_kind_from_name(t[1].cast<std::string>());
      const std::string dtype = t[2].cast<std::string>();
      if (!dtype.empty()) f.dtype = dtype_from_name(dtype);
      f.shape = t[3].cast<std::vector<uint32_t>>();
      schema.fields.push_back(std::move(f));
    }
    DatasetWriterOptions o;
    if (!part.empty()) o.part = PartSpec::parse(part);
    o.append = append;
    o.store = open_dataset_store(out);
    o.shard_size = shard_size;
    o.shard.align = align;
    if (zstd > 0) {
      o.shard.compression = Compression::kZstd;
      o.shard.zstd_level = zstd;
    }
    writer_ = std::make_unique<DatasetWriter>(out, schema, o, overwrite);
    if (reencode_.enabled()) writer_->manifest().meta["video_reencode"] = reencode_.describe();
    schema_ = schema;
    out_ = out;
  }

  /// One buffer per field, in schema order.
  void add(const std::vector<py::buffer>& values) {
    if (!writer_) throw_error(ErrorCode::kInvalidArgument, "write to a closed Writer (" + out_ + ")");
    if (values.size() != schema_.fields.size())
      throw_error(ErrorCode::kInvalidArgument, "record has " + std::to_string(values.size()) + " fields, schema has " +
                                                   std::to_string(schema_.fields.size()));
    std::vector<py::buffer_info> infos;
    std::vector<std::span<const uint8_t>> spans;
    std::vector<std::vector<uint8_t>> media(values.size());  // video/audio values: index + file
    infos.reserve(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      infos.push_back(values[i].request());
      const py::buffer_info& b = infos.back();
      py::ssize_t expect = b.itemsize;
      for (py::ssize_t d = b.ndim - 1; d >= 0; --d) {
        if (b.shape[static_cast<size_t>(d)] > 1 && b.strides[static_cast<size_t>(d)] != expect)
          throw_error(ErrorCode::kInvalidArgument, "field '" + schema_.fields[i].name + "': buffer is not C-contiguous");
        expect *= b.shape[static_cast<size_t>(d)];
      }
      const size_t bytes = static_cast<size_t>(b.size) * static_cast<size_t>(b.itemsize);
      spans.emplace_back(static_cast<const uint8_t*>(b.ptr), bytes);
      const Field& f = schema_.fields[i];
      if (f.kind == FieldKind::kImage) {
        if (std::string why = image_header_problem(spans.back()); !why.empty())
          throw_error(ErrorCode::kInvalidArgument, "image field '" + f.name + "': " + why);
      }
    }
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < spans.size(); ++i) {
      const Field& f = schema_.fields[i];
      if (f.kind != FieldKind::kVideo && f.kind != FieldKind::kAudio) continue;
      try {
        media[i] = f.kind == FieldKind::kVideo && reencode_.enabled()
                       ? pack_reencoded_video_value(spans[i], reencode_)
                       : pack_media_value(spans[i], f.kind == FieldKind::kVideo ? MediaKind::kVideo : MediaKind::kAudio);
      } catch (const Error& e) {
        throw Error(e.code() == ErrorCode::kDataLoss ? ErrorCode::kInvalidArgument : e.code(),
                    std::string(field_kind_name(f.kind)) + " field '" + f.name + "': " + e.what());
      }
      spans[i] = media[i];
    }
    PreparedRecord rec = prepare_record(schema_, spans, writer_->options().shard);
    writer_->add_prepared(rec);
  }

  py::dict finish(const std::map<std::string, std::string>& meta, const std::vector<std::string>& class_names) {
    if (!writer_) throw_error(ErrorCode::kInvalidArgument, "Writer for " + out_ + " is already closed");
    for (const auto& [k, v] : meta) writer_->manifest().meta[k] = v;
    writer_->manifest().class_names = class_names;
    Manifest m;
    {
      py::gil_scoped_release nogil;
      m = writer_->finish();
    }
    py::dict d;
    d["records"] = writer_->records();
    d["shards"] = m.shards.size();
    d["bytes"] = m.total_bytes();
    d["raw_bytes"] = writer_->raw_bytes();
    d["stored_bytes"] = writer_->stored_bytes();
    d["schema"] = m.schema.to_string();
    writer_.reset();
    return d;
  }

  size_t discard() {
    if (!writer_) return 0;
    const size_t n = writer_->discard();
    writer_.reset();
    return n;
  }

  uint64_t records() const { return writer_ ? writer_->records() : 0; }

 private:
  VideoReencodeSpec reencode_;
  std::unique_ptr<DatasetWriter> writer_;
  Schema schema_;
  std::string out_;
};

}  // namespace

void init_writer(py::module_& m) {
  py::class_<NativeWriter>(m, "_NativeWriter")
      .def(py::init<const std::string&, const std::vector<py::tuple>&, uint64_t, int, uint32_t, bool,
                    const std::string&, bool, const py::object&>(),
           py::arg("out"), py::arg("fields"), py::arg("shard_size"), py::arg("zstd"), py::arg("align"),
           py::arg("overwrite"), py::arg("part") = "", py::arg("append") = false,
           py::arg("video_reencode") = py::none())
      .def("add", &NativeWriter::add, py::arg("values"))
      .def("finish", &NativeWriter::finish, py::arg("meta"), py::arg("class_names"))
      .def("discard", &NativeWriter::discard)
      .def_property_readonly("records", &NativeWriter::records);
}

}  // namespace stoker::python
