// OnError::kSkip, the loader's skip policy: bad records and lost shards are dropped,
// counted and named while batches stay full and deterministic; read faults drop whole
// records or, under kError, stop naming the record; a run of bad samples longer than the
// ring grows it instead of deadlocking; and with a budget, a shard whose header is
// damaged is named once (not once per record), and an epoch that skips more than
// max_skipped stops with kDataLoss naming the count and the first reasons instead of
// quietly delivering (almost) nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <utility>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/fault_engine.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::Epoch;
using testing::FaultCase;
using testing::TempDir;
using testing::corrupt_records;
using testing::expect_stop_naming_a_record;
using testing::fault_cases;
using testing::finishes_or_abort;
using testing::image_options;
using testing::run_epoch;
using testing::run_epoch_trying;
using testing::token_options;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// 120 small images in several shards; returns the records of the shard whose header
// gets a flipped bit.
uint64_t make_with_broken_shard(const std::string& dir, std::string* broken_path) {
  testing::write_image_dataset(dir, {.count = 120,
                                     .shard_size = 24 << 10,
                                     .classes = 4,
                                     .class_names = false,
                                     .size = [](int i) { return std::pair<int, int>{24 + i % 5, 20 + i % 3}; }});
  auto ds = Dataset::open(dir);
  EXPECT_GE(ds->shard_count(), 3u);
  *broken_path = ds->shard_path(1);
  auto bytes = testing::read_file(*broken_path);
  bytes[40] ^= 0x04;  // one bit of the header
  testing::write_file(*broken_path, bytes);
  return ds->manifest().shards[1].records;
}

LoaderOptions skip_options(const std::string& dir) {
  LoaderOptions o = testing::image_options(dir);
  o.transform.size = 16;
  o.on_error = OnError::kSkip;
  o.order.kind = OrderKind::kSequential;
  return o;
}

TEST(LoaderSkipBudget, ABrokenShardIsNamedOnceAndWithinTheBudgetTheEpochGoesOn) {
  TempDir dir;
  std::string broken;
  const uint64_t lost = make_with_broken_shard(dir.str(), &broken);
  ASSERT_GT(lost, 5u);
  auto o = skip_options(dir.str());
  o.max_skipped = std::numeric_limits<double>::infinity();
  Loader l(o);
  ::testing::internal::CaptureStderr();
  uint64_t n = 0;
  while (auto b = l.next()) n += b->size();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(n, 120 - lost);
  EXPECT_EQ(l.stats().skipped, lost);
  // One line for the shard, none per record.
  EXPECT_EQ(count_of(err, "stoker: warning: skipping"), 1u) << err;
  EXPECT_EQ(count_of(err, "every record of " + broken), 1u) << err;
}

TEST(LoaderSkipBudget, PastTheBudgetNextThrowsNamingTheCountAndTheReason) {
  TempDir dir;
  std::string broken;
  const uint64_t lost = make_with_broken_shard(dir.str(), &broken);
  for (double budget : {5.0, 0.02}) {  // a count; a fraction (2 % of 120: 2 samples)
    SCOPED_TRACE("max_skipped " + std::to_string(budget));
    auto o = skip_options(dir.str());
    o.max_skipped = budget;
    Loader l(o);
    try {
      ::testing::internal::CaptureStderr();
      while (l.next()) {
      }
      ::testing::internal::GetCapturedStderr();
      FAIL() << "an epoch losing " << lost << " of 120 samples went through";
    } catch (const Error& e) {
      ::testing::internal::GetCapturedStderr();
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << what;
      const std::string allowed = budget >= 1 ? "(5)" : "(2)";
      EXPECT_NE(what.find("samples skipped in this epoch, more than max_skipped allows " + allowed), std::string::npos)
          << what;
      EXPECT_NE(what.find("every record of " + broken), std::string::npos) << what;
    }
  }
}

