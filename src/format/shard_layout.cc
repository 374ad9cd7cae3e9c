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
  const uint32_t version = options.version;
  size_t need = 32;
  for (const Field& f : schema.fields) need += (version >= 2 ? 12 + 4 * f.shape.size() : 8) + f.name.size();
  need += 4;  // crc
  const size_t size = (need + kHeaderBlock - 1) / kHeaderBlock * kHeaderBlock;
  std::vector<uint8_t> h(size, 0);
  std::memcpy(h.data(), kHeaderMagic, 8);
  put_u32(&h[8], version);
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
    p += 8;
    if (version >= 2) {
      put_u32(&h[p], static_cast<uint32_t>(f.shape.size()));
      p += 4;
      for (uint32_t d : f.shape) {
        put_u32(&h[p], d);
        p += 4;
      }
    }
    std::memcpy(&h[p], f.name.data(), f.name.size());
    p += f.name.size();
  }
  put_u32(&h[size - 4], crc32c(h.data(), size - 4));
  return h;
}

namespace {
bool valid_header_size(uint32_t size) {
  return size >= kHeaderBlock && size <= kMaxHeaderSize && size % kHeaderBlock == 0;
}
[[noreturn]] void header_crc_mismatch(const std::string& where, uint32_t stored, uint32_t computed) {
  corrupt(where, "header", "checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) + ")");
}
}  // namespace

uint32_t peek_header_size(std::span<const uint8_t> b, const std::string& where) {
  if (b.size() < 32) corrupt(where, "header", "shorter than 32 bytes");
  if (std::memcmp(b.data(), kHeaderMagic, 8) != 0) corrupt(where, "header", "wrong magic (not a stoker shard)");
  const uint32_t size = get_u32(&b[12]);
  if (!valid_header_size(size)) {
    // The size field may itself be the flipped bit: when the first block does not
    // match its checksum either, say so rather than blame the size.
    if (b.size() >= kHeaderBlock) {
      const uint32_t stored = get_u32(&b[kHeaderBlock - 4]), crc = crc32c(b.data(), kHeaderBlock - 4);
      if (stored != crc) header_crc_mismatch(where, stored, crc);
    }
    corrupt(where, "header", "header size " + std::to_string(size) + " is invalid");
  }
  return size;
}

ShardHeader decode_header(std::span<const uint8_t> b, const std::string& where) {
  const uint32_t size = peek_header_size(b, where);
  if (b.size() < size) corrupt(where, "header", "truncated header block");
  // The checksum comes before any other field is believed: a flipped bit anywhere in
  // the block is reported as what it is, not as a strange version or schema.
  const uint32_t stored_crc = get_u32(&b[size - 4]);
  const uint32_t crc = crc32c(b.data(), size - 4);
  if (crc != stored_crc) header_crc_mismatch(where, stored_crc, crc);
  ShardHeader h;
  h.version = get_u32(&b[8]);
  if (h.version < kShardVersionMin || h.version > kShardVersion)
    corrupt(where, "header", "version " + std::to_string(h.version) + " is not supported (this stoker reads versions " +
                                 std::to_string(kShardVersionMin) + ".." + std::to_string(kShardVersion) + ")");
  h.header_size = size;
  h.align = get_u32(&b[16]);
  if (h.align != 1 && h.align != 4096) corrupt(where, "header", "record alignment " + std::to_string(h.align) + " is invalid");
  uint32_t comp = get_u32(&b[20]);
  if (comp > 1) corrupt(where, "header", "unknown compression " + std::to_string(comp));
  h.compression = static_cast<Compression>(comp);
  h.zstd_level = static_cast<int32_t>(get_u32(&b[24]));
  const uint32_t nfields = get_u32(&b[28]);
  if (nfields == 0 || nfields > kMaxFields) corrupt(where, "header", "field count " + std::to_string(nfields) + " is invalid");
  const uint8_t max_kind = h.version >= 2 ? kMaxFieldKind : static_cast<uint8_t>(FieldKind::kTokens);
  const uint8_t max_dtype = h.version >= 2 ? kMaxDType : static_cast<uint8_t>(DType::kInt64);
  const size_t end = size - 4;
  size_t p = 32;
  for (uint32_t i = 0; i < nfields; ++i) {
    const std::string fd = "field descriptor " + std::to_string(i) + ": ";
    if (p + 8 > end) corrupt(where, "header", "schema runs past the header");
    Field f;
    uint8_t kind = b[p], dtype = b[p + 1];
    uint16_t len = get_u16(&b[p + 2]);
    if (kind > max_kind)
      corrupt(where, "header", fd + "unknown field kind " + std::to_string(kind) + " for version " + std::to_string(h.version));
    if (dtype > max_dtype)
      corrupt(where, "header", fd + "unknown dtype " + std::to_string(dtype) + " for version " + std::to_string(h.version));
    f.kind = static_cast<FieldKind>(kind);
    f.dtype = static_cast<DType>(dtype);
    f.seq_len = get_u32(&b[p + 4]);
    p += 8;
    if (h.version >= 2) {
      if (p + 4 > end) corrupt(where, "header", "schema runs past the header");
      const uint32_t ndim = get_u32(&b[p]);
      p += 4;
      if (ndim > kMaxDims) corrupt(where, "header", fd + std::to_string(ndim) + " dimensions, more than " + std::to_string(kMaxDims));
      if (p + 4 * ndim > end) corrupt(where, "header", "schema runs past the header");
      for (uint32_t d = 0; d < ndim; ++d, p += 4) f.shape.push_back(get_u32(&b[p]));
    }
    if (len == 0 || len > kMaxFieldName || p + len > end) corrupt(where, "header", fd + "bad field name length");
    f.name.assign(reinterpret_cast<const char*>(&b[p]), len);
    p += len;
    h.schema.fields.push_back(std::move(f));
  }
  for (size_t q = p; q < end; ++q)
    if (b[q] != 0) corrupt(where, "header", "padding after the schema is not zero");
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
  if (t.version < kShardVersionMin || t.version > kShardVersion)
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
      if (std::string why = schema.fields[f].check_size(fs); !why.empty()) corrupt(where, rec, why);
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
