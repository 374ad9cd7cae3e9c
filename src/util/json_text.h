// Small JSON text helpers shared by everything that prints JSON (stats, verdicts,
// doctor, the bench commands).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace stoker::internal {

/// A JSON string literal (quotes included) with control characters escaped.
inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

/// A JSON number (6 significant digits); null for NaN/inf.
inline std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace stoker::internal
