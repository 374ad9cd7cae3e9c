// The token loader: rows round-trip with their targets in any type and alignment; every
// record is read and decompressed once per epoch per rank; output is identical across
// threads and slots; decode workers' time is all busy or waiting; kept windows (held
// batches, small rings, many workers, windows of different widths) still deliver every
// row once with its bytes, in order, without deadlock; read faults skip whole records or
// stop naming one; stopping mid-epoch is prompt.
#include "stoker/loader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <limits>
#include <memory>
#include <random>
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

using testing::FaultCase;
using testing::TempDir;
using testing::expect_stop_naming_a_record;
using testing::fault_cases;
using testing::finishes_or_abort;
using testing::token_epoch_rows;
using testing::token_options;
using testing::token_rows_delivered;

// The rest of the epoch, every token and next-token target of every row checked against
// write_token_dataset's values in the delivered type T (`type`); the rows seen go to `rows`.
template <typename T>
void expect_every_token_and_target(Loader& l, uint32_t L, ElemType type, std::set<int64_t>* rows) {
  while (auto b = l.next()) {
    const auto& tok = (*b)["tokens"];
    ASSERT_EQ(tok.dtype, type);
    ASSERT_EQ(tok.shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), L}));
    auto* t = static_cast<const T*>(tok.data);
    auto* g = static_cast<const T*>((*b)["targets"].data);
    auto* idx = static_cast<const int64_t*>((*b)["index"].data);
    for (uint64_t j = 0; j < b->size(); ++j) {
      rows->insert(idx[j]);
      for (uint32_t q = 0; q < L; ++q) {
        ASSERT_EQ(t[j * L + q], static_cast<T>((idx[j] * L + q) % 65521)) << "row " << idx[j] << " token " << q;
        ASSERT_EQ(g[j * L + q], static_cast<T>((idx[j] * L + q + 1) % 65521)) << "row " << idx[j] << " token " << q;
      }
    }
  }
}

// A token dataset of `tokens` tokens in rows of L, R rows a record, read whole in batches
// of `batch` with targets, delivered as int64 (`widen`) or in the stored uint16.
void expect_round_trip(uint64_t tokens, uint32_t L, uint32_t R, uint64_t batch, bool widen) {
  TempDir dir;
  testing::write_token_dataset(dir.str(), tokens, L, R, true);
  auto o = token_options(dir.str());
  o.batch_size = batch;
  o.targets = true;
  if (widen) {
    o.token_type_is_stored = false;
    o.token_type = ElemType::kInt64;
  }
  Loader l(o);
  std::set<int64_t> rows;
  if (widen) {
    expect_every_token_and_target<int64_t>(l, L, ElemType::kInt64, &rows);
  } else {
    expect_every_token_and_target<uint16_t>(l, L, ElemType::kUint16, &rows);
  }
  EXPECT_EQ(rows.size(), (tokens - 1) / L);
}

TEST(LoaderTokens, TokensRoundTripWithTargets) { expect_round_trip(5000, 16, 8, 5, true); }

// Rows in the stored type are copied with streaming stores 64 bytes at a time, then the
// tail; rows of 200 bytes start 16-byte aligned in every other batch row and not in the
// rest, and targets start a token into their stored row. Every token must come through.
TEST(LoaderTokens, TokensRoundTripInTheStoredTypeAtAnyAlignment) { expect_round_trip(40000, 100, 7, 9, false); }

