// The bottleneck verdict: constructed figures (each rule and its hysteresis), interval
// arithmetic, the smoothing tracker, real pipelines built to be storage-, decode- and
// consumer-bound.
#include "stoker/diagnose.h"
#include "stoker/stage.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/datasets.h"
#include "util/test_util.h"

namespace fs = std::filesystem;

namespace stoker {
namespace {

using testing::TempDir;

// ---- constructed figures ---------------------------------------------------------------

// Figures of a 10 s interval, past startup: the caller sets the fractions that matter.
FeedFigures figures(double consumer_wait_frac, unsigned dec_threads, double dec_busy_frac, double queue_avg,
                    double slots_ready, std::optional<double> copy_busy_frac = std::nullopt) {
  FeedFigures f;
  f.wall_s = 10;
  f.samples = 6400;
  f.batches = 100;
  f.bytes_read = 700u << 20;
  f.io.threads = 1;
  f.io.busy_s = 1;
  f.decode.threads = dec_threads;
  f.decode.busy_s = dec_busy_frac * dec_threads * 10;
  f.decode.items = 6400;
  f.consumer_wait_s = consumer_wait_frac * 10;
  f.decode_queue_avg = queue_avg;
  f.slots_ready_avg = slots_ready;
  f.slots = 4;
  f.io_engine = "uring";
  f.slot_memory = "host";
  if (copy_busy_frac) {
    StageStats c;
    c.threads = 1;
    c.busy_s = *copy_busy_frac * 10;
    f.copy = c;
  }
  return f;
}

struct Case {
  const char* name;
  FeedFigures f;
  Bottleneck want;
  const char* evidence_has;
};

TEST(Verdict, ConstructedFiguresNameTheStage) {
  DiagnoseOptions o;
  o.cpus_available = 16;
  const Case cases[] = {
      {"decoders busy, consumer waits", figures(0.31, 8, 0.97, 6, 0.2), Bottleneck::kDecode,
       "decode bound: 8 threads 97% busy, consumer waited 31%, 0.2 of 4 slots ready"},
      {"decoders descheduled but backlogged", figures(0.5, 2, 0.6, 10, 0.1), Bottleneck::kDecode, "5.0 records queued"},
      {"decoders starved", figures(0.62, 4, 0.12, 0.1, 0.0), Bottleneck::kStorage,
       "storage bound: consumer waited 62%, decoders starved (4 threads 12% busy, 0.1 records queued)"},
      {"consumer rarely waits", figures(0.02, 4, 0.4, 0.5, 3.0), Bottleneck::kConsumer,
       "consumer bound: consumer waited 2%, 3.0 of 4 slots ready"},
      {"copy stream saturated", figures(0.4, 4, 0.3, 0.2, 3.1, 0.95), Bottleneck::kCopy,
       "copy bound: copy stream 95% busy, consumer waited 40%, 3.1 of 4 slots ready"},
      {"host batches pile up before a half-busy copy", figures(0.4, 4, 0.3, 0.2, 3.5, 0.6), Bottleneck::kCopy,
       "copy stream 60% busy"},
      {"copy present but idle, decoders busy", figures(0.4, 4, 0.95, 3, 0.1, 0.2), Bottleneck::kDecode, "decode bound"},
      {"copy and decode both saturated: the busier", figures(0.4, 4, 0.85, 3, 0.5, 0.99), Bottleneck::kCopy,
       "copy bound"},
      {"copy idle, consumer fine", figures(0.01, 4, 0.3, 0.2, 3.0, 0.1), Bottleneck::kConsumer, "copy stream 10% busy"},
      {"loader ring full, trainer waiting, copy stream not busy: staging is behind",
       figures(0.3, 2, 0.25, 0.1, 3.6, 0.15), Bottleneck::kCopy, "3.6 of 4 slots ready"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Verdict v = diagnose(c.f, o);
    EXPECT_EQ(bottleneck_name(v.bottleneck), std::string(bottleneck_name(c.want)));
    EXPECT_EQ(v.raw, c.want);
    EXPECT_NE(v.evidence.find(c.evidence_has), std::string::npos) << v.evidence;
    EXPECT_FALSE(v.advice.empty());
  }
}

TEST(Verdict, AdviceFollowsTheSituation) {
  DiagnoseOptions o;
  o.cpus_available = 16;
  EXPECT_NE(diagnose(figures(0.3, 2, 0.97, 6, 0.2), o).advice.find("add decode threads (2 in use, 16 CPUs)"),
            std::string::npos);
  o.cpus_available = 2;
  EXPECT_NE(diagnose(figures(0.3, 2, 0.97, 6, 0.2), o).advice.find("DCT scaling"), std::string::npos);
  FeedFigures tok = figures(0.3, 2, 0.97, 6, 0.2);
  tok.tokens = true;
  EXPECT_NE(diagnose(tok, o).advice.find("pack without --zstd"), std::string::npos);
  LoaderStats ts;
  ts.samples = ts.decode.items = 320;
  EXPECT_FALSE(FeedFigures::from(ts).tokens);
  ts.tokens = true;  // the loader says so: rows are counted like images
  EXPECT_TRUE(FeedFigures::from(ts).tokens);
  FeedFigures copy = figures(0.4, 4, 0.3, 0.2, 3.1, 0.95);
  EXPECT_NE(diagnose(copy, o).advice.find("pinned host memory"), std::string::npos);
  copy.slot_memory = "pinned";
  const std::string pinned_advice = diagnose(copy, o).advice;
  EXPECT_EQ(pinned_advice.find("use pinned"), std::string::npos);
  EXPECT_NE(pinned_advice.find("uint8"), std::string::npos);
  FeedFigures st = figures(0.62, 4, 0.12, 0.1, 0.0);
  EXPECT_EQ(diagnose(st, o).advice.find("io_uring"), std::string::npos);
  st.io_engine = "pread";
  EXPECT_NE(diagnose(st, o).advice.find("io_uring is not in use"), std::string::npos);
}

TEST(Verdict, DecodeAdviceProposesFastCropOnlyWhereItIsMissing) {
  DiagnoseOptions o;
  o.cpus_available = 8;  // every CPU decodes: the advice is about decoding less
  FeedFigures f = figures(0.31, 8, 0.97, 6, 0.2);
  ASSERT_EQ(diagnose(f, o).bottleneck, Bottleneck::kDecode);
  EXPECT_NE(diagnose(f, o).advice.find("--fast-crop"), std::string::npos) << diagnose(f, o).advice;
  f.fast_crop = true;  // packed with --fast-crop already
  EXPECT_EQ(diagnose(f, o).advice.find("--fast-crop"), std::string::npos) << diagnose(f, o).advice;
  EXPECT_NE(diagnose(f, o).advice.find("training size"), std::string::npos) << diagnose(f, o).advice;
}

TEST(Verdict, HysteresisKeepsTheCurrentVerdictNearThresholds) {
  // Consumer waited 12%: above the 10% threshold, inside the 5% band.
  const FeedFigures f = figures(0.12, 4, 0.95, 4, 0.5);
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kDecode);
  EXPECT_EQ(diagnose(f, {}, Bottleneck::kConsumer).bottleneck, Bottleneck::kConsumer);
  // Decoders 47% busy, short queue: starved (below 50%) but inside the band.
  const FeedFigures g = figures(0.5, 4, 0.47, 0.5, 0.1);
  EXPECT_EQ(diagnose(g).bottleneck, Bottleneck::kStorage);
  EXPECT_EQ(diagnose(g, {}, Bottleneck::kDecode).bottleneck, Bottleneck::kDecode);
  // Far outside the band the current verdict does not matter.
  EXPECT_EQ(diagnose(figures(0.5, 4, 0.2, 0, 0), {}, Bottleneck::kDecode).bottleneck, Bottleneck::kStorage);
}

TEST(Verdict, PartlyBusyDecodersAgainstTheStorage) {
  // Decoders 70% busy with a short queue: the larger share is decode ...
  FeedFigures f = figures(0.5, 4, 0.7, 0.5, 0.1);
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kDecode);
  // ... unless the IO engine had reads in flight more of the time.
  f.io_engine_busy_s = 9.5;
  const Verdict v = diagnose(f);
  EXPECT_EQ(v.bottleneck, Bottleneck::kStorage);
  EXPECT_NE(v.evidence.find("reads in flight 95%"), std::string::npos) << v.evidence;
  f.io_engine_busy_s = 5;
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kDecode);
}