TEST(LoaderSkipBudget, TheDefaultBudgetStopsAnEpochThatLosesAShardOfMoreThan100) {
  TempDir dir;
  // 300 images of 16x16 in one shard, every label 0.
  testing::write_image_dataset(dir.str(), {.count = 300,
                                           .shard_size = 1 << 20,
                                           .classes = 1,
                                           .class_names = false,
                                           .size = [](int) { return std::pair<int, int>{16, 16}; }});
  auto ds = Dataset::open(dir.str());
  ASSERT_EQ(ds->shard_count(), 1u);
  auto bytes = testing::read_file(ds->shard_path(0));
  bytes[40] ^= 0x01;
  testing::write_file(ds->shard_path(0), bytes);
  auto o = skip_options(dir.str());
  Loader l(o);
  EXPECT_EQ(l.num_batches(), 38u);
  ::testing::internal::CaptureStderr();
  try {
    while (l.next()) {
    }
    ::testing::internal::GetCapturedStderr();
    FAIL() << "an epoch of no samples went through under the default budget";
  } catch (const Error& e) {
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("101 samples skipped"), std::string::npos) << e.what();
    EXPECT_EQ(count_of(err, "stoker: warning: skipping"), 1u) << err;
  }
}

TEST(LoaderSkipBudget, ANegativeBudgetIsInvalid) {
  TempDir dir;
  std::string broken;
  make_with_broken_shard(dir.str(), &broken);
  auto o = skip_options(dir.str());
  o.max_skipped = -1;
  try {
    Loader l(o);
    FAIL() << "max_skipped -1 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_skipped"), std::string::npos) << e.what();
  }
}

TEST(LoaderSkip, BadRecordsAreDroppedCountedAndBatchesStayFull) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 43, .shard_size = 1 << 20});
  const std::vector<uint64_t> bad = {0, 5, 6, 17, 42};
  corrupt_records(dir.str(), bad);
  auto run = [&](unsigned threads, unsigned slots) {
    auto o = image_options(dir.str());
    o.on_error = OnError::kSkip;
    o.threads = threads;
    o.slots = slots;
    Loader l(o);
    Epoch e = run_epoch(l);
    EXPECT_EQ(l.stats().skipped, bad.size());
    // The bytes of the records delivered: the bad ones' are not counted.
    auto ds = Dataset::open(dir.str());
    uint64_t good_bytes = 0;
    for (uint64_t g = 0; g < ds->record_count(); ++g) {
      const auto [s, r] = ds->locate(g);
      if (std::find(bad.begin(), bad.end(), g) == bad.end()) good_bytes += ds->shard(s)->location(r).stored_size;
    }
    EXPECT_EQ(l.stats().record_bytes, good_bytes) << threads << " threads";
    return e;
  };
  Epoch e = run(2, 4);
  std::multiset<int64_t> seen;
  for (size_t k = 0; k < e.indices.size(); ++k) {
    if (k + 1 < e.indices.size()) {
      EXPECT_EQ(e.indices[k].size(), 8u) << "batch " << k << " not full";
    }
    seen.insert(e.indices[k].begin(), e.indices[k].end());
  }
  EXPECT_EQ(seen.size(), 43u - bad.size());
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a record was delivered twice";
  for (uint64_t b : bad) EXPECT_EQ(seen.count(static_cast<int64_t>(b)), 0u);
  // Labels still belong to their records after samples moved between slots.
  size_t q = 0;
  for (auto& b : e.indices)
    for (int64_t i : b) EXPECT_EQ(e.labels[q++], i % 5);
  // Deterministic whatever the threads and ring size.
  Epoch e1 = run(1, 1);
  EXPECT_EQ(e1.indices, e.indices);
  EXPECT_EQ(e1.images, e.images);
}

