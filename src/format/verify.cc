#include "stoker/verify.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "decode/image_check.h"
#include "format/record_checks.h"
#include "stoker/image.h"
#include "stoker/media.h"
#include "util/bytes.h"
#include "util/platform.h"

namespace stoker {

namespace {

constexpr size_t kChunk = 4u << 20;

// Errors from the reader read "<path>: <part>: <reason>"; split them back into parts.
VerifyProblem problem_from_error(const std::string& path, const std::string& message) {
  std::string rest = message;
  if (rest.rfind(path + ": ", 0) == 0) rest = rest.substr(path.size() + 2);
  auto colon = rest.find(": ");
  if (colon == std::string::npos) return {path, "file", rest};
  return {path, rest.substr(0, colon), rest.substr(colon + 2)};
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

// The reader's content rules (record_checks.h) on a record whose checksum is right:
// what the record CRC cannot vouch for, since it was computed over whatever was packed.
// With `decode`, every image field must also decode (check_image_decodes).
void check_content(const ShardReader& reader, const RecordLocation& l, const uint8_t* data, uint64_t i,
                   const std::string& path, bool decode, VerifyReport& rep) {
  const Schema& schema = reader.schema();
  std::vector<std::span<const uint8_t>> fields;
  Record decompressed;
  if ((l.flags & kRecordZstd) == 0) {
    uint64_t off = 0;
    for (size_t f = 0; f < l.field_sizes.size(); ++f) {
      if (off + l.field_sizes[f] > l.stored_size) return;  // the reader's checks name a bad layout
      fields.emplace_back(data + off, l.field_sizes[f]);
      off += l.field_sizes[f];
    }
  } else {
    decompressed = reader.read_record(i);
    fields = decompressed.fields;
  }
  std::string why = internal::check_record_content(schema, fields, &rep.fast_crop_indexes);
  for (size_t f = 0; why.empty() && decode && f < fields.size() && f < schema.fields.size(); ++f)
    if (schema.fields[f].kind == FieldKind::kImage) {
      std::string bad = internal::check_image_decodes(fields[f]);
      if (!bad.empty()) why = "field '" + schema.fields[f].name + "': " + bad;
    } else if (schema.fields[f].kind == FieldKind::kVideo || schema.fields[f].kind == FieldKind::kAudio) {
      try {
        MediaInfo info;
        const std::span<const uint8_t> file = parse_media_value(fields[f], info);
        probe_media(file, info.kind);
      } catch (const Error& e) {
        why = "field '" + schema.fields[f].name + "': " + e.what();
      }
    }
  if (!why.empty()) {
    const int key = schema.key_field();
    const std::string k = key >= 0 && static_cast<size_t>(key) < fields.size()
                              ? std::string(fields[static_cast<size_t>(key)].begin(), fields[static_cast<size_t>(key)].end())
                              : std::string();
    rep.problems.push_back({path, "record " + std::to_string(i) + internal::key_suffix(k), why});
  }
}

// Whether a schema has anything for check_content to look at (image fields carry the
// fast-crop rule and, with decode, the decode check).
bool has_content_rules(const Schema& schema) {
  for (const Field& f : schema.fields)
    if (f.kind == FieldKind::kImage || f.kind == FieldKind::kVideo || f.kind == FieldKind::kAudio) return true;
  return schema.find("doc_starts") >= 0;
}

}  // namespace

VerifyReport verify_shard(const std::string& path, const ShardEntry* expected, const VerifyProgress& progress) {
  VerifyOptions o;
  o.progress = progress;
  return verify_shard(path, expected, o);
}

VerifyReport verify_path(const std::string& path, unsigned threads, const VerifyProgress& progress) {
  VerifyOptions o;
  o.threads = threads;
  o.progress = progress;
  return verify_path(path, o);
}

VerifyReport verify_shard(const std::string& path, const ShardEntry* expected, const VerifyOptions& options) {
  const VerifyProgress& progress = options.progress;
  VerifyReport rep;
  rep.shards = 1;
  std::shared_ptr<const ShardReader> reader;
  try {
    reader = ShardReader::open(path);
  } catch (const Error& e) {
    rep.problems.push_back(problem_from_error(path, e.what()));
    return rep;
  }
  if (expected) {
    if (reader->record_count() != expected->records)
      rep.problems.push_back({path, "manifest", "shard has " + std::to_string(reader->record_count()) +
                                                    " records, the manifest says " + std::to_string(expected->records)});
    if (reader->file_size() != expected->file_size)
      rep.problems.push_back({path, "manifest", "shard is " + std::to_string(reader->file_size()) +
                                                    " bytes, the manifest says " + std::to_string(expected->file_size)});
    if (reader->index_crc() != expected->index_crc)
      rep.problems.push_back({path, "manifest", "index checksum " + hex32(reader->index_crc()) +
                                                    " differs from the manifest's " + hex32(expected->index_crc) +
                                                    " (shard replaced or rewritten)"});
  }
  // Walk the data region in large sequential reads; check each record's CRC and that
  // every padding byte between records is zero.
  const uint64_t begin = reader->header().header_size, end = reader->data_end();
  std::vector<uint8_t> buf;
  uint64_t buf_off = 0;
  auto view = [&](uint64_t off, uint64_t len) -> const uint8_t* {
    if (off < buf_off || off + len > buf_off + buf.size()) {
      buf.resize(std::max<uint64_t>(len, std::min<uint64_t>(kChunk, end - off)));
      size_t n = internal::pread_full(reader->fd(), buf.data(), buf.size(), off, path);
      if (n != buf.size()) return nullptr;
      buf_off = off;
    }
    return buf.data() + (off - buf_off);
  };
  uint64_t pos = begin;
  const bool content_rules = has_content_rules(reader->schema());
  try {
    for (uint64_t i = 0; i < reader->record_count(); ++i) {
      const RecordLocation& l = reader->location(i);
      if (l.offset > pos) {
        const uint8_t* pad = view(pos, l.offset - pos);
        if (!pad) {
          rep.problems.push_back({path, "padding before record " + std::to_string(i), "short read"});
          return rep;
        }
        for (uint64_t k = 0; k < l.offset - pos; ++k)
          if (pad[k] != 0) {
            rep.problems.push_back({path, "padding before record " + std::to_string(i),
                                    "non-zero byte at offset " + std::to_string(pos + k)});
            break;
          }
      }
      const uint8_t* data = view(l.offset, l.stored_size);
      if (!data) {
        rep.problems.push_back({path, "record " + std::to_string(i), "short read (file truncated)"});
        return rep;
      }
      uint32_t crc = crc32c(data, l.stored_size);
      if (crc != l.crc)
        rep.problems.push_back(
            {path,
             "record " + std::to_string(i) +
                 internal::key_suffix(internal::unverified_key(reader->schema(), l, {data, l.stored_size})),
             "checksum mismatch (stored " + hex32(l.crc) + ", computed " + hex32(crc) + ")"});
      else if (content_rules) {
        check_content(*reader, l, data, i, path, options.decode, rep);
      }
      ++rep.records;
      pos = l.offset + l.stored_size;
      if (progress && (i % 256 == 0)) progress(pos - begin);
    }
  } catch (const Error& e) {
    rep.problems.push_back(problem_from_error(path, e.what()));
  }
  rep.bytes = reader->file_size();
  if (progress) progress(end - begin);
  return rep;
}

VerifyReport verify_path(const std::string& path, const VerifyOptions& options) {
  namespace fs = std::filesystem;
  const VerifyProgress& progress = options.progress;
  unsigned threads = options.threads;
  VerifyReport total;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) {
      total.problems.push_back({path, "file", "does not exist"});
      return total;
    }
    return verify_shard(path, nullptr, options);
  }
  Manifest m;
  bool have_manifest = true;
  try {
    m = read_manifest(path);
  } catch (const Error& e) {
    have_manifest = false;
    total.problems.push_back(problem_from_error(path + "/" + kManifestName, e.what()));
  }
  // Shards to check: the manifest's, or (when it is unreadable) every *.stk present.
  std::vector<std::pair<std::string, const ShardEntry*>> todo;
  std::set<std::string> listed;
  if (have_manifest) {
    for (const ShardEntry& s : m.shards) {
      todo.emplace_back(path + "/" + s.name, &s);
      listed.insert(s.name);
    }
  }
  std::vector<std::string> present;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    // A writer's uncommitted files are in no dataset (the next writer removes them).
    if (name.find(kPendingMarker) != std::string::npos && !listed.count(name)) continue;
    if (entry.path().extension() == ".stk") present.push_back(name);
    if (entry.path().extension() == ".tmp")
      total.problems.push_back({entry.path().string(), "file", "left-over temporary file from an interrupted write"});
  }
  std::sort(present.begin(), present.end());
  for (const std::string& name : present) {
    if (listed.count(name)) continue;
    if (have_manifest && is_writer_shard_name(name))
      total.notes.push_back(path + "/" + name +
                            ": not listed in the manifest, so in no dataset (an old shard an interrupted overwrite left; "
                            "the next pack --overwrite removes it)");
    else if (have_manifest)
      total.problems.push_back({path + "/" + name, "file", "shard is not listed in the manifest"});
    else
      todo.emplace_back(path + "/" + name, nullptr);
  }
  for (const auto& [p, e] : todo)
    if (e && !fs::exists(p, ec)) total.problems.push_back({p, "file", "listed in the manifest but missing"});

  if (threads == 0) threads = internal::usable_cpus();
  std::vector<VerifyReport> reports(todo.size());
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done_bytes{0};
  std::mutex progress_mu;
  auto worker = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      if (todo[i].second && !fs::exists(todo[i].first)) continue;
      uint64_t last = 0;
      VerifyOptions one = options;
      one.progress = [&](uint64_t b) {
        done_bytes += b - last;
        last = b;
        if (progress) {
          std::lock_guard<std::mutex> lock(progress_mu);
          progress(done_bytes.load());
        }
      };
      reports[i] = verify_shard(todo[i].first, todo[i].second, one);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::min<size_t>(threads, todo.size()); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& r : reports) {
    total.shards += r.shards;
    total.records += r.records;
    total.fast_crop_indexes += r.fast_crop_indexes;
    total.bytes += r.bytes;
    for (auto& p : r.problems) total.problems.push_back(std::move(p));
  }
  return total;
}

}  // namespace stoker