TEST(LoaderTokens, EveryRecordIsReadAndDecompressedOncePerEpochPerRank) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 60000, L, 8, true);  // 3749 rows in 469 records
  const uint64_t rows = (60000 - 1) / L, records = Dataset::open(dir.str())->record_count();
  for (OrderKind kind : {OrderKind::kShuffled, OrderKind::kSequential}) {
    for (unsigned slots : {1u, 4u, 0u}) {
      for (int world : {1, 3}) {
        SCOPED_TRACE(std::string(order_kind_name(kind)) + " slots " + std::to_string(slots) + " world " +
                     std::to_string(world));
        std::multiset<int64_t> seen;
        for (int r = 0; r < world; ++r) {
          auto o = token_options(dir.str());
          o.order.kind = kind;
          o.slots = slots;
          o.rank = r;
          o.world_size = world;
          Loader l(o);
          for (uint64_t e = 0; e < 2; ++e) {
            l.set_epoch(e);
            auto got = token_epoch_rows(l, L);
            if (e == 0) seen.insert(got.begin(), got.end());
            // One rank reads every record once. Interleaved ranks touch nearly every
            // record of a window each (a rank may draw none of a small record's rows),
            // so at most once per epoch per rank; never twice.
            // The engine's figures are there as soon as the epoch is (its thread lives on).
            EXPECT_FALSE(l.stats().io_engine.engine.empty()) << "epoch " << e;
            if (world == 1) {
              EXPECT_EQ(l.stats().io.items, records) << "epoch " << e;
              EXPECT_EQ(l.stats().io_engine.requests, (e + 1) * records) << "epoch " << e;
            } else {
              EXPECT_LE(l.stats().io.items, records) << "epoch " << e;
              EXPECT_GE(l.stats().io.items, records * 9 / 10) << "epoch " << e;
            }
          }
        }
        const uint64_t want = token_rows_delivered(rows, 7, static_cast<uint64_t>(world));
        EXPECT_EQ(seen.size(), want);
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), want) << "a row delivered twice";
      }
    }
  }
}

TEST(LoaderTokens, OutputIsIdenticalAcrossThreadsAndSlots) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 30000, L, 8, true);
  std::vector<int64_t> first;
  for (unsigned threads : {1u, 2u, 4u}) {
    for (unsigned slots : {1u, 3u, 64u}) {
      auto o = token_options(dir.str());
      o.threads = threads;
      o.slots = slots;
      Loader l(o);
      l.set_epoch(5);
      auto rows = token_epoch_rows(l, L);
      if (first.empty()) first = rows;
      EXPECT_EQ(rows, first) << threads << " threads, " << slots << " slots";
    }
  }
  EXPECT_EQ(first.size(), (30000 - 1) / L);
}

// The verdict weighs how busy the decode threads were: a token worker's planning, slot
// claims and batch hand-overs are work too, so its time is all busy or waiting, whether
// it is held up by reads (tiny records, a fast consumer) or by slots (a slow consumer).
TEST(LoaderTokens, WorkerTimeIsAllBusyOrWaiting) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 200000, L, 8, true);
  for (int consumer_ms : {0, 10}) {
    SCOPED_TRACE("consumer " + std::to_string(consumer_ms) + " ms per batch");
    auto o = token_options(dir.str());
    o.threads = 1;
    o.slots = 4;
    o.batch_size = 256;
    Loader l(o);
    l.set_epoch(0);
    uint64_t batches = 0;
    while (auto b = l.next()) {
      ++batches;
      if (consumer_ms) std::this_thread::sleep_for(std::chrono::milliseconds(consumer_ms));
    }
    const LoaderStats s = l.stats();
    ASSERT_GT(batches, 40u);
    const double accounted = (s.decode.busy_s + s.decode.wait_s) / s.wall_s;
    // The worker starts with the run and stops once it has filled the last batch.
    const std::string seen = "busy " + std::to_string(s.decode.busy_s) + " s, waiting " +
                             std::to_string(s.decode.wait_s) + " s of " + std::to_string(s.wall_s) + " s";
    EXPECT_GT(accounted, 0.8) << seen;
    EXPECT_LT(accounted, 1.01) << seen;
    if (consumer_ms) {
      EXPECT_GT(s.decode.wait_s, s.decode.busy_s) << seen;
    }
  }
}

