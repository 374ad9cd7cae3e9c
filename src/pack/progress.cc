#include "pack/progress.h"

#include <unistd.h>

#include <cstdio>

#include "util/bytes.h"

namespace stoker::internal {

namespace {

std::string human_duration(double s) {
  char buf[32];
  if (s < 0) s = 0;
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

}  // namespace

ProgressReporter::ProgressReporter(std::string label, uint64_t total_records, uint64_t total_bytes,
                                   bool enabled)
    : label_(std::move(label)),
      total_records_(total_records),
      total_bytes_(total_bytes),
      active_(enabled && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

ProgressReporter::~ProgressReporter() { finish(); }

double ProgressReporter::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string ProgressReporter::format_line(const std::string& label, uint64_t records, uint64_t bytes,
                                          uint64_t total_records, uint64_t total_bytes,
                                          double seconds) {
  const double s = seconds > 1e-9 ? seconds : 1e-9;
  char buf[256];
  std::string line = label + ": ";
  if (total_records) {
    std::snprintf(buf, sizeof buf, "%llu/%llu records", static_cast<unsigned long long>(records),
                  static_cast<unsigned long long>(total_records));
  } else {
    std::snprintf(buf, sizeof buf, "%llu records", static_cast<unsigned long long>(records));
  }
  line += buf;
  std::snprintf(buf, sizeof buf, ", %.0f rec/s, %s/s", records / s, format_bytes(bytes / s).c_str());
  line += buf;
  // ETA from whichever total is known, bytes preferred (records vary in size).
  double frac = 0;
  if (total_bytes) frac = static_cast<double>(bytes) / static_cast<double>(total_bytes);
  else if (total_records) frac = static_cast<double>(records) / static_cast<double>(total_records);
  if (frac > 0) {
    line += ", " + std::to_string(static_cast<int>(frac * 100 + 0.5)) + "%";
    if (frac < 1) line += ", ETA " + human_duration(seconds * (1 - frac) / frac);
  }
  return line;
}

void ProgressReporter::update(uint64_t records, uint64_t bytes) {
  if (!active_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  std::string line = format_line(label_, records, bytes, total_records_, total_bytes_, elapsed());
  std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressReporter::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r\x1b[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace stoker::internal
