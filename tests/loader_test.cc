// The image loader's contract: every record once per epoch with its label, output
// identical across thread counts, ring sizes and runs, epochs that differ and restart,
// ranks that split an epoch and resume on another world size, batches that stay valid
// while held, a corrupt record named, prompt shutdown, and a low descriptor limit.
// Token data: loader_tokens_test.cc; the skip policy: loader_skip_test.cc.
#include "stoker/loader.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "util/datasets.h"
#include "util/fault_engine.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::Epoch;
using testing::TempDir;
using testing::image_options;
using testing::run_epoch;

TEST(Loader, EveryRecordExactlyOncePerEpochWithRightLabels) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 37});
  for (bool drop_last : {false, true}) {
    auto o = image_options(dir.str());
    o.drop_last = drop_last;
    Loader l(o);
    EXPECT_EQ(l.num_batches(), drop_last ? 4u : 5u);
    Epoch e = run_epoch(l);
    std::multiset<int64_t> seen;
    size_t k = 0;
    for (auto& b : e.indices) {
      for (size_t j = 0; j < b.size(); ++j) {
        seen.insert(b[j]);
        EXPECT_EQ(e.labels[k++], b[j] % 5);
      }
    }
    EXPECT_EQ(seen.size(), drop_last ? 32u : 37u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size()) << "duplicates";
    // Every delivered record's bytes as stored, once.
    auto ds = Dataset::open(dir.str());
    uint64_t bytes = 0;
    for (int64_t g : seen) {
      const auto [s, r] = ds->locate(static_cast<uint64_t>(g));
      bytes += ds->shard(s)->location(r).stored_size;
    }
    EXPECT_EQ(l.stats().record_bytes, bytes);
    if (!drop_last) {
      EXPECT_EQ(e.indices.back().size(), 5u);
    }
  }
}

TEST(Loader, OutputIsIdenticalAcrossThreadCountsAndRuns) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 30});
  Epoch ref;
  for (unsigned threads : {1u, 2u, 4u}) {
    auto o = image_options(dir.str());
    o.threads = threads;
    o.slots = threads;  // also vary the ring
    Loader l(o);
    Epoch e = run_epoch(l);
    if (threads == 1) {
      ref = e;
      continue;
    }
    EXPECT_EQ(e.indices, ref.indices) << threads;
    EXPECT_EQ(e.images, ref.images) << threads;  // same augmentation draws, bit for bit
  }
}

TEST(Loader, EpochsDifferAndSetEpochRestarts) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 30});
  Loader l(image_options(dir.str()));
  Epoch e0 = run_epoch(l);
  l.set_epoch(1);
  Epoch e1 = run_epoch(l);
  EXPECT_NE(e0.indices, e1.indices);
  l.set_epoch(0);
  EXPECT_EQ(run_epoch(l).indices, e0.indices);
}

TEST(Loader, RanksAreDisjointAndCoverTheEpoch) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 29});
  std::multiset<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    auto o = image_options(dir.str());
    o.rank = r;
    o.world_size = 3;
    Loader l(o);
    for (auto& b : run_epoch(l).indices) all.insert(b.begin(), b.end());
  }
  // 24 in the full step, 5 left: 2 each, the sixth repeating the epoch's first sample.
  EXPECT_EQ(all.size(), 30u);
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 29u);
}