// Workers fill a window's batches straight from each decompressed record when the ring
// has their slots free, else keep the window and fill batches as slots come back. A
// consumer that keeps every batch forces the second way and then the ring's growth; the
// rows must still all arrive, once, with their bytes, and stay valid while held.
TEST(LoaderTokens, HeldBatchesForceKeptWindowsAndTheRowsStillAllArriveOnce) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 30000, L, 8, true);
  const uint64_t rows = (30000 - 1) / L;
  for (unsigned threads : {1u, 3u}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    auto o = token_options(dir.str());
    o.threads = threads;
    o.slots = 2;
    Loader l(o);
    std::vector<Batch> held;
    while (auto b = l.next()) held.push_back(std::move(*b));
    EXPECT_GT(l.stats().slots, 2u) << "the ring grew for the held batches";
    std::set<int64_t> seen;
    for (const Batch& b : held) {
      auto* t = static_cast<const uint16_t*>(b["tokens"].data);
      auto* idx = static_cast<const int64_t*>(b["index"].data);
      for (uint64_t j = 0; j < b.size(); ++j) {
        EXPECT_TRUE(seen.insert(idx[j]).second) << "row " << idx[j] << " twice";
        EXPECT_EQ(t[j * L], static_cast<uint16_t>((idx[j] * L) % 65521)) << "row " << idx[j];
        EXPECT_EQ(t[j * L + L - 1], static_cast<uint16_t>((idx[j] * L + L - 1) % 65521)) << "row " << idx[j];
      }
    }
    EXPECT_EQ(seen.size(), rows);
    // The same rows in the same order as a loader whose ring never runs short.
    auto o2 = token_options(dir.str());
    o2.threads = threads;
    Loader free_running(o2);
    std::vector<int64_t> order_held, order_free = token_epoch_rows(free_running, L);
    for (const Batch& b : held) {
      auto* idx = static_cast<const int64_t*>(b["index"].data);
      order_held.insert(order_held.end(), idx, idx + b.size());
    }
    EXPECT_EQ(order_held, order_free);
  }
}

// A rank's window holds only the records it draws rows from, so with 3 ranks windows
// differ in width. Kept windows' buffers are reused: one mapped for a narrower window
// must never take a wider window's records (it ran past its end: wrong rows, crashes).
TEST(LoaderTokens, KeptWindowsOfDifferentWidthsReuseOnlyBuffersThatFit) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 200000, L, 5, true);
  std::set<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto o = token_options(dir.str());
    o.order.window_chunks = 14;
    o.world_size = 3;
    o.rank = rank;
    o.batch_size = 16;
    o.threads = 3;
    o.slots = 10;
    Loader l(o);
    std::deque<Batch> held;  // the consumer keeps 8 batches: windows are kept, not direct
    while (auto b = l.next()) {
      auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
      auto* idx = static_cast<const int64_t*>((*b)["index"].data);
      for (uint64_t j = 0; j < b->size(); ++j) {
        EXPECT_TRUE(seen.insert(idx[j]).second) << "row " << idx[j] << " twice";
        for (uint32_t q = 0; q < L; ++q)
          ASSERT_EQ(t[j * L + q], static_cast<uint16_t>((idx[j] * L + q) % 65521)) << "row " << idx[j];
      }
      held.push_back(std::move(*b));
      if (held.size() > 8) held.pop_front();
    }
  }
  EXPECT_EQ(seen.size(), token_rows_delivered((200000 - 1) / L, 16, 3));
}