// On several ranks a batch keeps its own samples and goes out shorter (empty when all
// failed), also under drop_last: every rank delivers num_batches() batches, which a DDP
// loop needs, and together they deliver every good record once.
TEST(LoaderSkip, OnSeveralRanksEveryRankDeliversTheSameNumberOfBatches) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 48, .shard_size = 1 << 20});
  const std::vector<uint64_t> bad = {0, 1, 3, 5, 6, 9, 17, 42};
  corrupt_records(dir.str(), bad);
  for (bool drop_last : {false, true}) {
    SCOPED_TRACE(drop_last ? "drop_last" : "keep_last");
    std::multiset<int64_t> seen;
    std::vector<size_t> sizes;
    for (int rank = 0; rank < 3; ++rank) {
      auto o = image_options(dir.str());
      o.on_error = OnError::kSkip;
      o.drop_last = drop_last;
      o.batch_size = 4;
      o.order.kind = OrderKind::kSequential;  // rank 0 batch 0: records 0, 3, 6, 9 (strided)
      o.rank = rank;
      o.world_size = 3;
      Loader l(o);
      Epoch e = run_epoch(l);
      EXPECT_EQ(e.indices.size(), l.num_batches()) << "rank " << rank;
      for (auto& b : e.indices) {
        seen.insert(b.begin(), b.end());
        sizes.push_back(b.size());
      }
    }
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "a record was delivered twice";
    EXPECT_EQ(seen.size(), 48u - bad.size());
    for (uint64_t b : bad) EXPECT_EQ(seen.count(static_cast<int64_t>(b)), 0u);
    EXPECT_EQ(std::count(sizes.begin(), sizes.end(), 0u), 1) << "rank 0's first batch lost all four";
    EXPECT_GT(std::count(sizes.begin(), sizes.end(), 3u), 0) << "no batch came out shorter";
  }
}

TEST(LoaderSkip, TryNextGivesWhatNextGivesSkipsIncluded) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 43, .shard_size = 1 << 20});
  corrupt_records(dir.str(), {0, 5, 6, 17, 42});
  auto o = image_options(dir.str());
  o.on_error = OnError::kSkip;
  o.slots = 3;
  Loader plain(o), trying(o);
  const Epoch want = run_epoch(plain);
  // Let the ring fill: the first batch is then ready and try_next takes it itself.
  bool would_wait = true;
  std::optional<Batch> first;
  for (int i = 0; i < 500 && would_wait; ++i) {
    first = trying.try_next(&would_wait);
    if (would_wait) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(would_wait) << "the first batch never became ready in 5 s";
  ASSERT_TRUE(first.has_value());
  const auto& idx = (*first)["index"];
  EXPECT_EQ(std::vector<int64_t>(static_cast<const int64_t*>(idx.data), static_cast<const int64_t*>(idx.data) + idx.numel()),
            want.indices.at(0));
  first.reset();
  uint64_t taken = 0;
  const Epoch rest = run_epoch_trying(trying, &taken);
  ASSERT_EQ(rest.indices.size() + 1, want.indices.size());
  for (size_t k = 0; k < rest.indices.size(); ++k) EXPECT_EQ(rest.indices[k], want.indices[k + 1]) << "batch " << k + 1;
  EXPECT_EQ(trying.stats().skipped, 5u);
  // At the epoch's end try_next says so without waiting, like next().
  auto end = trying.try_next(&would_wait);
  EXPECT_FALSE(would_wait);
  EXPECT_FALSE(end.has_value());
}

TEST(LoaderSkip, MissingShardMidEpochIsSkippedOrNamed) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 40, .shard_size = 16 << 10});
  auto ds = Dataset::open(dir.str());
  ASSERT_GT(ds->shard_count(), 3u);
  const uint64_t lost = ds->manifest().shards[2].records;
  std::filesystem::remove(ds->shard_path(2));
  {
    auto o = image_options(dir.str());
    o.on_error = OnError::kSkip;
    Loader l(o);
    Epoch e = run_epoch(l);
    uint64_t n = 0;
    for (auto& b : e.indices) n += b.size();
    EXPECT_EQ(n, 40 - lost);
    EXPECT_EQ(l.stats().skipped, lost);
  }
  auto o = image_options(dir.str());
  Loader l(o);
  try {
    while (l.next()) {
    }
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
    EXPECT_NE(std::string(e.what()).find("shard-00002.stk"), std::string::npos) << e.what();
  }
}