TEST(Loader, ResumeMidEpochOnAnotherWorldSizeContinuesTheSequence) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 61});
  // Uninterrupted single-rank reference of the global sequence with batch 4.
  auto o = image_options(dir.str());
  o.batch_size = 4;
  std::vector<int64_t> reference;
  {
    Loader l(o);
    for (auto& b : run_epoch(l).indices) reference.insert(reference.end(), b.begin(), b.end());
  }
  // World size 3, batch 4: stop after 2 steps on every rank.
  std::vector<int64_t> consumed;
  std::string saved;
  for (int r = 0; r < 3; ++r) {
    auto o3 = o;
    o3.rank = r;
    o3.world_size = 3;
    Loader l(o3);
    for (int k = 0; k < 2; ++k) {
      auto b = l.next();
      ASSERT_TRUE(b);
      auto* p = static_cast<const int64_t*>((*b)["index"].data);
      consumed.insert(consumed.end(), p, p + b->size());
    }
    saved = l.state().serialize();
  }
  // Resume on world size 2.
  std::vector<int64_t> rest;
  for (int r = 0; r < 2; ++r) {
    auto o2 = o;
    o2.rank = r;
    o2.world_size = 2;
    Loader l(o2);
    l.load_state(OrderState::parse(saved));
    for (auto& b : run_epoch(l).indices) rest.insert(rest.end(), b.begin(), b.end());
  }
  std::vector<int64_t> joined = consumed;
  joined.insert(joined.end(), rest.begin(), rest.end());
  std::sort(joined.begin(), joined.end());
  // World 2 pads its final step of 5 with the epoch's first sample.
  std::vector<int64_t> sorted_ref = reference;
  sorted_ref.push_back(reference[0]);
  std::sort(sorted_ref.begin(), sorted_ref.end());
  EXPECT_EQ(joined, sorted_ref) << "a sample was repeated or skipped";
  // And the consumed prefix is exactly the first 24 of the global sequence.
  std::vector<int64_t> first(reference.begin(), reference.begin() + 24);
  std::sort(first.begin(), first.end());
  std::sort(consumed.begin(), consumed.end());
  EXPECT_EQ(consumed, first);
}

TEST(Loader, BatchesStayValidWhileHeldAndTheRingGrows) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 40});
  auto o = image_options(dir.str());
  o.slots = 2;
  Loader l(o);
  std::vector<Batch> held;
  std::vector<std::vector<uint8_t>> copies;
  while (auto b = l.next()) {
    const auto& img = (*b)["image"];
    copies.emplace_back(static_cast<uint8_t*>(img.data), static_cast<uint8_t*>(img.data) + img.bytes());
    held.push_back(std::move(*b));
  }
  EXPECT_EQ(held.size(), 5u);
  EXPECT_GE(l.stats().slots, 5u);
  for (size_t i = 0; i < held.size(); ++i) {
    const auto& img = held[i]["image"];
    EXPECT_EQ(std::memcmp(img.data, copies[i].data(), img.bytes()), 0) << "memory reused under a live batch " << i;
  }
}

TEST(Loader, CorruptRecordStopsWithShardAndRecordNamed) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 20, .shard_size = 1 << 20});
  auto ds = Dataset::open(dir.str());
  auto r = ds->shard(0);
  auto bytes = testing::read_file(ds->shard_path(0));
  bytes[r->location(5).offset + 10] ^= 0x55;
  testing::write_file(ds->shard_path(0), bytes);
  auto o = image_options(dir.str());
  o.order.kind = OrderKind::kSequential;
  Loader l(o);
  try {
    while (l.next()) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("shard-00000.stk: record 5: checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST(Loader, CorruptRecordErrorNamesItsKey) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 20, .shard_size = 1 << 20, .keys = true});
  auto ds = Dataset::open(dir.str());
  auto r = ds->shard(0);
  auto bytes = testing::read_file(ds->shard_path(0));
  bytes[r->location(7).offset + 10] ^= 0x55;  // inside the JPEG; the key, stored last, is intact
  testing::write_file(ds->shard_path(0), bytes);
  auto o = image_options(dir.str());
  o.order.kind = OrderKind::kSequential;
  Loader l(o);
  try {
    while (l.next()) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("shard-00000.stk: record 7 (__key__ 'img-00007'): checksum mismatch"),
              std::string::npos)
        << e.what();
  }
}

