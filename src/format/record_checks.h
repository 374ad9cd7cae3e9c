// What a reader refuses in a record whose checksum is right, checked without decoding
// pixels, so that verify accepts only what the loader reads; and a record's
// `__key__` for messages about a record whose checksum is wrong.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "stoker/shard.h"

namespace stoker::internal {

/// Entry `i` of a `doc_starts` field: little-endian int32s, unaligned in the
/// decompressed record.
inline int64_t doc_start_at(std::span<const uint8_t> starts, size_t i) {
  int32_t v;
  std::memcpy(&v, starts.data() + 4 * i, 4);
  return v;
}

/// Empty when `starts` (little-endian int32s) are valid for a record of `rows` rows of
/// `seq_len`: at least one, the first <= 0, then increasing, all <= rows * seq_len, and
/// rows * seq_len - (the first) within int32 (no position overflows).
/// Else the reason, for an error naming the record.
std::string check_doc_starts(std::span<const uint8_t> starts, uint64_t rows, uint32_t seq_len);

/// The reader's content rules for one record's (decompressed) fields: a JPEG in an
/// image field that carries a fast-crop index must match it (check_fast_crop_index);
/// a `doc_starts` field must pass check_doc_starts against the token field's rows.
/// Returns "" or "field 'NAME': reason". Adds 1 to `*fast_crop_indexes` (when given)
/// for each valid fast-crop index seen.
std::string check_record_content(const Schema& schema, std::span<const std::span<const uint8_t>> fields,
                                 uint64_t* fast_crop_indexes = nullptr);

/// The `__key__` in stored record bytes whose checksum failed, for the message: ""
/// when the schema has none, the record is compressed or the sizes do not fit. The
/// bytes are unverified, so the key is quoted with non-printable bytes escaped.
std::string unverified_key(const Schema& schema, const RecordLocation& location, std::span<const uint8_t> stored);

/// " (__key__ 'KEY')", or "" for an empty key: to follow "record N" in a message.
std::string key_suffix(const std::string& key);

/// Throws kDataLoss "<where> (__key__ 'KEY'): checksum mismatch (stored 0x..., computed
/// 0x...)" when `stored`'s CRC32C is not the index's: the one message of every reader.
void check_record_crc(const Schema& schema, const RecordLocation& location, std::span<const uint8_t> stored,
                      const std::string& where);

}  // namespace stoker::internal
