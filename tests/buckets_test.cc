// Bucket lists, the nearest-bucket rule and the bucketed epoch order (stoker/buckets.h),
// split among ranks by RankSchedule as the Loader does.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "stoker/buckets.h"
#include "stoker/error.h"
#include "stoker/order.h"

namespace stoker {
namespace {

TEST(Buckets, PixelBudgetFollowsTheGridRule) {
  BucketOptions o;
  o.pixels = 512 * 512;
  o.step = 64;
  o.max_ratio = 2.0;
  const auto b = resolve_buckets(o);
  // w = 320 gives h = 768 (ratio 2.4) and w = 704 gives h = 320 (2.2): both left out.
  const std::vector<BucketSize> want = {{640, 384}, {576, 448}, {512, 512}, {448, 576}, {384, 640}};
  ASSERT_EQ(b.size(), want.size());
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i], want[i]) << i;
    EXPECT_EQ(b[i].height % 64, 0);
    EXPECT_EQ(b[i].width % 64, 0);
    EXPECT_LE(b[i].height * b[i].width, 512 * 512);
  }
  o.max_ratio = 4.0;
  EXPECT_GT(resolve_buckets(o).size(), want.size());
}

TEST(Buckets, BadOptionsAreNamed) {
  auto code = [](const BucketOptions& o) {
    try {
      resolve_buckets(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BucketOptions o;
  o.sizes = {{512, 512}, {512, 512}};
  EXPECT_NE(code(o).find("twice"), std::string::npos);
  o.sizes = {{256, 256}, {512, 512}};
  EXPECT_NE(code(o).find("same aspect"), std::string::npos);
  o.sizes = {{0, 512}};
  EXPECT_NE(code(o).find("1..8192"), std::string::npos);
  o.sizes.clear();
  o.pixels = 100;
  o.step = 64;
  EXPECT_NE(code(o).find("step"), std::string::npos);
  o.pixels = 512 * 512;
  o.max_ratio = 0.5;
  EXPECT_NE(code(o).find("max_ratio"), std::string::npos);
  EXPECT_TRUE(resolve_buckets(BucketOptions{}).empty());
}

TEST(Buckets, NearestByLogAspect) {
  const std::vector<BucketSize> b = {{768, 512}, {512, 512}, {512, 768}};
  EXPECT_EQ(nearest_bucket(b, 1000, 1000), 1u);
  EXPECT_EQ(nearest_bucket(b, 640, 480), 2u);    // 4:3 landscape: 1.33 is nearer 1.5 than 1 in log
  EXPECT_EQ(nearest_bucket(b, 480, 640), 0u);
  EXPECT_EQ(nearest_bucket(b, 1100, 1000), 1u);
  EXPECT_EQ(nearest_bucket(b, 4000, 100), 2u);
  // Brute force against the definition.
  for (int w = 1; w < 300; w += 7)
    for (int h = 1; h < 300; h += 11) {
      const uint32_t got = nearest_bucket(b, w, h);
      const double dg = std::fabs(std::log(double(w) / h) - std::log(double(b[got].width) / b[got].height));
      for (const auto& x : b) EXPECT_LE(dg, std::fabs(std::log(double(w) / h) - std::log(double(x.width) / x.height)) + 1e-12);
    }
  EXPECT_THROW(nearest_bucket(b, 0, 5), Error);
}

template <typename F>
ErrorCode testing_code(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kCancelled;
}

std::vector<uint32_t> assignment(uint64_t n, uint32_t buckets) {
  std::vector<uint32_t> out(n);
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(mix64(i) % buckets);
  return out;
}

TEST(BucketOrder, EveryGroupIsOneBucketAndNothingIsLost) {
  const auto of = assignment(1000, 5);
  std::vector<uint64_t> counts(5, 0);
  for (uint32_t b : of) ++counts[b];
  for (bool fill : {false, true}) {
    const BucketOrder o(of, 5, 7, 3, 12, fill);
    EXPECT_EQ(o.size(), BucketOrder::epoch_size(counts, 12, fill));
    EXPECT_EQ(o.size() % 12, 0u);
    std::map<uint64_t, int> seen;
    for (uint64_t k = 0; k < o.groups(); ++k)
      for (uint64_t j = 0; j < 12; ++j) {
        const uint64_t r = o.at(k * 12 + j);
        EXPECT_EQ(of[r], o.group_bucket(k));
        ++seen[r];
      }
    // Dropped: each bucket's partial group only; filled: every record at least once,
    // repeats only to complete a bucket's last group.
    uint64_t missing = 0, repeats = 0;
    std::vector<uint64_t> missing_per(5, 0), repeats_per(5, 0);
    for (uint64_t r = 0; r < of.size(); ++r) {
      const auto it = seen.find(r);
      if (it == seen.end()) ++missing, ++missing_per[of[r]];
      else repeats += it->second - 1, repeats_per[of[r]] += it->second - 1;
    }
    for (uint32_t b = 0; b < 5; ++b) {
      if (fill) {
        EXPECT_EQ(missing_per[b], 0u);
        EXPECT_EQ(repeats_per[b], (12 - counts[b] % 12) % 12);
      } else {
        EXPECT_EQ(missing_per[b], counts[b] % 12);
        EXPECT_EQ(repeats_per[b], 0u);
      }
    }
    (void)missing;
    (void)repeats;
  }
}

TEST(BucketOrder, DeterministicPerSeedAndEpoch) {
  const auto of = assignment(500, 3);
  const BucketOrder a(of, 3, 1, 0, 8, false), b(of, 3, 1, 0, 8, false);
  EXPECT_EQ(*a.sequence(), *b.sequence());
  const BucketOrder c(of, 3, 1, 1, 8, false), d(of, 3, 2, 0, 8, false);
  EXPECT_NE(*a.sequence(), *c.sequence());
  EXPECT_NE(*a.sequence(), *d.sequence());
  // Groups of one bucket do not come bucket by bucket: the group order is shuffled.
  bool interleaved = false;
  for (uint64_t k = 2; k < a.groups(); ++k)
    interleaved |= a.group_bucket(k) != a.group_bucket(k - 1) && a.group_bucket(k) == a.group_bucket(k - 2);
  EXPECT_TRUE(interleaved);
  const BucketOrder seq(of, 3, 1, 0, 8, false, false);
  for (uint64_t k = 1; k < seq.groups(); ++k) EXPECT_LE(seq.group_bucket(k - 1), seq.group_bucket(k));
}

// The Loader's use: RankSchedule over the sequence with W * B = G. Every rank gets the
// same number of batches; batch k of every rank is group k; the union over ranks, for
// W = 1, 2, 3 (B = 12 / W), is the same sequence; a resume at any step continues it.
TEST(BucketOrder, RanksShareGroupsForEveryWorldSize) {
  const auto of = assignment(2000, 7);
  const uint64_t G = 12;
  const BucketOrder o(of, 7, 42, 5, G, false);
  const EpochOrder order(OrderOptions{}, std::make_shared<const UnitLayout>(UnitLayout::single(of.size())), 5,
                         o.sequence());
  ASSERT_EQ(order.size(), o.size());
  for (uint32_t W : {1u, 2u, 3u}) {
    const uint64_t B = G / W;
    std::vector<uint64_t> global(o.size());
    uint64_t batches = UINT64_MAX;
    for (uint32_t r = 0; r < W; ++r) {
      const RankSchedule s(order.size(), B, W, r, false);
      if (batches == UINT64_MAX) batches = s.num_batches();
      EXPECT_EQ(s.num_batches(), batches);
      EXPECT_EQ(s.num_batches(), o.groups());
      for (uint64_t k = 0; k < s.num_batches(); ++k) {
        ASSERT_EQ(s.batch_length(k), B);
        for (uint64_t j = 0; j < B; ++j) {
          const uint64_t p = s.position(k, j);
          EXPECT_EQ(p / G, k);
          EXPECT_EQ(of[order.at(p)], o.group_bucket(k));
          global[p] = order.at(p);
        }
      }
    }
    EXPECT_EQ(global, *o.sequence()) << "W=" << W;
    // Resume after step 4 on this world size: the rest of the same sequence.
    for (uint32_t r = 0; r < W; ++r) {
      const RankSchedule full(order.size(), B, W, r, false);
      const RankSchedule resumed(order.size(), B, W, r, false, full.consumed_after(4));
      ASSERT_EQ(resumed.num_batches(), full.num_batches() - 4);
      for (uint64_t k = 0; k < resumed.num_batches(); ++k) EXPECT_EQ(resumed.positions(k), full.positions(k + 4));
    }
  }
}

TEST(BucketOrder, BadInputIsRefused) {
  const std::vector<uint32_t> of = {0, 1, 2};
  EXPECT_THROW(BucketOrder(of, 2, 0, 0, 4, false), Error);
  EXPECT_THROW(BucketOrder(of, 3, 0, 0, 0, false), Error);
  const BucketOrder o(of, 3, 0, 0, 4, false);
  EXPECT_EQ(o.size(), 0u);  // every bucket smaller than a group: all dropped
  const BucketOrder f(of, 3, 0, 0, 4, true);
  EXPECT_EQ(f.size(), 12u);
  EXPECT_THROW(f.at(12), Error);
}

TEST(BucketOrder, StateCarriesTheGlobalBatch) {
  OrderState s = OrderState::start(OrderOptions{}, 100, 2);
  s.consumed = 24;
  const std::string plain = s.serialize();
  EXPECT_EQ(plain.find("bucket="), std::string::npos);  // unbucketed states read as before
  EXPECT_EQ(OrderState::parse(plain).bucket_batch, 0u);
  s.bucket_batch = 12;
  const std::string text = s.serialize();
  EXPECT_NE(text.find(" bucket=12 crc="), std::string::npos) << text;
  EXPECT_EQ(OrderState::parse(text), s);
  // A zero or altered bucket field is data loss, never a silent 0 or another batch.
  std::string zero = text;
  zero.replace(zero.find("bucket=12"), 9, "bucket=0");
  EXPECT_EQ(testing_code([&] { OrderState::parse(zero); }), ErrorCode::kDataLoss);
  std::string altered = text;
  altered.replace(altered.find("bucket=12"), 9, "bucket=13");
  EXPECT_EQ(testing_code([&] { OrderState::parse(altered); }), ErrorCode::kDataLoss);
}

}  // namespace
}  // namespace stoker
