#include "pipeline/loader_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "stoker/verdict.h"
#include "stoker/error.h"
#include "util/json.h"

namespace stoker::internal {

LoaderReporter::LoaderReporter(const LoaderOptions& opt) : opt_(opt), interval_s_(opt.report_interval_s), json_(opt.report_json) {
  if (interval_s_ <= 0) {
    if (const char* env = std::getenv("STOKER_REPORT"); env && *env) {
      std::string v(env);
      double mul = 1;
      if (v.size() > 2 && v.substr(v.size() - 2) == "ms") {
        mul = 1e-3;
        v.resize(v.size() - 2);
      } else if (!v.empty() && v.back() == 's') {
        v.pop_back();
      }
      try {
        interval_s_ = std::stod(v) * mul;
      } catch (const std::exception&) {
        throw_error(ErrorCode::kInvalidArgument, "STOKER_REPORT='" + std::string(env) + "' is not a duration like 10s");
      }
    }
  }
  if (const char* env = std::getenv("STOKER_REPORT_JSON"); env && std::string(env) == "1") json_ = true;
  if (interval_s_ > 0) tracker_ = std::make_unique<BottleneckTracker>();
}

void LoaderReporter::tick(const std::function<LoaderStats()>& snapshot, uint64_t epoch) {
  if (!tracker_) return;
  const auto now = std::chrono::steady_clock::now();
  if (last_ == std::chrono::steady_clock::time_point{}) last_ = now;
  if (now - last_ < std::chrono::duration<double>(interval_s_)) return;
  last_ = now;
  report(snapshot(), false, epoch);
}

void LoaderReporter::epoch_end(const std::function<LoaderStats()>& snapshot, uint64_t epoch) {
  if (!tracker_ || epoch_end_reported_) return;
  epoch_end_reported_ = true;
  report(snapshot(), true, epoch);
}

void LoaderReporter::report(const LoaderStats& s, bool epoch_end, uint64_t epoch) {
  const Verdict& v = tracker_->update(s);
  std::string line;
  if (json_) {
    internal::Json j;
    if (epoch_end) {
      j["epoch_end"] = true;
      j["epoch"] = epoch;
    }
    const internal::Json verdict = internal::to_json_value(v);
    for (const auto& [k, val] : verdict.items()) j[k] = val;
    if (s.tune.enabled) j["tune"] = internal::to_json_value(s)["tune"];
    line = internal::json_text(j);
  } else {
    line = (epoch_end ? "epoch " + std::to_string(epoch) + " done: " : std::string()) + v.summary();
    // A remote dataset: the network stage of the same interval, whatever the verdict.
    if (v.figures.network.remote && v.bottleneck != Bottleneck::kNetwork)
      line += " | network: " + v.figures.network.summary(v.figures.wall_s);
    if (s.tune.enabled)
      line += " | auto: " + std::to_string(s.tune.threads) + " threads, " + std::to_string(s.tune.slots) + " slots" +
              (s.tune.settled ? " (settled)" : "") +
              (s.tune.changes.empty() ? std::string() : ", last change " + s.tune.changes.back());
  }
  if (opt_.report_sink) opt_.report_sink(line);
  else std::fprintf(stderr, "stoker: %s\n", line.c_str());
}

}  // namespace stoker::internal
