// JSON in stoker: nlohmann::json, and one writer for everything stoker prints or returns
// as JSON (the tool's --json outputs, stats, verdicts, the doctor's report).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "stoker/stats.h"

namespace stoker {
struct Verdict;
struct Check;
struct DoctorReport;
struct StagerStats;
struct NetworkStats;
struct LoaderStats;
}  // namespace stoker

namespace stoker::internal {

/// Keys stay in the order they were set: a reader scanning the text sees the headline
/// figures first, and the text of one run reads like the next.
using Json = nlohmann::ordered_json;

/// The one writer: compact, one line; NaN and infinities as null; bytes that are not
/// UTF-8 (paths are bytes) replaced by U+FFFD rather than throwing.
inline std::string json_text(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

/// A measured figure as it is reported: 6 significant digits (a rate of 640 samples/s
/// reads 640, not 639.99999999999989); NaN and infinities stay as they are (null).
double figure(double v);

/// Builds the JSON object of a stats struct's visit() (stats.h): measurements as
/// figure() reports them, none as null, groups as nested objects, keys in visit order.
class JsonStatsWriter final : public StatsVisitor {
 public:
  JsonStatsWriter();
  JsonStatsWriter(const JsonStatsWriter&) = delete;  // open_ points into root_
  JsonStatsWriter& operator=(const JsonStatsWriter&) = delete;
  void count(const char* name, uint64_t value) override { top()[name] = value; }
  void integer(const char* name, int64_t value) override { top()[name] = value; }
  void figure(const char* name, double value) override { top()[name] = internal::figure(value); }
  void flag(const char* name, bool value) override { top()[name] = value; }
  void text(const char* name, const std::string& value) override { top()[name] = value; }
  void none(const char* name) override { top()[name] = nullptr; }
  void begin_group(const char* name) override;
  void end_group() override;
  /// The object built so far (every group ended).
  Json take();

 private:
  Json& top() { return *open_.back(); }
  Json root_;
  std::vector<Json*> open_;  // the groups begun and not ended, innermost last
};

/// The JSON of the library's reports, as values a caller can embed in its own (the
/// public to_json() methods are json_text of these).
Json to_json_value(const Verdict& v);       // diagnose/verdict.cc
/// null for a local dataset; the network stage's rates over `wall_s` (diagnose/verdict.cc).
Json to_json_value(const NetworkStats& n, double wall_s, double fetch_wait_frac);
Json to_json_value(const Check& c);         // diagnose/doctor.cc
Json to_json_value(const DoctorReport& r);  // diagnose/doctor.cc
Json to_json_value(const StagerStats& s);   // stage/stager.cc
Json to_json_value(const LoaderStats& s);   // diagnose/loader_stats.cc

}  // namespace stoker::internal
