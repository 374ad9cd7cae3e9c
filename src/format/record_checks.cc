#include "format/record_checks.h"

#include <climits>
#include <cstdio>
#include <cstring>
#include <vector>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/media.h"

namespace stoker::internal {

std::string check_doc_starts(std::span<const uint8_t> starts, uint64_t rows, uint32_t seq_len) {
  if (starts.size() % 4 != 0) return "doc_starts is " + std::to_string(starts.size()) + " bytes, not whole int32s";
  const size_t n = starts.size() / 4;
  if (n == 0) return "doc_starts is empty (it needs the start of the document holding the first token)";
  if (doc_start_at(starts, 0) > 0)
    return "doc_starts begins at " + std::to_string(doc_start_at(starts, 0)) + ", after the record's first token";
  const int64_t end = static_cast<int64_t>(rows * seq_len);
  // Every position in the record is at most end - (the first entry): int32 must hold it.
  if (end - doc_start_at(starts, 0) > INT32_MAX)
    return "doc_starts begins at " + std::to_string(doc_start_at(starts, 0)) + ": positions up to the record's end (" +
           std::to_string(end) + ") pass what int32 holds";
  for (size_t i = 1; i < n; ++i) {
    const int64_t v = doc_start_at(starts, i);
    if (v <= doc_start_at(starts, i - 1))
      return "doc_starts entry " + std::to_string(i) + " (" + std::to_string(v) + ") does not increase";
    if (v > end)
      return "doc_starts entry " + std::to_string(i) + " (" + std::to_string(v) + ") lies past the record's " +
             std::to_string(end) + " tokens";
  }
  return {};
}

std::string check_record_content(const Schema& schema, std::span<const std::span<const uint8_t>> fields,
                                 uint64_t* fast_crop_indexes) {
  int tokens = -1;
  for (size_t f = 0; f < schema.fields.size() && f < fields.size(); ++f) {
    const Field& field = schema.fields[f];
    if (field.kind == FieldKind::kTokens && tokens < 0) tokens = static_cast<int>(f);
    if (field.kind == FieldKind::kVideo || field.kind == FieldKind::kAudio) {
      try {
        MediaInfo info;
        parse_media_value(fields[f], info);
        if ((info.kind == MediaKind::kVideo) != (field.kind == FieldKind::kVideo))
          return "field '" + field.name + "': its media index is for " + (info.kind == MediaKind::kVideo ? "video" : "audio");
      } catch (const Error& e) {
        return "field '" + field.name + "': " + e.what();
      }
      continue;
    }
    const bool image = field.kind == FieldKind::kJpeg ||
                       (field.kind == FieldKind::kImage && image_format_of(fields[f]) == ImageFormat::kJpeg);
    if (!image) continue;
    try {
      if (check_fast_crop_index(fields[f]).indexed && fast_crop_indexes) ++*fast_crop_indexes;
    } catch (const Error& e) {
      return "field '" + field.name + "': " + e.what();
    }
  }
  const int docs = schema.find("doc_starts");
  if (tokens >= 0 && docs >= 0 && static_cast<size_t>(docs) < fields.size()) {
    const Field& t = schema.fields[static_cast<size_t>(tokens)];
    const uint64_t row = (static_cast<uint64_t>(t.seq_len) + 1) * dtype_size(t.dtype);
    const uint64_t rows = row ? fields[static_cast<size_t>(tokens)].size() / row : 0;
    if (std::string why = check_doc_starts(fields[static_cast<size_t>(docs)], rows, t.seq_len); !why.empty())
      return "field 'doc_starts': " + why;
  }
  return {};
}

std::string unverified_key(const Schema& schema, const RecordLocation& l, std::span<const uint8_t> stored) {
  const int key = schema.key_field();
  if (key < 0 || (l.flags & kRecordZstd) != 0 || static_cast<size_t>(key) >= l.field_sizes.size()) return {};
  uint64_t off = 0;
  for (int f = 0; f < key; ++f) off += l.field_sizes[static_cast<size_t>(f)];
  const uint64_t size = l.field_sizes[static_cast<size_t>(key)];
  if (off + size > stored.size() || size > 4096) return {};
  std::string out;
  for (uint64_t i = 0; i < size; ++i) {
    const unsigned char c = stored[off + i];
    if (c >= 0x20 && c != 0x7F && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::string key_suffix(const std::string& key) { return key.empty() ? std::string() : " (__key__ '" + key + "')"; }

void check_record_crc(const Schema& schema, const RecordLocation& l, std::span<const uint8_t> stored,
                      const std::string& where) {
  const uint32_t crc = crc32c(stored.data(), stored.size());
  if (crc == l.crc) return;
  char b[96];
  std::snprintf(b, sizeof b, ": checksum mismatch (stored 0x%08x, computed 0x%08x)", l.crc, crc);
  throw Error(ErrorCode::kDataLoss, where + key_suffix(unverified_key(schema, l, stored)) + b);
}

}  // namespace stoker::internal
