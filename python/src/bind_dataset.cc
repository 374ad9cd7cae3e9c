// Dataset inspection from Python: the manifest, one record's fields, where a record's
// stored bytes live. Used by tests (to compare batches with direct reads) and tools.
#include <pybind11/stl.h>

#include <cstring>

#include "bindings.h"
#include "stoker/dataset.h"
#include "stoker/remote.h"
#include "stoker/shard.h"

namespace stoker::python {

void init_dataset(py::module_& m) {
  m.def(
      "read_manifest",
      [](const std::string& dir, const std::string& profile) {
        Manifest man;
        if (is_remote_url(dir)) {
          py::gil_scoped_release nogil;
          RemoteOptions o;
          o.aws_profile = profile;
          man = RemoteStore::open(dir, o)->read_manifest();
        } else {
          man = read_manifest(dir);
        }
        py::dict d;
        d["schema"] = man.schema.to_string();
        d["class_names"] = man.class_names;
        d["meta"] = man.meta;
        d["records"] = man.total_records();
        py::list shards;
        for (const ShardEntry& s : man.shards) {
          py::dict e;
          e["name"] = s.name;
          e["records"] = s.records;
          e["file_size"] = s.file_size;
          shards.append(e);
        }
        d["shards"] = shards;
        return d;
      },
      py::arg("dir"), py::arg("profile") = "",
      "The dataset's MANIFEST as a dict (schema, class_names, meta, records, shards); `dir` may be an http(s):// "
      "or s3:// URL (`profile`: the S3 credentials profile).");

  m.def(
      "read_record",
      [](const std::string& dir, uint64_t index) {
        Record r;
        Schema schema;
        {
          py::gil_scoped_release nogil;
          auto ds = Dataset::open(dir);
          schema = ds->schema();
          r = ds->read(index);
        }
        py::dict d;
        py::module_ np;
        for (size_t i = 0; i < schema.fields.size(); ++i) {
          const Field& f = schema.fields[i];
          const auto& v = r.fields[i];
          const char* p = reinterpret_cast<const char*>(v.data());
          switch (f.kind) {
            case FieldKind::kInt64: d[py::str(f.name)] = r.int64_field(i); break;
            case FieldKind::kFloat32: {
              float x;
              std::memcpy(&x, p, 4);
              d[py::str(f.name)] = x;
              break;
            }
            case FieldKind::kFloat64: {
              double x;
              std::memcpy(&x, p, 8);
              d[py::str(f.name)] = x;
              break;
            }
            case FieldKind::kText: d[py::str(f.name)] = py::str(p, v.size()); break;
            case FieldKind::kNdarray:
            case FieldKind::kVarArray: {
              // A copy as a NumPy array of the field's dtype and shape (the record's
              // buffer does not outlive this call).
              if (!np) np = py::module_::import("numpy");
              py::list shape;
              if (f.kind == FieldKind::kVarArray) shape.append(f.unit_size() ? v.size() / f.unit_size() : 0);
              for (uint32_t dim : f.shape) shape.append(dim);
              // numpy's dtype names are stoker's; the host is little-endian like the format.
              py::object arr = np.attr("frombuffer")(py::bytes(p, v.size()), np.attr("dtype")(dtype_name(f.dtype)));
              d[py::str(f.name)] = arr.attr("reshape")(py::tuple(shape));
              break;
            }
            default: d[py::str(f.name)] = py::bytes(p, v.size());
          }
        }
        return d;
      },
      py::arg("dir"), py::arg("index"),
      "Reads and checks record `index` (global): {field: value}: int for int64, float for float32/64, str for\n"
      "text (and __key__), a NumPy array (a copy) for ndarray/vararray fields, bytes for the rest.");

  m.def(
      "record_location",
      [](const std::string& dir, uint64_t index) {
        auto ds = Dataset::open(dir);
        auto [s, i] = ds->locate(index);
        const RecordLocation& loc = ds->shard(s)->location(i);
        py::dict d;
        d["shard"] = ds->shard_path(s);
        d["record"] = i;
        d["offset"] = loc.offset;
        d["stored_size"] = loc.stored_size;
        d["raw_size"] = loc.raw_size;
        d["compressed"] = (loc.flags & kRecordZstd) != 0;
        return d;
      },
      py::arg("dir"), py::arg("index"),
      "Where record `index` (global) is stored: shard path, record in shard, byte offset, sizes.");
}

}  // namespace stoker::python
