// UTF-8 validation for text fields (packers and the writer refuse invalid text, so
// readers can hand text fields to Python's str without a decode error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace stoker::internal {

/// Offset of the first byte that breaks UTF-8 (RFC 3629: no overlongs, no surrogates,
/// nothing above U+10FFFF), or bytes.size() when the whole span is valid.
inline size_t utf8_error_offset(std::span<const uint8_t> s) noexcept {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((s[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return n;
}

}  // namespace stoker::internal
