// Strict integer parsing for text from files, the environment and the command line:
// the whole string must be a plain decimal number (no sign unless signed, no spaces, no
// trailing text) that fits the type. std::from_chars does the work; this only insists
// that it consumed everything.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace stoker::internal {

/// `s` as a decimal T, or nullopt when it is empty, has anything but digits (and a
/// leading '-' for signed T), or overflows T.
template <typename T>
std::optional<T> parse_decimal(std::string_view s) noexcept {
  T v{};
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v, 10);
  if (s.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

}  // namespace stoker::internal
