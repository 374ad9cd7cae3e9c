#include "pipeline/loader_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "stoker/diagnose.h"
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
    line = internal::json_text(j);
  } else {
    line = (epoch_end ? "epoch " + std::to_string(epoch) + " done: " : std::string()) + v.summary();
    // A remote dataset: the network stage of the same interval, whatever the verdict.
    if (v.figures.network.remote && v.bottleneck != Bottleneck::kNetwork)
      line += " | network: " + v.figures.network.summary(v.figures.wall_s);
  }
  if (opt_.report_sink) opt_.report_sink(line);
  else std::fprintf(stderr, "stoker: %s\n", line.c_str());
}

}  // namespace stoker::internal

namespace stoker {

std::string LoaderStats::to_json() const {
  using internal::figure;
  auto stage = [&](const StageStats& st) {
    internal::Json j;
    j["threads"] = st.threads;
    j["busy_s"] = figure(st.busy_s);
    j["wait_s"] = figure(st.wait_s);
    j["items"] = st.items;
    j["busy_frac"] = figure(st.busy_frac(wall_s));
    return j;
  };
  internal::Json j;
  j["wall_s"] = figure(wall_s);
  j["first_batch_s"] = figure(first_batch_s);
  j["batches"] = batches;
  j["samples"] = samples;
  j["samples_per_s"] = figure(wall_s > 0 ? samples / wall_s : 0);
  j["bytes_read"] = bytes_read;
  j["record_bytes"] = record_bytes;
  j["skipped"] = skipped;
  j["tokens"] = tokens;
  j["io"] = stage(io);
  j["decode"] = stage(decode);
  j["consumer_wait_s"] = figure(consumer_wait_s);
  j["consumer_wait_frac"] = figure(consumer_wait_frac());
  j["decode_queue_avg"] = figure(decode_queue_avg);
  j["slots"] = slots;
  j["slots_ready_avg"] = figure(slots_ready_avg);
  j["slots_free_avg"] = figure(slots_free_avg);
  j["io_engine"] = io_engine.engine;
  j["io_direct"] = io_engine.direct;
  j["io_fallback"] = io_engine.fallback_reason;
  if (network.remote) {
    internal::Json n = internal::to_json_value(network, wall_s, FeedFigures::from(*this).fetch_wait_frac());
    n["requests_in_flight"] = network.requests_in_flight;
    n["busy_frac"] = figure(wall_s > 0 ? std::min(1.0, network.busy_s / wall_s) : 0);
    j["network"] = std::move(n);
  } else {
    j["network"] = nullptr;
  }
  j["slot_memory"] = slot_memory;
  j["cpus"] = cpu_explanation;
  j["bottleneck"] = bottleneck;
  j["evidence"] = evidence;
  j["advice"] = advice;
  return internal::json_text(j);
}

double LoaderStats::consumer_wait_frac() const { return FeedFigures::from(*this).consumer_wait_frac(); }

std::string LoaderStats::summary() const {
  // The verdict's figures (diagnose.h), so summary and evidence never disagree.
  const auto busy = [&](const StageStats& s) { return 100 * std::min(1.0, s.busy_frac(wall_s)); };
  char b[512];
  std::snprintf(b, sizeof b,
                "%.0f samples/s over %.2f s; io %.0f%% busy; decode %u thread%s %.0f%% busy; consumer waited %.0f%%; "
                "%.1f of %u slots ready on average",
                wall_s > 0 ? samples / wall_s : 0.0, wall_s, busy(io), decode.threads,
                decode.threads == 1 ? "" : "s", busy(decode), 100 * consumer_wait_frac(), slots_ready_avg, slots);
  if (!network.remote) return b;
  return std::string(b) + "; network " + network.summary(wall_s);
}

}  // namespace stoker
