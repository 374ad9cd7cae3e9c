// JSON pieces for text assembled by hand. Only src/pipeline/loader.cc
// (LoaderStats::to_json) still does that; both helpers go through the one writer
// (util/json.h), and new code builds an internal::Json instead.
#pragma once

#include <string>

#include "util/json.h"

namespace stoker::internal {

/// A JSON string literal (quotes included).
inline std::string json_str(const std::string& s) { return json_text(Json(s)); }

/// A JSON number (a figure: 6 significant digits); null for NaN/inf.
inline std::string json_num(double v) { return json_text(Json(figure(v))); }

}  // namespace stoker::internal