TEST(Verdict, TooShortAnIntervalIsUnknown) {
  FeedFigures f = figures(0.5, 4, 0.9, 1, 1);
  f.batches = 0;
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kUnknown);
  f.batches = 3;
  f.wall_s = 0.01;
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kUnknown);
  // An interval that is all start-up: the consumer waited only for the first batch.
  f.wall_s = 1.26;
  f.startup_s = 1.25;
  f.consumer_wait_s = 1.25;
  f.batches = 1;
  f.decode.busy_s = 0.1;
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kUnknown);
  f.wall_s = 2.4;
  f.consumer_wait_s = 2.3;
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kStorage) << diagnose(f).summary();
}

TEST(Verdict, JsonLineCarriesVerdictAndEvidence) {
  Verdict v = diagnose(figures(0.4, 4, 0.3, 0.2, 3.1, 0.95));
  const std::string j = v.to_json();
  EXPECT_EQ(j.find('\n'), std::string::npos);
  EXPECT_EQ(j.rfind("{\"bottleneck\":\"copy\",\"raw\":\"copy\",\"evidence\":\"copy bound: ", 0), 0u) << j;
  const nlohmann::json p = nlohmann::json::parse(j);
  EXPECT_FALSE(p["advice"].get<std::string>().empty()) << j;
  EXPECT_DOUBLE_EQ(p["samples_per_s"].get<double>(), 640) << j;
  EXPECT_DOUBLE_EQ(p["consumer_wait_frac"].get<double>(), 0.4) << j;
  EXPECT_DOUBLE_EQ(p["decode_busy_frac"].get<double>(), 0.3) << j;
  EXPECT_DOUBLE_EQ(p["copy_busy_frac"].get<double>(), 0.95) << j;
  EXPECT_EQ(p["slots"], 4) << j;
  EXPECT_TRUE(nlohmann::json::parse(diagnose(figures(0.4, 4, 0.3, 0.2, 0.1)).to_json())["copy_busy_frac"].is_null());
}

