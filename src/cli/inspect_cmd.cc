// `stoker inspect PATH [--json]`: what a dataset (or one shard file) holds. URLs: remote_cmd.h.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "cli.h"
#include "remote_cmd.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/shard.h"
// Internal (the tool links the library statically): the Json type, the one JSON writer
// and the library's reports as values (to_json_value), so --json prints the library's
// own JSON, measurements rounded as every report rounds them (figure).
#include "util/json.h"

namespace stoker::cli {
namespace {

struct Facts {
  std::string path, kind;
  Schema schema;
  uint64_t shards = 0, records = 0, bytes = 0, raw = 0, stored = 0, compressed_records = 0;
  std::vector<std::string> class_names;
  std::map<std::string, std::string> meta;
};

void add_shard(Facts& f, const ShardReader& r) {
  for (uint64_t i = 0; i < r.record_count(); ++i) {
    const RecordLocation& loc = r.location(i);
    f.raw += loc.raw_size;
    f.stored += loc.stored_size;
    if (loc.flags & kRecordZstd) ++f.compressed_records;
  }
  f.records += r.record_count();
  f.bytes += r.file_size();
  ++f.shards;
}

int inspect_cmd(const std::string& path, bool json) {
  Facts f;
  f.path = path;
  struct stat st;
  if (::stat(f.path.c_str(), &st) != 0) throw errno_error("stat " + f.path, errno);
  if (S_ISDIR(st.st_mode)) {
    auto ds = Dataset::open(f.path);
    f.kind = "dataset";
    f.schema = ds->schema();
    f.class_names = ds->manifest().class_names;
    f.meta = ds->manifest().meta;
    for (size_t s = 0; s < ds->shard_count(); ++s) add_shard(f, *ds->shard(s));
  } else {
    auto r = ShardReader::open(f.path);
    f.kind = "shard";
    f.schema = r->schema();
    add_shard(f, *r);
  }
  const double ratio = f.stored ? static_cast<double>(f.raw) / static_cast<double>(f.stored) : 1.0;
  const double mean = f.records ? static_cast<double>(f.stored) / static_cast<double>(f.records) : 0.0;
  const double mean_raw = f.records ? static_cast<double>(f.raw) / static_cast<double>(f.records) : 0.0;

  if (json) {
    internal::Json fields = internal::Json::array();
    for (const Field& fl : f.schema.fields) {
      internal::Json x = {{"name", fl.name}, {"kind", field_kind_name(fl.kind)}};
      if (fl.kind == FieldKind::kTokens) {
        x["dtype"] = dtype_name(fl.dtype);
        x["seq_len"] = fl.seq_len;
      }
      fields.push_back(std::move(x));
    }
    internal::Json meta = internal::Json::object();
    for (auto& [k, v] : f.meta) meta[k] = v;
    const internal::Json o = {{"path", f.path},
                              {"kind", f.kind},
                              {"schema", f.schema.to_string()},
                              {"fields", std::move(fields)},
                              {"shards", f.shards},
                              {"records", f.records},
                              {"bytes", f.bytes},
                              {"raw_bytes", f.raw},
                              {"stored_bytes", f.stored},
                              {"compressed_records", f.compressed_records},
                              {"compression_ratio", internal::figure(ratio)},
                              {"mean_record_bytes", internal::figure(mean)},
                              {"mean_raw_record_bytes", internal::figure(mean_raw)},
                              {"classes", f.class_names.size()},
                              {"class_names", f.class_names},
                              {"meta", std::move(meta)}};
    std::cout << internal::json_text(o) << "\n";
    return 0;
  }
  std::printf("%-10s %s (%s)\n", "path", f.path.c_str(), f.kind.c_str());
  std::printf("%-10s %s\n", "schema", f.schema.to_string().c_str());
  std::printf("%-10s %llu\n", "shards", static_cast<unsigned long long>(f.shards));
  std::printf("%-10s %llu\n", "records", static_cast<unsigned long long>(f.records));
  std::printf("%-10s %s (%llu bytes in shard files)\n", "bytes", format_bytes(static_cast<double>(f.bytes)).c_str(),
              static_cast<unsigned long long>(f.bytes));
  std::printf("%-10s raw %s, stored %s, ratio %.2fx (%llu of %llu records compressed)\n", "payload",
              format_bytes(static_cast<double>(f.raw)).c_str(), format_bytes(static_cast<double>(f.stored)).c_str(),
              ratio, static_cast<unsigned long long>(f.compressed_records), static_cast<unsigned long long>(f.records));
  std::printf("%-10s %s stored, %s raw\n", "mean rec", format_bytes(mean).c_str(), format_bytes(mean_raw).c_str());
  if (f.kind == "dataset") {
    std::printf("%-10s %zu", "classes", f.class_names.size());
    for (size_t i = 0; i < f.class_names.size() && i < 5; ++i) std::printf("%s%s", i ? ", " : " (", f.class_names[i].c_str());
    std::printf("%s\n", f.class_names.empty() ? "" : f.class_names.size() > 5 ? ", ...)" : ")");
    for (auto& [k, v] : f.meta) std::printf("%-10s %s = %s\n", "meta", k.c_str(), v.c_str());
  }
  return 0;
}

void setup(CLI::App& tool) {
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto remote = std::make_shared<RemoteArgs>();
  CLI::App* c = tool.add_subcommand("inspect", "Show a dataset's (or shard's) schema, counts, sizes and compression ratio.");
  c->add_option("PATH", *path, "dataset directory, shard file or http(s):// / s3:// dataset URL")->required();
  c->add_flag("--json", *json, "one JSON object instead of text");
  add_remote_options(c, *remote);
  on_run(c, [path, json, remote, c] {
    if (is_remote_url(*path)) return inspect_remote(*path, *json, *remote);
    reject_options(c, {"--connections", "--part", "--profile"}, "without a URL");
    return inspect_cmd(*path, *json);
  });
}

}  // namespace

STOKER_COMMAND("inspect", setup);

}  // namespace stoker::cli