TEST(LoaderFaults, SkipDeliversEveryGoodRecordOnceAndErrorStopsWithTheName) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 60, .shard_size = 1 << 20});
  for (const FaultCase& fc : fault_cases()) {
    SCOPED_TRACE(fc.name);
    auto o = image_options(dir.str());
    testing::inject_faults(o, fc.plan);
    {
      Loader l(testing::skip_without_budget(o));  // 15 % faults: past the default budget
      Epoch e = run_epoch(l);
      std::multiset<int64_t> seen;
      for (size_t k = 0; k < e.indices.size(); ++k) {
        if (k + 1 < e.indices.size()) {
          EXPECT_EQ(e.indices[k].size(), 8u);
        }
        seen.insert(e.indices[k].begin(), e.indices[k].end());
      }
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "delivered twice";
      EXPECT_EQ(seen.size() + l.stats().skipped, 60u) << "lost without being counted";
      if (fc.drops) {
        EXPECT_GT(l.stats().skipped, 0u);
      } else {
        EXPECT_EQ(l.stats().skipped, 0u);
      }
    }
    Loader l(o);
    if (!fc.drops) {
      EXPECT_EQ(run_epoch(l).indices.size(), 8u);
      continue;
    }
    expect_stop_naming_a_record(l, fc, "shard-00000.stk: record ");
  }
}

// Under kSkip a batch is filled from later ones past the bad samples, and those sit
// ready in the ring until it goes out. A run of bad samples spanning more batches than
// the ring has slots left no slot for the next one: the loader grows the ring (or, with
// grow_when_held off, says why it cannot go on) instead of waiting for good.
TEST(LoaderSkip, ARunOfBadSamplesLongerThanTheRingGrowsItInsteadOfDeadlocking) {
  TempDir images;
  testing::write_image_dataset(images.str(), {.count = 43, .shard_size = 1 << 20});
  corrupt_records(images.str(), {10, 11, 12, 13, 14, 15, 16, 17});
  finishes_or_abort("ARunOfBadImages", [&] {
    auto o = image_options(images.str());
    o.on_error = OnError::kSkip;
    o.batch_size = 1;
    o.slots = 2;
    o.threads = 1;
    Loader l(o);
    Epoch e = run_epoch(l);
    std::set<int64_t> seen;
    for (const auto& b : e.indices) seen.insert(b.begin(), b.end());
    EXPECT_EQ(seen.size(), 43u - 8u);
    for (int64_t bad = 10; bad <= 17; ++bad) EXPECT_EQ(seen.count(bad), 0u);
    EXPECT_EQ(l.stats().skipped, 8u);
  });

  TempDir tokens;
  const uint32_t L = 16, R = 40;
  testing::write_token_dataset(tokens.str(), 20000, L, R, true);
  const uint64_t rows = (20000 - 1) / L;
  corrupt_records(tokens.str(), {3});  // rows 120..159
  auto token_run = [&](bool grow) {
    auto o = token_options(tokens.str());
    o.order.kind = OrderKind::kSequential;
    o.on_error = OnError::kSkip;
    o.batch_size = 7;
    o.slots = 3;
    o.threads = 1;
    o.grow_when_held = grow;
    Loader l(o);
    std::set<int64_t> seen;
    while (auto b = l.next()) {
      auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
      auto* idx = static_cast<const int64_t*>((*b)["index"].data);
      for (uint64_t j = 0; j < b->size(); ++j) {
        EXPECT_TRUE(seen.insert(idx[j]).second) << "row " << idx[j] << " twice";
        EXPECT_EQ(t[j * L], static_cast<uint16_t>((idx[j] * L) % 65521)) << "row " << idx[j];
      }
    }
    EXPECT_EQ(seen.size(), rows - R);
    EXPECT_EQ(l.stats().skipped, R);
    EXPECT_GT(l.stats().slots, 3u) << "the ring grew past the bad run";
  };
  finishes_or_abort("ARunOfBadTokenRows", [&] { token_run(true); });
  finishes_or_abort("ARunOfBadTokenRowsNoGrowth", [&] {
    try {
      token_run(false);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
      EXPECT_NE(std::string(e.what()).find("raise `slots`"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace stoker
