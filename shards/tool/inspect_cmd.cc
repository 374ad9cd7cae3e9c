// `stoker inspect PATH [--json]`: what a dataset (or one shard file) holds.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "cli.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/shard.h"

namespace stoker::cli {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

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

int inspect_cmd(const Args& args) {
  ArgParser p(args, {"json"});
  p.check_known({"json"});
  if (p.positional().size() != 1) throw_error(ErrorCode::kInvalidArgument, "usage: stoker inspect PATH [--json]");
  Facts f;
  f.path = p.positional()[0];
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

  if (p.flag("json")) {
    std::string o = "{";
    o += "\"path\":" + json_string(f.path) + ",\"kind\":" + json_string(f.kind);
    o += ",\"schema\":" + json_string(f.schema.to_string()) + ",\"fields\":[";
    for (size_t i = 0; i < f.schema.fields.size(); ++i) {
      const Field& fl = f.schema.fields[i];
      if (i) o += ",";
      o += "{\"name\":" + json_string(fl.name) + ",\"kind\":" + json_string(field_kind_name(fl.kind));
      if (fl.kind == FieldKind::kTokens)
        o += ",\"dtype\":" + json_string(dtype_name(fl.dtype)) + ",\"seq_len\":" + std::to_string(fl.seq_len);
      o += "}";
    }
    o += "],\"shards\":" + std::to_string(f.shards) + ",\"records\":" + std::to_string(f.records) +
         ",\"bytes\":" + std::to_string(f.bytes) + ",\"raw_bytes\":" + std::to_string(f.raw) +
         ",\"stored_bytes\":" + std::to_string(f.stored) +
         ",\"compressed_records\":" + std::to_string(f.compressed_records);
    char buf[128];
    std::snprintf(buf, sizeof buf, ",\"compression_ratio\":%.4f,\"mean_record_bytes\":%.1f,\"mean_raw_record_bytes\":%.1f",
                  ratio, mean, mean_raw);
    o += buf;
    o += ",\"classes\":" + std::to_string(f.class_names.size()) + ",\"class_names\":[";
    for (size_t i = 0; i < f.class_names.size(); ++i) o += (i ? "," : "") + json_string(f.class_names[i]);
    o += "],\"meta\":{";
    bool first = true;
    for (auto& [k, v] : f.meta) {
      o += (first ? "" : ",") + json_string(k) + ":" + json_string(v);
      first = false;
    }
    o += "}}";
    std::cout << o << "\n";
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

}  // namespace

STOKER_COMMAND("inspect", "PATH [--json]",
               "Show a dataset's (or shard's) schema, counts, sizes and compression ratio.", inspect_cmd);

}  // namespace stoker::cli
