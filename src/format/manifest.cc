#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "format/path_hint.h"
#include "util/bytes.h"

namespace stoker {

namespace {

constexpr std::string_view kManifestMagic = "stoker-manifest ";
constexpr size_t kMaxManifestBytes = 256u << 20;
constexpr uint64_t kMaxShardRecords = 1ull << 40;

// Percent-encodes bytes that would break the line/space syntax.
std::string escape(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == '%') {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool unescape(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return false;
      int a = hexval(s[i + 1]), b = hexval(s[i + 2]);
      if (a < 0 || b < 0) return false;
      out += static_cast<char>(a * 16 + b);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return true;
}

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string_view::npos) j = line.size();
    parts.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  if (!line.empty() && line.back() == ' ') parts.push_back({});  // an empty last item
  return parts;
}

bool parse_u64(std::string_view s, uint64_t& v, int base = 10) {
  if (s.empty() || s.size() > 20) return false;
  v = 0;
  for (char c : s) {
    // Lower-case hex only: the writer emits it, and a case flip must not parse.
    int d = (c >= '0' && c <= '9') ? c - '0' : (base == 16 && c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    uint64_t nv = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    if (nv / static_cast<uint64_t>(base) != v) return false;
    v = nv;
  }
  return true;
}

}  // namespace

/// A shard name must stay inside the dataset directory: a plain file name.
bool is_safe_shard_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.';
    if (!ok) return false;
  }
  return name != kManifestName;
}

bool is_writer_shard_name(std::string_view name, std::string_view prefix) {
  constexpr std::string_view kSuffix = ".stk";
  if (!is_safe_shard_name(name) || !name.ends_with(kSuffix)) return false;
  const std::string_view stem = name.substr(0, name.size() - kSuffix.size());
  const size_t dash = stem.rfind('-');
  if (dash == std::string_view::npos || stem.size() - dash - 1 < 5) return false;
  if (!prefix.empty() && stem.substr(0, dash) != prefix) return false;
  for (char c : stem.substr(dash + 1))
    if (c < '0' || c > '9') return false;
  return true;
}

uint64_t Manifest::total_records() const noexcept {
  uint64_t n = 0;
  for (auto& s : shards) n += s.records;
  return n;
}

uint64_t Manifest::total_bytes() const noexcept {
  uint64_t n = 0;
  for (auto& s : shards) n += s.file_size;
  return n;
}

std::string Manifest::serialize() const {
  std::string out = std::string(kManifestMagic) + std::to_string(version) + "\n";
  for (const Field& f : schema.fields) {
    // v1 readers know the image kind as "jpeg".
    const char* kind = version < 2 && f.kind == FieldKind::kImage ? "jpeg" : field_kind_name(f.kind);
    out += "field " + escape(f.name) + " " + kind;
    if (f.kind == FieldKind::kTokens) out += std::string(" ") + dtype_name(f.dtype) + " " + std::to_string(f.seq_len);
    if (f.kind == FieldKind::kNdarray || f.kind == FieldKind::kVarArray) {
      out += std::string(" ") + dtype_name(f.dtype);
      for (uint32_t d : f.shape) out += " " + std::to_string(d);
    }
    out += "\n";
  }
  for (const auto& c : class_names) out += "class " + escape(c) + "\n";
  for (const auto& [k, v] : meta) out += "meta " + escape(k) + " " + escape(v) + "\n";
  for (const ShardEntry& s : shards) {
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", s.index_crc);
    out += "shard " + s.name + " " + std::to_string(s.records) + " " + std::to_string(s.file_size) + " " + crc + "\n";
  }
  out += "records " + std::to_string(total_records()) + "\n";
  char crc[32];
  std::snprintf(crc, sizeof crc, "crc32c %08x\n", crc32c(out.data(), out.size()));
  out += crc;
  return out;
}

