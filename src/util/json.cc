#include "util/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "stoker/error.h"

namespace stoker::internal {

double figure(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return std::strtod(b, nullptr);
}

JsonStatsWriter::JsonStatsWriter() : root_(Json::object()), open_{&root_} {}

void JsonStatsWriter::begin_group(const char* name) {
  Json& group = top()[name];
  group = Json::object();
  open_.push_back(&group);
}

void JsonStatsWriter::end_group() {
  if (open_.size() > 1) open_.pop_back();
}

Json JsonStatsWriter::take() {
  open_.assign(1, &root_);
  return std::exchange(root_, Json::object());
}

}  // namespace stoker::internal