// A remote dataset's figures over the same 10 s: `fetch_wait_frac` of it the readers
// blocked on shards still on their way, 48 MB and 80 requests fetched, 3 of 25 shards
// in place.
FeedFigures remote_figures(FeedFigures f, double fetch_wait_frac) {
  f.network.remote = true;
  f.network.bytes_fetched = 480'000'000;
  f.network.requests = 80;
  f.network.request_s = 60;
  f.network.busy_s = 9;
  f.network.fetch_wait_s = fetch_wait_frac * f.wall_s;
  f.network.hits = 3;
  f.network.misses = 22;
  f.network.cache_bytes = 120'000'000;
  f.network.cache_limit = 1'000'000'000;
  return f;
}

TEST(Verdict, ReadersWaitingOnFetchesNameTheNetworkWithItsFigures) {
  // Decoders starved and the readers blocked on fetches 85% of the time.
  const Verdict v = diagnose(remote_figures(figures(0.62, 4, 0.12, 0.1, 0.0), 0.85));
  EXPECT_EQ(v.bottleneck, Bottleneck::kNetwork) << v.summary();
  for (const char* want : {"network bound", "fetched 48.0 MB/s", "6.0 requests in flight", "cache hit rate 12%",
                           "readers waited on fetches 85% of the time", "consumer waited 62%"})
    EXPECT_NE(v.evidence.find(want), std::string::npos) << want << " not in: " << v.evidence;
  EXPECT_NE(v.advice.find("cache_prefetch"), std::string::npos) << v.advice;
  const auto j = nlohmann::json::parse(v.to_json());
  EXPECT_EQ(j["bottleneck"], "network");
  EXPECT_DOUBLE_EQ(j["network"]["bytes_per_s"].get<double>(), 48e6) << j;
  EXPECT_DOUBLE_EQ(j["network"]["requests_per_s"].get<double>(), 8) << j;
  EXPECT_DOUBLE_EQ(j["network"]["requests_in_flight_avg"].get<double>(), 6) << j;
  EXPECT_DOUBLE_EQ(j["network"]["hit_rate"].get<double>(), 0.12) << j;
  EXPECT_EQ(j["network"]["cache_limit"], 1'000'000'000u) << j;
  // The same figures from a local dataset: storage, and no network object.
  EXPECT_EQ(diagnose(figures(0.62, 4, 0.12, 0.1, 0.0)).bottleneck, Bottleneck::kStorage);
  EXPECT_TRUE(nlohmann::json::parse(diagnose(figures(0.62, 4, 0.12, 0.1, 0.0)).to_json())["network"].is_null());
  // Readers that rarely wait on fetches: the local reads are the limit.
  EXPECT_EQ(diagnose(remote_figures(figures(0.62, 4, 0.12, 0.1, 0.0), 0.05)).bottleneck, Bottleneck::kStorage);
  // Saturated decoders stay the verdict even while fetches are waited on; a consumer
  // that does not wait stays consumer bound.
  EXPECT_EQ(diagnose(remote_figures(figures(0.31, 8, 0.97, 6, 0.2), 0.5)).bottleneck, Bottleneck::kDecode);
  EXPECT_EQ(diagnose(remote_figures(figures(0.02, 4, 0.4, 0.5, 3.0), 0.5)).bottleneck, Bottleneck::kConsumer);
}

// A cold epoch of a global shuffle: the first batch waited 6 s of 10 on fetches, the
// decoders were saturated after it. The network cost the most.
TEST(Verdict, AFirstBatchThatWaitedOnFetchesForMuchOfTheRunNamesTheNetwork) {
  FeedFigures f = remote_figures(figures(0.3, 2, 0.97, 6, 0.2), 0.6);
  f.startup_s = 6.2;
  f.consumer_wait_s = 6.2 + 0.3 * 3.8;
  f.network.startup_fetch_wait_s = 6;
  const Verdict v = diagnose(f);
  EXPECT_EQ(v.bottleneck, Bottleneck::kNetwork) << v.summary();
  EXPECT_NE(v.evidence.find("readers waited on fetches 6.00 s before the first batch (60% of 10.00 s)"),
            std::string::npos) << v.evidence;
  EXPECT_NE(v.advice.find("chunk_local"), std::string::npos) << v.advice;
  // The same with a short wait for the first shards: the steady state (decode) decides.
  f.network.startup_fetch_wait_s = 0.5;
  f.network.fetch_wait_s = 0.5;
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kDecode) << diagnose(f).summary();
}

