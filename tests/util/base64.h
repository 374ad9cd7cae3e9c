// Base64 (RFC 4648, with padding) of a byte string: what tiktoken ranks files store
// each token as. For tests and fuzz targets that write their own ranks files.
#pragma once

#include <cstdint>
#include <string>

namespace stoker::testing {

inline std::string base64(const std::string& s) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(s[i])) << 16;
    if (i + 1 < s.size()) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[i + 1])) << 8;
    if (i + 2 < s.size()) v |= static_cast<uint8_t>(s[i + 2]);
    out += alphabet[v >> 18];
    out += alphabet[(v >> 12) & 63];
    out += i + 1 < s.size() ? alphabet[(v >> 6) & 63] : '=';
    out += i + 2 < s.size() ? alphabet[v & 63] : '=';
  }
  return out;
}

}  // namespace stoker::testing
