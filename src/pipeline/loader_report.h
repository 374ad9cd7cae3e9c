// The Loader's periodic reports: every `report_interval_s` (or STOKER_REPORT) next()
// reports the bottleneck verdict of the interval with its evidence, and once more at
// the end of each epoch, as text or JSON lines, to the options' sink or to stderr.
// Interval verdicts are smoothed (BottleneckTracker) so a steady feed does not
// flip-flop between stages. LoaderStats' own text and JSON (loader.h) are made beside it.
//
// Threading: the consumer's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "stoker/verdict.h"
#include "stoker/loader.h"

namespace stoker::internal {

class LoaderReporter {
 public:
  /// Reads STOKER_REPORT ("10s", "10", "500ms") when the options set no interval, and
  /// STOKER_REPORT_JSON=1; kInvalidArgument for a value that is not a duration.
  explicit LoaderReporter(const LoaderOptions& opt);
  bool enabled() const noexcept { return tracker_ != nullptr; }
  /// A new epoch's run started.
  void start_run() noexcept { epoch_end_reported_ = false; }
  /// From next(): reports when the interval has passed since the last report (the first
  /// call starts the clock).
  void tick(const std::function<LoaderStats()>& snapshot, uint64_t epoch);
  /// From next() at the end of the epoch: reports once per run.
  void epoch_end(const std::function<LoaderStats()>& snapshot, uint64_t epoch);

 private:
  void report(const LoaderStats& s, bool epoch_end, uint64_t epoch);
  const LoaderOptions& opt_;
  double interval_s_ = 0;
  bool json_ = false;
  std::unique_ptr<BottleneckTracker> tracker_;
  std::chrono::steady_clock::time_point last_{};
  bool epoch_end_reported_ = false;
};

}  // namespace stoker::internal