TEST(Loader, ShutdownWithWorkInFlightIsPrompt) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 60});
  for (int i = 0; i < 5; ++i) {
    auto o = image_options(dir.str());
    o.slots = 4;
    auto t0 = std::chrono::steady_clock::now();
    {
      Loader l(o);
      auto b = l.next();
      ASSERT_TRUE(b);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
}

// The README's loop calls set_epoch at the top of every epoch, also on the epoch a
// checkpoint restored: that call must keep the restored position, not start over.
TEST(Loader, SetEpochOfTheRestoredEpochKeepsTheResumePoint) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 30});
  auto o = image_options(dir.str());
  o.batch_size = 4;
  Loader ref(o);
  ref.set_epoch(2);
  const Epoch full = run_epoch(ref);
  Loader a(o);
  a.set_epoch(2);
  ASSERT_TRUE(a.next());
  ASSERT_TRUE(a.next());
  const OrderState saved = a.state();

  Loader b(o);
  b.load_state(saved);
  b.set_epoch(2);  // the loop's first call
  b.set_epoch(2);  // twice is the same
  EXPECT_EQ(b.num_batches(), full.indices.size() - 2);
  const Epoch rest = run_epoch(b);
  EXPECT_EQ(rest.indices, std::vector<std::vector<int64_t>>(full.indices.begin() + 2, full.indices.end()));
  // Once batches were taken, set_epoch restarts the epoch as before.
  b.set_epoch(2);
  EXPECT_EQ(run_epoch(b).indices, full.indices);
}

TEST(Loader, SetEpochOfAnotherEpochAfterAMidEpochRestoreIsAnError) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 30});
  auto o = image_options(dir.str());
  o.batch_size = 4;
  Loader a(o);
  a.set_epoch(3);
  ASSERT_TRUE(a.next());
  Loader b(o);
  b.load_state(a.state());
  try {
    b.set_epoch(0);
    FAIL() << "set_epoch(0) dropped the restored position of epoch 3";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("restored epoch 3 at sample 4 of 30"), std::string::npos) << e.what();
  }
  // A state taken at an epoch's end lets the next epoch start.
  while (a.next()) {
  }
  Loader c(o);
  c.load_state(a.state());
  c.set_epoch(4);
  EXPECT_EQ(run_epoch(c).indices.size(), 8u);
}

// Every read held back a second: a consumer then waits inside next() for that long.
std::unique_ptr<IoEngine> slow_reads(std::unique_ptr<IoEngine> e) {
  FaultPlan plan;
  plan.delay_rate = 1;
  plan.delay = std::chrono::seconds(1);
  return make_faulty_engine(std::move(e), plan);
}

TEST(Loader, NextFromASecondThreadIsRefused) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 30});
  auto o = image_options(dir.str());
  o.wrap_io = slow_reads;  // the first thread waits inside next()
  Loader l(o);
  std::thread first([&] { EXPECT_TRUE(l.next()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  try {
    l.next();
    FAIL() << "two threads inside next()";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("one consumer thread"), std::string::npos) << e.what();
  }
  first.join();
}

TEST(Loader, CloseFromAnotherThreadMakesTheWaitingNextThrow) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 30});
  auto o = image_options(dir.str());
  o.wrap_io = slow_reads;
  Loader l(o);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    l.close();
  });
  try {
    l.next();
    FAIL() << "next() returned after close()";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled) << e.what();
  }
  closer.join();
  EXPECT_THROW(l.next(), Error);  // and every later call
}

TEST(LoaderLimits, ManyShardsUnderALowDescriptorLimitStillLoad) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 200, .shard_size = 4096});  // one or two records a shard
  auto ds = Dataset::open(dir.str());
  ASSERT_GT(ds->shard_count(), 80u);
  struct rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 1024) GTEST_SKIP() << "hard fd limit below 1024";
  struct rlimit low = saved;
  low.rlim_cur = 96;  // fewer than the shards need (each can hold two descriptors)
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  uint64_t n = 0;
  {
    Loader l(image_options(dir.str()));
    while (auto b = l.next()) n += b->size();
  }
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(n, 200u);
}

}  // namespace
}  // namespace stoker
