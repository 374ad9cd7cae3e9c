// Byte layout of shard headers, index entries and trailers (shards/FORMAT.md).
// Encoders are used by ShardWriter; decoders check every field of untrusted input.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/shard.h"
#include "util/bytes.h"

namespace stoker::internal {

inline constexpr char kHeaderMagic[8] = {'S', 'T', 'K', 'S', 'H', 'A', 'R', 'D'};
inline constexpr char kTrailerMagic[8] = {'S', 'T', 'K', 'T', 'R', 'A', 'I', 'L'};
inline constexpr size_t kEntryFixed = 24;  // offset u64, stored u32, raw u32, crc u32, flags u32

inline size_t entry_size(const Schema& s) { return kEntryFixed + 4 * s.fields.size(); }

// A record's fields as spans of its raw (uncompressed, checked) bytes, in schema order.
inline std::vector<std::span<const uint8_t>> slice_fields(const uint8_t* raw, const RecordLocation& loc) {
  std::vector<std::span<const uint8_t>> fields;
  fields.reserve(loc.field_sizes.size());
  size_t off = 0;
  for (uint32_t size : loc.field_sizes) {
    fields.emplace_back(raw + off, size);
    off += size;
  }
  return fields;
}

struct Trailer {
  uint64_t index_offset = 0;
  uint64_t index_size = 0;
  uint64_t record_count = 0;
  uint32_t entry_size = 0;
  uint32_t index_crc = 0;
  uint32_t header_crc = 0;
  uint32_t version = kShardVersion;
  uint64_t file_size = 0;
};

std::vector<uint8_t> encode_header(const Schema& schema, const ShardWriterOptions& options);
std::vector<uint8_t> encode_index(const Schema& schema, const std::vector<RecordLocation>& locs);
std::array<uint8_t, kTrailerSize> encode_trailer(const Trailer& t);

/// Throws kDataLoss "<where>: trailer: <reason>".
Trailer decode_trailer(std::span<const uint8_t> bytes, const std::string& where);
/// Parses `count` entries; checks each against the data region [data_begin, data_end),
/// increasing non-overlapping order, alignment/gaps, size limits. Throws kDataLoss.
std::vector<RecordLocation> decode_index(std::span<const uint8_t> bytes, const Schema& schema,
                                         uint64_t count, uint64_t data_begin, uint64_t data_end,
                                         uint32_t align, uint64_t max_record_bytes,
                                         const std::string& where);
/// Parses and checks a whole header block: the header CRC is checked before anything
/// past the magic and size is interpreted, so a flipped bit reads as "checksum
/// mismatch". Throws kDataLoss.
ShardHeader decode_header(std::span<const uint8_t> block, const std::string& where);
/// Header size declared by the first block (before reading the rest). Throws kDataLoss.
uint32_t peek_header_size(std::span<const uint8_t> first_block, const std::string& where);

}  // namespace stoker::internal
