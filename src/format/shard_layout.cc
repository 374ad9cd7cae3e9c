#include "format/shard_layout.h"

#include <cstring>

#include "stoker/crc32c.h"
#include "stoker/error.h"

namespace stoker::internal {

namespace {
[[noreturn]] void corrupt(const std::string& where, const std::string& part, const std::string& why) {
  throw_error(ErrorCode::kDataLoss, where + ": " + part + ": " + why);
}
std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}
}  // namespace

std::vector<uint8_t> encode_header(const Schema& schema, const ShardWriterOptions& options) {
  size_t need = 32;
  for (const Field& f : schema.fields) need += 8 + f.name.size();
  need += 4;  // crc
  const size_t size = (need + kHeaderBlock - 1) / kHeaderBlock * kHeaderBlock;
  std::vector<uint8_t> h(size, 0);
  std::memcpy(h.data(), kHeaderMagic, 8);
  put_u32(&h[8], kShardVersion);
  put_u32(&h[12], static_cast<uint32_t>(size));
  put_u32(&h[16], options.align);
  put_u32(&h[20], static_cast<uint32_t>(options.compression));
  put_u32(&h[24], static_cast<uint32_t>(options.compression == Compression::kZstd ? options.zstd_level : 0));
  put_u32(&h[28], static_cast<uint32_t>(schema.fields.size()));
  size_t p = 32;
  for (const Field& f : schema.fields) {
    h[p] = static_cast<uint8_t>(f.kind);
    h[p + 1] = static_cast<uint8_t>(f.dtype);
    put_u16(&h[p + 2], static_cast<uint16_t>(f.name.size()));
    put_u32(&h[p + 4], f.seq_len);
    std::memcpy(&h[p + 8], f.name.data(), f.name.size());
    p += 8 + f.name.size();
  }
  put_u32(&h[size - 4], crc32c(h.data(), size - 4));
  return h;
}

uint32_t peek_header_size(std::span<const uint8_t> b, const std::string& where) {
  if (b.size() < 32) corrupt(where, "header", "shorter than 32 bytes");
  if (std::memcmp(b.data(), kHeaderMagic, 8) != 0) corrupt(where, "header", "wrong magic (not a stoker shard)");
  uint32_t version = get_u32(&b[8]);
  if (version != kShardVersion)
    corrupt(where, "header", "version " + std::to_string(version) + " is not supported (this stoker reads version " +
                                 std::to_string(kShardVersion) + ")");
  uint32_t size = get_u32(&b[12]);
  if (size < kHeaderBlock || size > kMaxHeaderSize || size % kHeaderBlock != 0)
    corrupt(where, "header", "header size " + std::to_string(size) + " is invalid");
  return size;
}

ShardHeader decode_header(std::span<const uint8_t> b, const std::string& where) {
  const uint32_t size = peek_header_size(b, where);
  if (b.size() < size) corrupt(where, "header", "truncated header block");
  const uint32_t stored_crc = get_u32(&b[size - 4]);
  const uint32_t crc = crc32c(b.data(), size - 4);
  if (crc != stored_crc)
    corrupt(where, "header", "checksum mismatch (stored " + hex32(stored_crc) + ", computed " + hex32(crc) + ")");
  ShardHeader h;
  h.version = get_u32(&b[8]);
  h.header_size = size;
  h.align = get_u32(&b[16]);
  if (h.align != 1 && h.align != 4096) corrupt(where, "header", "record alignment " + std::to_string(h.align) + " is invalid");
  uint32_t comp = get_u32(&b[20]);
  if (comp > 1) corrupt(where, "header", "unknown compression " + std::to_string(comp));
  h.compression = static_cast<Compression>(comp);
  h.zstd_level = static_cast<int32_t>(get_u32(&b[24]));
  const uint32_t nfields = get_u32(&b[28]);
  if (nfields == 0 || nfields > kMaxFields) corrupt(where, "header", "field count " + std::to_string(nfields) + " is invalid");
  size_t p = 32;
  for (uint32_t i = 0; i < nfields; ++i) {
    if (p + 8 > size - 4) corrupt(where, "header", "schema runs past the header");
    Field f;
    uint8_t kind = b[p], dtype = b[p + 1];
    uint16_t len = get_u16(&b[p + 2]);
    if (kind > static_cast<uint8_t>(FieldKind::kTokens)) corrupt(where, "header", "unknown field kind " + std::to_string(kind));
    if (dtype > static_cast<uint8_t>(DType::kInt64)) corrupt(where, "header", "unknown dtype " + std::to_string(dtype));
    if (len == 0 || len > kMaxFieldName || p + 8 + len > size - 4) corrupt(where, "header", "bad field name length");
    f.kind = static_cast<FieldKind>(kind);
    f.dtype = static_cast<DType>(dtype);
    f.seq_len = get_u32(&b[p + 4]);
    f.name.assign(reinterpret_cast<const char*>(&b[p + 8]), len);
    h.schema.fields.push_back(std::move(f));
    p += 8 + len;
  }
  try {
    h.schema.validate();
  } catch (const Error& e) {
    corrupt(where, "header", std::string("bad schema: ") + e.what());
  }
  return h;
}

std::vector<uint8_t> encode_index(const Schema& schema, const std::vector<RecordLocation>& locs) {
  const size_t es = entry_size(schema);
  std::vector<uint8_t> out(locs.size() * es);
  uint8_t* p = out.data();
  for (const RecordLocation& l : locs) {
    put_u64(p, l.offset);
    put_u32(p + 8, l.stored_size);
    put_u32(p + 12, l.raw_size);
    put_u32(p + 16, l.crc);
    put_u32(p + 20, l.flags);
    for (size_t f = 0; f < l.field_sizes.size(); ++f) put_u32(p + kEntryFixed + 4 * f, l.field_sizes[f]);
    p += es;
  }
  return out;
}