TEST(LoaderTokens, ManyWorkersOnASmallRingKeepWindowsInOrderAndFinish) {
  // Six workers, windows of two records, a ring of a few slots: most windows are kept,
  // and workers race to keep the next ones. Kept windows must be filled oldest first (the
  // order slots are claimed in), or two workers wait for slots held by batches only the
  // other window would finish.
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 30000, L, 8, true);
  const uint64_t rows = (30000 - 1) / L;
  auto reference = token_options(dir.str());
  reference.threads = 1;
  reference.order.window_chunks = 2;
  std::vector<std::vector<int64_t>> want;
  {
    Loader l(reference);
    for (uint64_t e = 0; e < 3; ++e) {
      l.set_epoch(e);
      want.push_back(token_epoch_rows(l, L));
      ASSERT_EQ(want.back().size(), rows);
    }
  }
  for (unsigned slots : {2u, 3u, 5u}) {
    finishes_or_abort("ManyWorkersOnASmallRing", [&] {
      auto o = reference;
      o.threads = 6;
      o.slots = slots;
      // A new loader each round: the race is over the run's first kept windows.
      for (int round = 0; round < 6; ++round) {
        Loader l(o);
        for (uint64_t e = 0; e < 3; ++e) {
          l.set_epoch(e);
          EXPECT_EQ(token_epoch_rows(l, L), want[e]) << slots << " slots, epoch " << e;
        }
      }
    });
  }
}

// One worker, windows of one record, a consumer holding batches: windows are kept, two at
// a time, and the worker plans the next ones with the ring's lock let go. Records that
// arrive then must still be unpacked: the worker used to sleep on a wake-up that had
// already gone to no one, and the epoch never ended (2 of 3 runs under TSan).
TEST(LoaderTokens, LoneWorkerPlanningWhileRecordsArriveNeverSleepsOnKeptWork) {
  TempDir dir;
  const uint32_t L = 64;
  testing::write_token_dataset(dir.str(), 700000, L, 3, true);
  auto o = testing::lone_worker_options(dir.str());
  o.targets = true;
  finishes_or_abort("LoneWorkerPlanningWhileRecordsArrive", [&] {
    for (int rank = 0; rank < 2; ++rank) {
      o.rank = rank;
      Loader l(o);
      l.set_epoch(4);
      EXPECT_EQ(testing::drain_holding(l, 5), l.num_batches());
    }
  });
}

// Seeded random configurations of the token path (ranks, window widths, batch sizes,
// threads, ring sizes, a consumer holding batches, order kinds, targets): every row of
// the epoch arrives once across the ranks, with its bytes. A randomized stress run of
// this kind found the two token bugs above; this keeps a small one in the suite (and
// under TSan).
TEST(LoaderTokens, RandomConfigurationsDeliverEveryRowOnceWithItsBytes) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 60000, L, 5, true);
  const uint64_t rows = (60000 - 1) / L;
  std::mt19937 rng(20261130);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int round = 0; round < 32; ++round) {
    auto o = token_options(dir.str());
    o.world_size = pick(1, 3);
    o.order.kind = pick(0, 3) ? OrderKind::kShuffled : OrderKind::kSequential;
    o.order.window_chunks = static_cast<uint32_t>(pick(1, 16));
    o.order.seed = static_cast<uint64_t>(round);
    o.batch_size = static_cast<uint64_t>(pick(1, 40));
    o.threads = static_cast<unsigned>(pick(1, 4));
    o.slots = static_cast<unsigned>(pick(0, 8));
    o.targets = pick(0, 1) == 1;
    const size_t hold = static_cast<size_t>(pick(0, 6));
    const std::string what = "round " + std::to_string(round) + ": world " + std::to_string(o.world_size) +
                             ", window " + std::to_string(o.order.window_chunks) + ", batch " +
                             std::to_string(o.batch_size) + ", threads " + std::to_string(o.threads) + ", slots " +
                             std::to_string(o.slots) + ", holding " + std::to_string(hold);
    SCOPED_TRACE(what);
    std::vector<int> seen(rows, 0);
    finishes_or_abort(what.c_str(), [&] {
      for (int rank = 0; rank < o.world_size; ++rank) {
        auto ro = o;
        ro.rank = rank;
        Loader l(ro);
        l.set_epoch(static_cast<uint64_t>(round % 3));
        std::deque<Batch> held;
        while (auto b = l.next()) {
          auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
          auto* idx = static_cast<const int64_t*>((*b)["index"].data);
          for (uint64_t j = 0; j < b->size(); ++j) {
            ASSERT_LT(static_cast<uint64_t>(idx[j]), rows);
            seen[static_cast<size_t>(idx[j])]++;
            ASSERT_EQ(t[j * L], static_cast<uint16_t>((idx[j] * L) % 65521)) << "row " << idx[j];
            ASSERT_EQ(t[j * L + L - 1], static_cast<uint16_t>((idx[j] * L + L - 1) % 65521)) << "row " << idx[j];
            if (ro.targets) {
              auto* g = static_cast<const uint16_t*>((*b)["targets"].data);
              ASSERT_EQ(g[j * L + L - 1], static_cast<uint16_t>((idx[j] * L + L) % 65521)) << "row " << idx[j];
            }
          }
          held.push_back(std::move(*b));
          if (held.size() > hold) held.pop_front();
        }
      }
    });
    uint64_t delivered = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      ASSERT_LE(seen[r], 1) << "row " << r;
      delivered += static_cast<uint64_t>(seen[r]);
    }
    ASSERT_EQ(delivered, token_rows_delivered(rows, o.batch_size, static_cast<uint64_t>(o.world_size)));
  }
}

