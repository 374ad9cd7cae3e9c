// Ranks without drop_last: every rank gets the same number of batches of the same
// lengths (DDP hangs otherwise), records padded with the epoch's first samples, token
// rows trimmed to a multiple of the world size; resuming at another world size still
// continues the same sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

// n images of 20..28 x 18..24 in shards of 32 KiB, label i % 3.
void make_images(const std::string& dir, int n) {
  testing::write_image_dataset(dir, {.count = n,
                                     .shard_size = 32 << 10,
                                     .classes = 3,
                                     .class_names = false,
                                     .size = [](int i) { return std::pair<int, int>{20 + i % 9, 18 + i % 7}; }});
}

// `rows` rows of L + 1 tokens, R rows a record, plain, in the writer's default shards.
void make_tokens(const std::string& dir, uint64_t rows, uint32_t L, uint32_t R) {
  testing::write_token_dataset(dir, rows * L + 1, L, R, false, DatasetWriterOptions{}.shard_size);
}

// Images cropped to 16, batch `batch`, 2 threads.
LoaderOptions rank_options(const std::string& dir, uint64_t batch) {
  LoaderOptions o = testing::image_options(dir);
  o.batch_size = batch;
  o.transform.size = 16;
  return o;
}

// Per rank: the index tensor of each batch.
std::vector<std::vector<std::vector<int64_t>>> run_world(LoaderOptions o, int world, uint64_t* len_check = nullptr) {
  std::vector<std::vector<std::vector<int64_t>>> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    o.rank = r;
    o.world_size = world;
    Loader l(o);
    if (len_check) *len_check = l.num_batches();
    while (auto b = l.next()) {
      const auto& idx = (*b)["index"];
      const auto* p = static_cast<const int64_t*>(idx.data);
      out[static_cast<size_t>(r)].emplace_back(p, p + b->size());
    }
    EXPECT_EQ(out[static_cast<size_t>(r)].size(), l.num_batches()) << "rank " << r << ": len() and batches disagree";
  }
  return out;
}

TEST(LoaderRanks, ImageTailIsPaddedSoEveryRankGetsTheSameBatches) {
  TempDir dir;
  make_images(dir.str(), 120);
  auto o = rank_options(dir.str(), 17);
  o.order.seed = 3;
  // The case: 120 samples, world 7, batch 17 gave rank 0 two batches and the
  // others one, and the second all-reduce of rank 0 waited forever.
  const auto world = run_world(o, 7);
  std::map<int64_t, int> seen;
  for (int r = 0; r < 7; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& batches = world[static_cast<size_t>(r)];
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[0].size(), 17u);
    EXPECT_EQ(batches[1].size(), 1u);
    for (const auto& b : batches)
      for (int64_t i : b) seen[i]++;
  }
  // All 120 samples, and the 6 padding samples are the epoch order's first six.
  ASSERT_EQ(seen.size(), 120u);
  o.rank = 0;
  o.world_size = 1;
  o.batch_size = 6;
  Loader one(o);
  auto first = one.next();
  ASSERT_TRUE(first);
  const auto* head = static_cast<const int64_t*>((*first)["index"].data);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(seen[head[i]], 2) << "epoch position " << i << " should repeat as padding";
    EXPECT_EQ(world[static_cast<size_t>(i + 1)][1][0], head[i]) << "rank " << i + 1 << "'s padding";
  }
  int twice = 0;
  for (auto& [idx, n] : seen) twice += n == 2;
  EXPECT_EQ(twice, 6);
}

TEST(LoaderRanks, DropLastStillDropsTheTailForEveryRank) {
  TempDir dir;
  make_images(dir.str(), 120);
  auto o = rank_options(dir.str(), 17);
  o.drop_last = true;
  const auto world = run_world(o, 7);
  std::set<int64_t> seen;
  for (const auto& batches : world) {
    ASSERT_EQ(batches.size(), 1u);
    ASSERT_EQ(batches[0].size(), 17u);
    seen.insert(batches[0].begin(), batches[0].end());
  }
  EXPECT_EQ(seen.size(), 119u);
}