TEST(Verdict, NetworkFiguresOfAnIntervalAreItsDifferences) {
  FeedFigures a = remote_figures(figures(0.5, 4, 0.2, 0.1, 0.0), 0.5);
  FeedFigures b = remote_figures(figures(0.5, 4, 0.2, 0.1, 0.0), 0.5);
  b.wall_s = 20;
  b.samples = 12800;
  b.batches = 200;
  b.decode.items = 12800;
  b.network.bytes_fetched += 100'000'000;
  b.network.requests += 20;
  b.network.hits += 25;
  b.network.fetch_wait_s += 1;
  const FeedFigures d = FeedFigures::between(a, b);
  EXPECT_EQ(d.network.bytes_fetched, 100'000'000u);
  EXPECT_EQ(d.network.requests, 20u);
  EXPECT_EQ(d.network.hits, 25u);
  EXPECT_EQ(d.network.misses, 0u);
  EXPECT_DOUBLE_EQ(d.network.hit_rate(), 1.0);
  EXPECT_DOUBLE_EQ(d.network.fetch_wait_s, 1.0);
  EXPECT_EQ(d.network.cache_limit, b.network.cache_limit);
}

TEST(Verdict, NamesRoundTrip) {
  for (Bottleneck b : {Bottleneck::kUnknown, Bottleneck::kStorage, Bottleneck::kDecode, Bottleneck::kCopy,
                       Bottleneck::kConsumer, Bottleneck::kNetwork})
    EXPECT_EQ(bottleneck_from_name(bottleneck_name(b)), b);
  try {
    bottleneck_from_name("gpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

// ---- interval arithmetic -----------------------------------------------------------------

TEST(FeedFiguresTest, BetweenSubtractsCountersAndReweighsMeans) {
  LoaderStats a, b;
  a.wall_s = 2;
  a.first_batch_s = 0.5;
  a.batches = 10;
  a.samples = 640;
  a.decode = {4, 6.0, 2.0, 640};
  a.consumer_wait_s = 1.0;
  a.slots_ready_avg = 1.0;  // over 10 batches
  a.decode_queue_avg = 2.0;  // over 640 samples
  a.slots = 4;
  b = a;
  b.wall_s = 4;
  b.batches = 30;
  b.samples = 1920;
  b.decode = {4, 14.0, 2.5, 1920};
  b.consumer_wait_s = 1.2;
  b.slots_ready_avg = 2.5;  // over 30: the last 20 averaged (75 - 10) / 20 = 3.25
  b.decode_queue_avg = 4.0;  // over 1920: (7680 - 1280) / 1280 = 5
  const FeedFigures d = FeedFigures::between(a, b);
  EXPECT_DOUBLE_EQ(d.wall_s, 2);
  EXPECT_DOUBLE_EQ(d.startup_s, 0);
  EXPECT_EQ(d.batches, 20u);
  EXPECT_EQ(d.samples, 1280u);
  EXPECT_DOUBLE_EQ(d.decode.busy_s, 8);
  EXPECT_EQ(d.decode.items, 1280u);
  EXPECT_DOUBLE_EQ(d.decode.busy_frac(d.wall_s), 1.0);
  EXPECT_NEAR(d.consumer_wait_s, 0.2, 1e-12);
  EXPECT_NEAR(d.consumer_wait_frac(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(d.slots_ready_avg, 3.25);
  EXPECT_DOUBLE_EQ(d.decode_queue_avg, 5.0);
  EXPECT_DOUBLE_EQ(d.samples_per_s(), 640);
}

TEST(FeedFiguresTest, StartupIsLeftOutOfTheConsumerWait) {
  LoaderStats s;
  s.wall_s = 3;
  s.first_batch_s = 1;
  s.batches = 5;
  s.consumer_wait_s = 1.5;  // 1 s for the first batch, 0.5 s of 2 s afterwards
  const FeedFigures f = FeedFigures::from(s);
  EXPECT_DOUBLE_EQ(f.startup_s, 1);
  EXPECT_DOUBLE_EQ(f.consumer_wait_frac(), 0.25);
  // An interval that began before the first batch keeps the part of startup inside it.
  LoaderStats early = s;
  early.wall_s = 0.4;
  early.batches = 0;
  early.samples = 0;
  early.consumer_wait_s = 0.4;
  const FeedFigures d = FeedFigures::between(early, s);
  EXPECT_DOUBLE_EQ(d.startup_s, 0.6);
  EXPECT_NEAR(d.consumer_wait_frac(), 0.25, 1e-12);
}

TEST(FeedFiguresTest, ANewEpochIsNotSubtracted) {
  LoaderStats a, b;
  a.wall_s = 5;
  a.batches = 50;
  a.samples = 3200;
  b.wall_s = 1;  // set_epoch restarted the counters
  b.batches = 8;
  b.samples = 512;
  const FeedFigures d = FeedFigures::between(a, b);
  EXPECT_DOUBLE_EQ(d.wall_s, 1);
  EXPECT_EQ(d.samples, 512u);
}

// ---- tracker -----------------------------------------------------------------------------

// Cumulative figures from a list of per-interval ones.
struct Accumulator {
  FeedFigures total;
  const FeedFigures& add(const FeedFigures& i) {
    const uint64_t n0 = total.batches, q0 = total.decode.items;
    total.wall_s += i.wall_s;
    total.samples += i.samples;
    total.batches += i.batches;
    total.bytes_read += i.bytes_read;
    total.io.threads = i.io.threads;
    total.io.busy_s += i.io.busy_s;
    total.decode.threads = i.decode.threads;
    total.decode.busy_s += i.decode.busy_s;
    total.decode.items += i.decode.items;
    total.consumer_wait_s += i.consumer_wait_s;
    total.slots = i.slots;
    total.slots_ready_avg = (total.slots_ready_avg * n0 + i.slots_ready_avg * i.batches) / total.batches;
    total.decode_queue_avg = (total.decode_queue_avg * q0 + i.decode_queue_avg * i.decode.items) / total.decode.items;
    if (i.copy) {
      StageStats c = total.copy.value_or(StageStats{});
      c.threads = 1;
      c.busy_s += i.copy->busy_s;
      total.copy = c;
    }
    return total;
  }
};

TEST(Tracker, NoiseAroundAThresholdDoesNotFlipTheVerdict) {
  // Decode-bound, with decoder busy fractions wobbling across the 50% "starved" threshold
  // and the consumer's wait near 10%: a raw verdict would flip; the tracker must not.
  const double busy[] = {0.95, 0.48, 0.9, 0.47, 0.93, 0.49, 0.88, 0.46, 0.91, 0.48};
  const double wait[] = {0.3, 0.12, 0.25, 0.11, 0.2, 0.14, 0.3, 0.12, 0.2, 0.13};
  BottleneckTracker t;
  Accumulator acc;
  int raw_flips = 0;
  Bottleneck prev_raw = Bottleneck::kUnknown;
  for (int i = 0; i < 10; ++i) {
    const Verdict& v = t.update(acc.add(figures(wait[i], 4, busy[i], 0.5, 0.2)));
    EXPECT_EQ(v.bottleneck, Bottleneck::kDecode) << "interval " << i << ": " << v.summary();
    if (i > 0 && diagnose(figures(wait[i], 4, busy[i], 0.5, 0.2)).raw != prev_raw) ++raw_flips;
    prev_raw = diagnose(figures(wait[i], 4, busy[i], 0.5, 0.2)).raw;
    EXPECT_EQ(v.intervals, static_cast<uint64_t>(i + 1));
  }
  EXPECT_GE(raw_flips, 4) << "the series should make an unsmoothed verdict flip";
}

TEST(Tracker, ARealChangeIsAdoptedAfterConfirmation) {
  BottleneckTracker t;
  Accumulator acc;
  EXPECT_EQ(t.update(acc.add(figures(0.4, 4, 0.97, 6, 0.1))).bottleneck, Bottleneck::kDecode);
  EXPECT_EQ(t.update(acc.add(figures(0.4, 4, 0.97, 6, 0.1))).bottleneck, Bottleneck::kDecode);
  // The consumer slows down: one interval is not enough ...
  const Verdict& v1 = t.update(acc.add(figures(0.01, 4, 0.3, 0.1, 3.2)));
  EXPECT_EQ(v1.bottleneck, Bottleneck::kDecode);
  EXPECT_EQ(v1.raw, Bottleneck::kConsumer);
  // ... two are.
  const Verdict& v2 = t.update(acc.add(figures(0.01, 4, 0.3, 0.1, 3.2)));
  EXPECT_EQ(v2.bottleneck, Bottleneck::kConsumer);
  EXPECT_NE(v2.evidence.find("consumer bound"), std::string::npos);
  // A lone different interval in between resets the count.
  t.update(acc.add(figures(0.6, 4, 0.1, 0, 0)));
  t.update(acc.add(figures(0.01, 4, 0.3, 0.1, 3.2)));
  EXPECT_EQ(t.update(acc.add(figures(0.6, 4, 0.1, 0, 0))).bottleneck, Bottleneck::kConsumer);
  EXPECT_EQ(t.update(acc.add(figures(0.6, 4, 0.1, 0, 0))).bottleneck, Bottleneck::kStorage);
}

// ---- real pipelines ----------------------------------------------------------------------

// n JPEGs of w x h in one dataset (label i % 4), small shards.
void make_dataset(const std::string& dir, int n, int w, int h) {
  testing::ImageDatasetSpec spec;
  spec.count = n;
  spec.shard_size = 1 << 20;
  spec.classes = 4;
  spec.quality = 90;
  spec.size = [w, h](int) { return std::pair<int, int>{w, h}; };
  testing::write_image_dataset(dir, spec);
}

LoaderOptions base_options(const std::string& dir) {
  LoaderOptions o;
  o.path = dir;
  o.batch_size = 8;
  o.rank = 0;
  o.world_size = 1;
  o.slots = 4;
  o.order.seed = 3;
  return o;
}

// One decode thread, eval transform at full resolution (no crop, no DCT scaling): decode
// is by far the slowest stage.
LoaderOptions heavy_decode_options(const std::string& dir) {
  LoaderOptions o = base_options(dir);
  o.threads = 1;
  o.transform.kind = ImageTransform::Kind::kEval;
  o.transform.size = 320;
  o.transform.eval_crop_fraction = 1.0f;
  o.transform.allow_dct_scaling = false;
  return o;
}

// Two decode threads, eval crops of 32 (cheap decode: DCT-scaled, tiny output).
LoaderOptions tiny_crop_options(const std::string& dir) {
  LoaderOptions o = base_options(dir);
  o.threads = 2;
  o.transform.kind = ImageTransform::Kind::kEval;
  o.transform.size = 32;
  return o;
}

// Runs the loader for at most `max_s` seconds (or the epoch), and past that until it
// has `min_snaps` snapshots (a slow machine, a sanitizer build); the consumer sleeps
// `consumer_ms` per batch. Returns the cumulative snapshots taken every `every` batches
// (0: only the final one).
std::vector<LoaderStats> run(Loader& l, double max_s, double consumer_ms, int every = 0, size_t min_snaps = 0) {
  std::vector<LoaderStats> snaps;
  const auto t0 = std::chrono::steady_clock::now();
  int n = 0;
  while (auto b = l.next()) {
    if (consumer_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(consumer_ms));
    if (every > 0 && ++n % every == 0) snaps.push_back(l.stats());
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(max_s) && snaps.size() >= min_snaps)
      break;
  }
  snaps.push_back(l.stats());
  return snaps;
}

class RealPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    make_dataset(dir_->str("ds"), 320, 480, 360);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path() { return dir_->str("ds"); }
  static TempDir* dir_;
};
TempDir* RealPipeline::dir_ = nullptr;

TEST_F(RealPipeline, ThrottledStorageIsStorageBound) {
  LoaderOptions o = tiny_crop_options(path());
  o.io.limit_bytes_per_s = 2e6;
  Loader l(o);
  const LoaderStats s = run(l, 2.0, 0).back();
  const Verdict v = diagnose(FeedFigures::from(s));
  std::printf("storage case: %s\n", v.summary().c_str());
  EXPECT_EQ(v.bottleneck, Bottleneck::kStorage) << v.summary();
  EXPECT_NE(v.evidence.find("decoders starved"), std::string::npos);
}

TEST_F(RealPipeline, OneThreadHeavyDecodeIsDecodeBound) {
  const LoaderOptions o = heavy_decode_options(path());
  Loader l(o);
  const LoaderStats s = run(l, 2.5, 0).back();
  DiagnoseOptions d;
  d.cpus_available = 64;
  const Verdict v = diagnose(FeedFigures::from(s), d);
  std::printf("decode case: %s\n", v.summary().c_str());
  EXPECT_EQ(v.bottleneck, Bottleneck::kDecode) << v.summary();
  EXPECT_NE(v.advice.find("add decode threads (1 in use, 64 CPUs)"), std::string::npos) << v.advice;
}

TEST_F(RealPipeline, SlowConsumerIsConsumerBound) {
  const LoaderOptions o = tiny_crop_options(path());
  Loader l(o);
  const LoaderStats s = run(l, 1.5, 60).back();  // 60 ms per batch of 8 tiny crops
  const Verdict v = diagnose(FeedFigures::from(s));
  std::printf("consumer case: %s\n", v.summary().c_str());
  EXPECT_EQ(v.bottleneck, Bottleneck::kConsumer) << v.summary();
  EXPECT_GT(FeedFigures::from(s).slots_ready_avg, 1.0);
}

// The fourth case, live: a Stager on the host backend (the same state machine as CUDA's)
// whose copy stream is throttled; loader and consumer are fast.
TEST_F(RealPipeline, ThrottledCopyStreamIsCopyBound) {
  const LoaderOptions o = tiny_crop_options(path());  // 24 KiB a batch
  StagerOptions so;
  so.backend = StageBackend::kHost;
  so.copy_limit_bytes_per_s = 0.4e6;  // ~16 batches/s, far below the loader's rate
  Stager st(o, so);
  const auto t0 = std::chrono::steady_clock::now();
  while (auto b = st.next()) {
    b->wait(nullptr);
    b->release(nullptr);
    if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(1500)) break;
  }
  const StagerStats ss = st.stats();
  const FeedFigures f = staged_figures(st.loader()->stats(), ss);
  ASSERT_TRUE(f.copy.has_value());
  const Verdict v = diagnose(f);
  std::printf("copy case: %s\n", v.summary().c_str());
  EXPECT_EQ(v.bottleneck, Bottleneck::kCopy) << v.summary();
  EXPECT_GT(ss.copy_busy_s, 0.8 * ss.wall_s) << "the throttled stream is busy nearly all the time";
  // The same loader without the throttle is not copy bound: the figure is measured.
  so.copy_limit_bytes_per_s = 0;
  Stager fast(o, so);
  int n = 0;
  while (auto b = fast.next()) {
    b->wait(nullptr);
    b->release(nullptr);
    if (++n == 20) break;
  }
  EXPECT_LT(fast.stats().copy_busy_s, 0.5 * fast.stats().wall_s);
}

TEST_F(RealPipeline, SteadyDecodeBoundRunGivesOneVerdictAfterWarmUp) {
  const LoaderOptions o = heavy_decode_options(path());
  Loader l(o);
  const std::vector<LoaderStats> snaps = run(l, 4.0, 0, 3, 10);  // a snapshot every 3 batches (24 images)
  ASSERT_GE(snaps.size(), 10u) << "run too short for a series";
  DiagnoseOptions d;
  d.min_interval_s = 0.005;
  BottleneckTracker t(d);
  std::vector<Bottleneck> seen;
  for (const LoaderStats& s : snaps) seen.push_back(t.update(s).bottleneck);
  const size_t warm = 2;
  for (size_t i = warm; i < seen.size(); ++i)
    EXPECT_EQ(bottleneck_name(seen[i]), std::string("decode")) << "snapshot " << i << ": "
                                                                << t.current().summary();
  std::printf("steady series: %zu snapshots, final %s\n", snaps.size(), t.current().to_json().c_str());
}

}  // namespace
}  // namespace stoker