Manifest Manifest::parse(std::string_view text, const std::string& where) {
  auto bad = [&](size_t line, const std::string& why) -> Error {
    return Error(ErrorCode::kDataLoss, where + ": line " + std::to_string(line) + ": " + why);
  };
  if (text.size() > kMaxManifestBytes)
    throw_error(ErrorCode::kResourceExhausted, where + ": manifest larger than " + std::to_string(kMaxManifestBytes) + " bytes");
  // The CRC line is the last line; it covers every byte before it.
  if (text.empty() || text.back() != '\n') throw Error(ErrorCode::kDataLoss, where + ": manifest is truncated (no final newline)");
  size_t last = text.rfind('\n', text.size() - 2);
  size_t crc_line_start = last == std::string_view::npos ? 0 : last + 1;
  std::string_view crc_line = text.substr(crc_line_start, text.size() - 1 - crc_line_start);
  if (crc_line.substr(0, 7) != "crc32c ")
    throw Error(ErrorCode::kDataLoss, where + ": manifest is truncated or damaged (last line is not its checksum)");
  uint64_t stored = 0;
  if (crc_line.size() != 15 || !parse_u64(crc_line.substr(7), stored, 16))
    throw Error(ErrorCode::kDataLoss, where + ": manifest checksum line is malformed");
  uint32_t computed = crc32c(text.data(), crc_line_start);
  if (computed != stored) {
    char b[96];
    std::snprintf(b, sizeof b, ": manifest checksum mismatch (stored %08x, computed %08x)", static_cast<uint32_t>(stored), computed);
    throw Error(ErrorCode::kDataLoss, where + b);
  }

  Manifest m;
  size_t pos = 0, lineno = 0;
  bool saw_records = false;
  uint64_t declared_records = 0;
  while (pos < crc_line_start) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    if (lineno == 1) {
      uint64_t v = 0;
      if (line.substr(0, kManifestMagic.size()) != kManifestMagic) throw bad(lineno, "not a stoker manifest");
      if (!parse_u64(line.substr(kManifestMagic.size()), v) || v < kShardVersionMin || v > kShardVersion)
        throw bad(lineno, "manifest version '" + escape(line.substr(kManifestMagic.size())) +
                              "' is not supported (this stoker reads versions " + std::to_string(kShardVersionMin) +
                              ".." + std::to_string(kShardVersion) + ")");
      m.version = static_cast<uint32_t>(v);
      continue;
    }
    auto parts = split(line);
    if (parts.empty()) throw bad(lineno, "empty line");
    std::string_view key = parts[0];
    if (key == "field") {
      if (parts.size() < 3) throw bad(lineno, "field needs a name and a kind");
      Field f;
      if (!unescape(parts[1], f.name)) throw bad(lineno, "bad escape in field name");
      try {
        f.kind = field_kind_from_name(std::string(parts[2]));
        if (f.kind == FieldKind::kTokens) {
          if (parts.size() != 5) throw bad(lineno, "token field needs dtype and seq_len");
          f.dtype = dtype_from_name(std::string(parts[3]));
          uint64_t sl = 0;
          if (!parse_u64(parts[4], sl) || sl > (1u << 24)) throw bad(lineno, "bad seq_len");
          f.seq_len = static_cast<uint32_t>(sl);
        } else if (f.kind == FieldKind::kNdarray || f.kind == FieldKind::kVarArray) {
          if (parts.size() < 4) throw bad(lineno, "array field needs a dtype");
          if (parts.size() > 4 + kMaxDims) throw bad(lineno, "array field has too many dimensions");
          f.dtype = dtype_from_name(std::string(parts[3]));
          for (size_t d = 4; d < parts.size(); ++d) {
            uint64_t dim = 0;
            if (!parse_u64(parts[d], dim) || dim == 0 || dim > 0xFFFFFFFFu) throw bad(lineno, "bad dimension");
            f.shape.push_back(static_cast<uint32_t>(dim));
          }
        } else if (parts.size() != 3) {
          throw bad(lineno, std::string(field_kind_name(f.kind)) + " field takes no dtype or shape");
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kDataLoss) throw;
        throw bad(lineno, e.what());
      }
      m.schema.fields.push_back(std::move(f));
    } else if (key == "class") {
      if (parts.size() != 2) throw bad(lineno, "class needs one name");
      std::string name;
      if (!unescape(parts[1], name)) throw bad(lineno, "bad escape in class name");
      m.class_names.push_back(std::move(name));
    } else if (key == "meta") {
      if (parts.size() != 3) throw bad(lineno, "meta needs a key and a value");
      std::string k, v;
      if (!unescape(parts[1], k) || !unescape(parts[2], v)) throw bad(lineno, "bad escape in meta");
      m.meta[k] = v;
    } else if (key == "shard") {
      if (parts.size() != 5) throw bad(lineno, "shard needs name, records, bytes and index crc");
      ShardEntry s;
      s.name = std::string(parts[1]);
      if (!is_safe_shard_name(s.name)) throw bad(lineno, "shard name '" + escape(s.name) + "' is not a plain file name in the dataset directory");
      uint64_t crc = 0;
      if (!parse_u64(parts[2], s.records) || s.records > kMaxShardRecords) throw bad(lineno, "bad record count");
      if (!parse_u64(parts[3], s.file_size)) throw bad(lineno, "bad file size");
      if (parts[4].size() != 8 || !parse_u64(parts[4], crc, 16)) throw bad(lineno, "bad index crc");
      s.index_crc = static_cast<uint32_t>(crc);
      for (const auto& o : m.shards)
        if (o.name == s.name) throw bad(lineno, "shard '" + s.name + "' listed twice");
      m.shards.push_back(std::move(s));
    } else if (key == "records") {
      if (parts.size() != 2 || !parse_u64(parts[1], declared_records)) throw bad(lineno, "bad records line");
      saw_records = true;
    } else {
      throw bad(lineno, "unknown key '" + escape(key) + "'");
    }
  }
  if (lineno == 0) throw bad(1, "empty manifest");
  try {
    m.schema.validate();
  } catch (const Error& e) {
    throw Error(ErrorCode::kDataLoss, where + ": bad schema: " + e.what());
  }
  if (m.schema.min_version() > m.version)
    throw Error(ErrorCode::kDataLoss, where + ": schema " + m.schema.to_string() + " cannot be held by a version " +
                                          std::to_string(m.version) + " manifest");
  if (!saw_records || declared_records != m.total_records())
    throw Error(ErrorCode::kDataLoss, where + ": records line missing or does not match the shard list");
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  std::string text;
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0)
    throw Error(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError, internal::describe_non_dataset(dir));
  if (!S_ISDIR(st.st_mode)) throw Error(ErrorCode::kInvalidArgument, internal::describe_non_dataset(dir));
  try {
    text = internal::read_small_file(path, kMaxManifestBytes);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) throw Error(ErrorCode::kNotFound, internal::describe_non_dataset(dir));
    throw;
  }
  return Manifest::parse(text, path);
}