TEST(LoaderTokens, ReadFaultsSkipWholeRecordsOrStopWithTheName) {
  TempDir dir;
  // Records of 16 rows of 257 uint16 (8 KiB, stored plain): most of each aligned read, so
  // a corrupted byte lands in a record rather than in the padding around it.
  const uint32_t L = 256, R = 16;
  testing::write_token_dataset(dir.str(), 400000, L, R, false);
  const uint64_t rows = (400000 - 1) / L;
  for (const FaultCase& fc : fault_cases()) {
    SCOPED_TRACE(fc.name);
    auto o = token_options(dir.str());
    testing::inject_faults(o, fc.plan);
    {
      Loader l(testing::skip_without_budget(o));  // 15 % faults: past the default budget
      auto got = token_epoch_rows(l, L);
      std::set<int64_t> unique(got.begin(), got.end());
      EXPECT_EQ(unique.size(), got.size()) << "delivered twice";
      EXPECT_EQ(got.size() + l.stats().skipped, rows) << "lost without being counted";
      // Bytes count what was delivered: every row handed out (L + 1 stored uint16 each),
      // none of the skipped ones.
      EXPECT_EQ(l.stats().record_bytes, got.size() * (L + 1) * 2);
      if (fc.drops) {
        EXPECT_GT(l.stats().skipped, 0u);
        EXPECT_EQ(l.stats().skipped % R, 0u) << "a bad record drops all of its rows";
      } else {
        EXPECT_EQ(l.stats().skipped, 0u);
      }
    }
    Loader l(o);
    if (!fc.drops) {
      EXPECT_EQ(token_epoch_rows(l, L).size(), rows);
      continue;
    }
    expect_stop_naming_a_record(l, fc, ".stk: record ");
  }
}

TEST(LoaderTokens, StoppingMidEpochWithReadsInFlightIsPrompt) {
  TempDir dir;
  const uint32_t L = 16;
  testing::write_token_dataset(dir.str(), 60000, L, 8, true);
  for (int i = 0; i < 5; ++i) {
    auto o = token_options(dir.str());
    FaultPlan slow;
    slow.seed = 5;
    slow.delay_rate = 1.0;
    slow.delay = std::chrono::microseconds(3000);
    testing::inject_faults(o, slow);
    auto l = std::make_unique<Loader>(o);
    ASSERT_TRUE(l->next().has_value());
    const auto t0 = std::chrono::steady_clock::now();
    l.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  }
}

}  // namespace
}  // namespace stoker