std::array<uint8_t, kTrailerSize> encode_trailer(const Trailer& t) {
  std::array<uint8_t, kTrailerSize> b{};
  std::memcpy(b.data(), kTrailerMagic, 8);
  put_u64(&b[8], t.index_offset);
  put_u64(&b[16], t.index_size);
  put_u64(&b[24], t.record_count);
  put_u32(&b[32], t.entry_size);
  put_u32(&b[36], t.index_crc);
  put_u32(&b[40], t.header_crc);
  put_u32(&b[44], t.version);
  put_u64(&b[48], t.file_size);
  put_u32(&b[56], 0);
  put_u32(&b[60], crc32c(b.data(), 60));
  return b;
}

Trailer decode_trailer(std::span<const uint8_t> b, const std::string& where) {
  if (b.size() != kTrailerSize) corrupt(where, "trailer", "wrong size");
  if (std::memcmp(b.data(), kTrailerMagic, 8) != 0)
    corrupt(where, "trailer", "wrong magic (file truncated, or not a finished shard)");
  uint32_t stored = get_u32(&b[60]), crc = crc32c(b.data(), 60);
  if (stored != crc) corrupt(where, "trailer", "checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(crc) + ")");
  Trailer t;
  t.index_offset = get_u64(&b[8]);
  t.index_size = get_u64(&b[16]);
  t.record_count = get_u64(&b[24]);
  t.entry_size = get_u32(&b[32]);
  t.index_crc = get_u32(&b[36]);
  t.header_crc = get_u32(&b[40]);
  t.version = get_u32(&b[44]);
  t.file_size = get_u64(&b[48]);
  if (get_u32(&b[56]) != 0) corrupt(where, "trailer", "reserved field is not zero");
  if (t.version != kShardVersion)
    corrupt(where, "trailer", "version " + std::to_string(t.version) + " is not supported");
  return t;
}

std::vector<RecordLocation> decode_index(std::span<const uint8_t> b, const Schema& schema,
                                         uint64_t count, uint64_t data_begin, uint64_t data_end,
                                         uint32_t align, uint64_t max_record_bytes,
                                         const std::string& where) {
  const size_t es = entry_size(schema);
  if (b.size() != count * es) corrupt(where, "index", "size does not match the record count");
  std::vector<RecordLocation> locs(count);
  uint64_t prev_end = data_begin;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* p = b.data() + i * es;
    RecordLocation& l = locs[i];
    l.offset = get_u64(p);
    l.stored_size = get_u32(p + 8);
    l.raw_size = get_u32(p + 12);
    l.crc = get_u32(p + 16);
    l.flags = get_u32(p + 20);
    const std::string rec = "record " + std::to_string(i);
    if (l.flags & ~kRecordZstd) corrupt(where, rec, "unknown flags " + std::to_string(l.flags));
    if (l.offset < prev_end || l.offset > data_end || l.stored_size > data_end - l.offset)
      corrupt(where, rec, "offset " + std::to_string(l.offset) + " + size " + std::to_string(l.stored_size) +
                              " lies outside the data region or overlaps the previous record");
    if (align > 1 && (l.offset % align != 0 || l.offset - prev_end >= align))
      corrupt(where, rec, "offset " + std::to_string(l.offset) + " breaks the shard's " + std::to_string(align) + "-byte alignment");
    if (align == 1 && l.offset != prev_end)
      corrupt(where, rec, "offset " + std::to_string(l.offset) + " leaves a gap after the previous record");
    if (l.raw_size > max_record_bytes)
      throw_error(ErrorCode::kResourceExhausted, where + ": " + rec + ": raw size " + std::to_string(l.raw_size) +
                                                     " exceeds the limit of " + std::to_string(max_record_bytes));
    if (!(l.flags & kRecordZstd) && l.stored_size != l.raw_size)
      corrupt(where, rec, "uncompressed record with stored size != raw size");
    l.field_sizes.resize(schema.fields.size());
    uint64_t sum = 0;
    for (size_t f = 0; f < schema.fields.size(); ++f) {
      uint32_t fs = get_u32(p + kEntryFixed + 4 * f);
      const Field& field = schema.fields[f];
      if (field.kind == FieldKind::kInt64 && fs != 8)
        corrupt(where, rec, "int64 field '" + field.name + "' has size " + std::to_string(fs));
      if (field.kind == FieldKind::kTokens) {
        uint64_t row = (static_cast<uint64_t>(field.seq_len) + 1) * dtype_size(field.dtype);
        if (fs == 0 || fs % row != 0) corrupt(where, rec, "token field '" + field.name + "' is not whole rows");
      }
      l.field_sizes[f] = fs;
      sum += fs;
    }
    if (sum != l.raw_size) corrupt(where, rec, "field sizes do not add up to the raw size");
    prev_end = l.offset + l.stored_size;
  }
  if (count > 0 && align == 1 && prev_end != data_end)
    corrupt(where, "index", "records end at " + std::to_string(prev_end) + " but the index starts at " + std::to_string(data_end));
  if (count > 0 && align > 1 && data_end - prev_end >= align)
    corrupt(where, "index", "gap of " + std::to_string(data_end - prev_end) + " bytes before the index");
  if (count == 0 && data_end != data_begin)
    corrupt(where, "index", "empty shard with a non-empty data region");
  return locs;
}

}  // namespace stoker::internal