TEST(LoaderRanks, ResumingAtAnotherWorldSizeContinuesTheSequenceAndPadsItsOwnTail) {
  TempDir dir;
  make_images(dir.str(), 61);
  auto o = rank_options(dir.str(), 4);
  o.order.seed = 11;
  // Reference: one rank, batch 1: the epoch order itself.
  auto ref_opt = o;
  ref_opt.batch_size = 1;
  std::vector<int64_t> ref;
  const auto ref_world = run_world(ref_opt, 1);
  for (auto& b : ref_world[0]) ref.push_back(b[0]);
  ASSERT_EQ(ref.size(), 61u);

  // World 3 takes 2 steps (24 samples), saves; world 5 resumes with 37 left: one step
  // of 20, then 17 left -> 4 each, 3 padding samples (the epoch's first three).
  OrderState saved;
  {
    o.rank = 0;
    o.world_size = 3;
    Loader l(o);
    l.next();
    l.next();
    saved = l.state();
    ASSERT_EQ(saved.consumed, 24u);
  }
  std::vector<std::vector<std::vector<int64_t>>> after(5);
  for (int r = 0; r < 5; ++r) {
    o.rank = r;
    o.world_size = 5;
    Loader l(o);
    l.load_state(saved);
    EXPECT_EQ(l.num_batches(), 2u) << "rank " << r;
    while (auto b = l.next()) {
      const auto* p = static_cast<const int64_t*>((*b)["index"].data);
      after[static_cast<size_t>(r)].emplace_back(p, p + b->size());
    }
  }
  for (size_t r = 0; r < 5; ++r) ASSERT_EQ(after[r].size(), 2u) << "rank " << r;
  std::vector<int64_t> seq;  // the world's view: step, sample, rank
  for (size_t k = 0; k < 2; ++k)
    for (size_t j = 0; j < 4; ++j)
      for (size_t r = 0; r < 5; ++r) {
        ASSERT_EQ(after[r][k].size(), 4u);
        seq.push_back(after[r][k][j]);
      }
  ASSERT_EQ(seq.size(), 40u);
  for (size_t i = 0; i < 37; ++i) EXPECT_EQ(seq[i], ref[24 + i]) << "resumed position " << i;
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(seq[37 + i], ref[i]) << "padding " << i;
}

TEST(LoaderRanks, TokenTailIsTrimmedToAMultipleOfTheWorldSize) {
  TempDir dir;
  // 130 rows: world 7, batch 17 -> one step of 119, 11 left: one more row each, 4 rows
  // not delivered (padding would need the first window decompressed again).
  make_tokens(dir.str(), 130, 8, 10);
  LoaderOptions o;
  o.path = dir.str();
  o.batch_size = 17;
  o.threads = 2;
  o.order.seed = 5;
  const auto world = run_world(o, 7);
  std::set<int64_t> seen;
  for (const auto& batches : world) {
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(batches[0].size(), 17u);
    EXPECT_EQ(batches[1].size(), 1u);
    for (const auto& b : batches) {
      for (int64_t i : b) EXPECT_TRUE(seen.insert(i).second) << "row " << i << " twice";
    }
  }
  EXPECT_EQ(seen.size(), 126u);
  // One rank: every row, the last batch short.
  const auto one = run_world(o, 1);
  ASSERT_EQ(one[0].size(), 8u);
  EXPECT_EQ(one[0].back().size(), 130u - 7 * 17);
}

// Fewer rows left than ranks: the final step goes and the full ones keep their length
// (the last full batch was once cut to 0 rows and the consumer waited for it forever).
TEST(LoaderRanks, TokenTailOfFewerRowsThanRanksKeepsTheFullSteps) {
  TempDir dir;
  make_tokens(dir.str(), 10937, 8, 3);
  auto o = testing::lone_worker_options(dir.str());
  for (int rank = 0; rank < 2; ++rank) {
    o.rank = rank;
    Loader l(o);
    l.set_epoch(4);
    EXPECT_EQ(testing::drain_holding(l, 5), l.num_batches());
    EXPECT_EQ(l.num_batches(), 10937u / 4);
  }
}

}  // namespace
}  // namespace stoker
