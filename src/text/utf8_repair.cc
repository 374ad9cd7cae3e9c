#include "text/utf8_repair.h"

#include <algorithm>
#include <cstdint>
#include <span>

#include "util/utf8.h"

namespace stoker::internal {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Whether s[0..k) could begin a valid sequence: completed with continuation bytes
// (0x80 fits every position past the second, whose range is s's own) to some length.
bool valid_prefix(std::span<const uint8_t> s, size_t k) {
  uint8_t buf[4];
  std::copy(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), buf);
  for (size_t len = k; len <= 4; ++len) {
    if (len > k) buf[len - 1] = 0x80;
    if (utf8_error_offset(std::span<const uint8_t>(buf, len)) == len) return true;
  }
  return false;
}

// Length of the maximal subpart at s[0], which util's checker found invalid: the
// longest prefix that could still have begun a valid sequence (at least one byte).
size_t maximal_subpart(std::span<const uint8_t> s) {
  size_t k = 1;
  while (k < 4 && k < s.size() && valid_prefix(s, k + 1)) ++k;
  return k;
}

}  // namespace

std::string_view repair_utf8(std::string_view text, std::string& scratch) {
  std::span<const uint8_t> s(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  size_t bad = utf8_error_offset(s);
  if (bad == s.size()) return text;
  scratch.clear();
  scratch.reserve(text.size() + 8);
  size_t pos = 0;
  while (bad < s.size()) {
    scratch.append(text.substr(pos, bad - pos));
    scratch.append(kReplacement);
    pos = bad + maximal_subpart(s.subspan(bad));
    bad = pos + utf8_error_offset(s.subspan(pos));
  }
  scratch.append(text.substr(pos));
  return scratch;
}

}  // namespace stoker::internal
