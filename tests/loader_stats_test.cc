// LoaderStats: summary(), to_json() and the verdict's evidence show the same figures
// (they once disagreed on the consumer's wait: 0 % in one, 10 % in the other, because
// one counted the wait for the first batch and the other did not).
#include <gtest/gtest.h>

#include <string>

#include "stoker/diagnose.h"
#include "stoker/loader.h"

namespace stoker {
namespace {

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

}  // namespace
}  // namespace stoker