Manifest read_manifest_file(const std::string& path) {
  return Manifest::parse(internal::read_small_file(path, kMaxManifestBytes), path);
}

uint64_t manifest_generation(const Manifest& m) {
  auto it = m.meta.find("generation");
  uint64_t g = 0;
  if (it == m.meta.end() || !parse_u64(it->second, g) || g == 0) return 1;
  return g;
}

std::string PartSpec::to_string() const { return std::to_string(index) + "/" + std::to_string(count); }

void PartSpec::validate() const {
  if (count == 0 && index == 0) return;
  if (count == 0 || count > kMaxParts || index >= count)
    throw_error(ErrorCode::kInvalidArgument, "part " + to_string() + ": expected I/N with 0 <= I < N <= " +
                                                 std::to_string(kMaxParts) + " (parts count from 0)");
}

PartSpec PartSpec::parse(std::string_view text) {
  const size_t slash = text.find('/');
  uint64_t i = 0, n = 0;
  if (slash == std::string_view::npos || !parse_u64(text.substr(0, slash), i) || !parse_u64(text.substr(slash + 1), n) ||
      n == 0 || n > kMaxParts || i >= n)
    throw_error(ErrorCode::kInvalidArgument, "part '" + std::string(text) + "': expected I/N with 0 <= I < N <= " +
                                                 std::to_string(kMaxParts) + " (parts count from 0)");
  return PartSpec{static_cast<uint32_t>(i), static_cast<uint32_t>(n)};
}

std::pair<uint64_t, uint64_t> PartSpec::range(uint64_t n) const noexcept {
  if (count == 0) return {0, n};
  // (i*n)/count without overflow for any n below 2^64 / kMaxParts.
  auto cut = [&](uint64_t i) { return static_cast<uint64_t>((static_cast<unsigned __int128>(n) * i) / count); };
  return {cut(index), cut(index + 1ull)};
}

std::string part_shard_prefix(const PartSpec& part) {
  char b[48];
  std::snprintf(b, sizeof b, "part-%05u-of-%05u", part.index, part.count);
  return b;
}

std::string part_manifest_name(const PartSpec& part) { return std::string(kManifestName) + "." + part_shard_prefix(part); }

void write_manifest(const std::string& dir, const Manifest& manifest) {
  internal::write_file_atomic(dir + "/" + kManifestName, manifest.serialize());
}

}  // namespace stoker
