// Dataset inspection from Python: the manifest, one record's fields, where a record's
// stored bytes live. Used by tests (to compare batches with direct reads) and tools.
#include <pybind11/stl.h>

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
        for (size_t i = 0; i < schema.fields.size(); ++i) {
          const Field& f = schema.fields[i];
          if (f.kind == FieldKind::kInt64) d[py::str(f.name)] = r.int64_field(i);
          else
            d[py::str(f.name)] = py::bytes(reinterpret_cast<const char*>(r.fields[i].data()), r.fields[i].size());
        }
        return d;
      },
      py::arg("dir"), py::arg("index"),
      "Reads and checks record `index` (global): {field: bytes, or int for int64 fields}.");

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
