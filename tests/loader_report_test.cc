// The loader's reports: LoaderStats' summary(), to_json() and the verdict's evidence show
// the same figures (they once disagreed on the consumer's wait: 0 % in one, 10 % in the
// other, because one counted the wait for the first batch and the other did not);
// periodic and epoch-end report lines carry the verdict; stats() may be read from any
// thread while epochs run.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "stoker/diagnose.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;
using testing::image_options;
using testing::token_options;

// A run of 10 s whose first batch took 1 s (all of it waited for) and that waited
// another 0.9 s afterwards: 10 % of the steady state, 19 % of the wall time.
LoaderStats slow_start() {
  LoaderStats s;
  s.wall_s = 10;
  s.first_batch_s = 1;
  s.batches = 100;
  s.samples = 6400;
  s.io.threads = 1;
  s.io.busy_s = 2;
  s.decode.threads = 4;
  s.decode.busy_s = 4 * 10 * 1.02;  // booked at task end: may exceed the wall time a little
  s.consumer_wait_s = 1.9;
  s.slots = 4;
  s.slots_ready_avg = 0.5;
  return s;
}

std::string after(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return "<no '" + key + "' in: " + text + ">";
  const size_t end = text.find_first_of(",;", at);
  return text.substr(at, end - at);
}

TEST(LoaderStats, SummaryJsonAndEvidenceShowTheSameConsumerWait) {
  LoaderStats s = slow_start();
  EXPECT_NEAR(s.consumer_wait_frac(), 0.1, 1e-9);
  const Verdict v = diagnose(FeedFigures::from(s));
  const std::string summary = s.summary();
  EXPECT_EQ(after(summary, "consumer waited"), "consumer waited 10%") << summary;
  EXPECT_EQ(after(v.evidence, "consumer waited"), "consumer waited 10%") << v.evidence;
  EXPECT_NE(s.to_json().find("\"consumer_wait_frac\":0.1,"), std::string::npos) << s.to_json();
  // Busy fractions are capped at 100 % in both.
  EXPECT_NE(summary.find("decode 4 threads 100% busy"), std::string::npos) << summary;
}

TEST(LoaderReport, PeriodicAndEpochEndReportsCarryTheVerdict) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 48});
  auto o = image_options(dir.str());
  o.report_interval_s = 0.001;
  o.report_json = true;
  std::vector<std::string> lines;
  o.report_sink = [&](const std::string& line) { lines.push_back(line); };
  Loader l(o);
  uint64_t batches = 0;
  while (auto b = l.next()) ++batches;
  ASSERT_FALSE(lines.empty());
  for (const auto& line : lines) {
    EXPECT_EQ(line.front(), '{');
    EXPECT_NE(line.find("\"bottleneck\":"), std::string::npos) << line;
  }
  EXPECT_NE(lines.back().find("\"epoch_end\":true"), std::string::npos) << lines.back();
  // The whole-run verdict is in stats() too.
  LoaderStats s = l.stats();
  EXPECT_NE(s.bottleneck, "");
  EXPECT_NE(s.to_json().find("\"bottleneck\":"), std::string::npos);
}

// stats() is promised to any thread: a monitor polls it while the consumer runs epochs
// (set_epoch restarts the run under it). Under TSan this is the test of that promise.
TEST(LoaderReport, StatsFromAnotherThreadWhileEpochsRun) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 48});
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str() + "/tok", 20000, L, 8, true);
  for (const std::string& path : {dir.str(), dir.str() + "/tok"}) {
    SCOPED_TRACE(path);
    auto o = path == dir.str() ? image_options(path) : token_options(path);
    Loader l(o);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> polls{0}, most_seen{0};
    std::thread monitor([&] {
      while (!done) {
        const LoaderStats s = l.stats();
        EXPECT_GE(s.wall_s, 0.0);
        EXPECT_LE(s.samples, l.epoch_samples());
        most_seen = std::max<uint64_t>(most_seen, s.samples);
        ++polls;
      }
    });
    uint64_t last_epoch_samples = 0;
    for (uint64_t e = 0; e < 3; ++e) {
      l.set_epoch(e);
      last_epoch_samples = 0;
      while (auto b = l.next()) last_epoch_samples += b->size();
    }
    done = true;
    monitor.join();
    EXPECT_GT(polls.load(), 0u);
    EXPECT_LE(most_seen.load(), last_epoch_samples);
    EXPECT_EQ(l.stats().samples, last_epoch_samples);
  }
}

}  // namespace
}  // namespace stoker
