// Names of enum values, for the public xxx_name() / xxx_from_name() pairs: each enum
// keeps one table of {value, name}, and these two functions read it, so a name and its
// parser cannot drift apart and every parser's error lists the accepted names.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "stoker/error.h"

namespace stoker::internal {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

/// The first name listed for `v`, or `unknown` when the table lacks it.
template <typename E, size_t N>
constexpr const char* enum_name(const EnumName<E> (&names)[N], E v, const char* unknown) noexcept {
  for (const EnumName<E>& n : names)
    if (n.value == v) return n.name;
  return unknown;
}

/// The value named `name` (any name the table lists for it), or nullopt: for a caller
/// that reports a bad name its own way (a warning, a default).
template <typename E, size_t N>
constexpr std::optional<E> enum_lookup(const EnumName<E> (&names)[N], std::string_view name) noexcept {
  for (const EnumName<E>& n : names)
    if (name == n.name) return n.value;
  return std::nullopt;
}

/// The value named `name` (any name the table lists for it). Throws kInvalidArgument
/// "<what> must be a, b or c, got 'x'".
template <typename E, size_t N>
E enum_from_name(const EnumName<E> (&names)[N], std::string_view name, std::string_view what) {
  if (const std::optional<E> v = enum_lookup(names, name)) return *v;
  std::string list;
  for (size_t i = 0; i < N; ++i) {
    if (i) list += i + 1 == N ? " or " : ", ";
    list += names[i].name;
  }
  throw_error(ErrorCode::kInvalidArgument,
              std::string(what) + " must be " + list + ", got '" + std::string(name.substr(0, 64)) + "'");
}

}  // namespace stoker::internal
