#include "util/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "stoker/error.h"

namespace stoker::internal {

double figure(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return std::strtod(b, nullptr);
}

Json parse_json(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw_error(ErrorCode::kInvalidArgument, what + ": not valid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  }
}

}  // namespace stoker::internal
