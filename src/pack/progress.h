// Progress of a long-running tool (pack, extract, sample) on a terminal.
//
// Shows records/s, bytes/s and an ETA on one self-overwriting line of stderr, at most
// a few times a second, and only when stderr is a terminal (isatty): in logs and
// pipes it prints nothing. update() is cheap (a clock read) when nothing is printed.
//
// Threading: one thread calls update()/finish().
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace stoker::internal {

class ProgressReporter {
 public:
  /// `label` starts the line ("pack"); totals of 0 mean unknown (no ETA).
  /// `enabled` = false silences it even on a terminal.
  ProgressReporter(std::string label, uint64_t total_records, uint64_t total_bytes,
                   bool enabled = true);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// Reports cumulative counts.
  void update(uint64_t records, uint64_t bytes);
  /// Clears the progress line (if one was drawn). Idempotent.
  void finish();
  /// Seconds since construction.
  double elapsed() const;
  bool active() const noexcept { return active_; }

  /// The line that would be drawn (exposed for tests).
  static std::string format_line(const std::string& label, uint64_t records, uint64_t bytes,
                                 uint64_t total_records, uint64_t total_bytes, double seconds);

 private:
  std::string label_;
  uint64_t total_records_, total_bytes_;
  bool active_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace stoker::internal
