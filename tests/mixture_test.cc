// MixtureOrder: proportions per block and per batch, every draw of a source used once
// (sub-epochs when a source runs out), determinism, world-size independence through
// RankSchedule, resume from a consumed count.
#include "stoker/mixture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "stoker/error.h"
#include "stoker/order.h"

using namespace stoker;

namespace {

std::vector<MixtureSource> three() { return {{1000, 0.7}, {50000, 0.2}, {300, 0.1}}; }

}  // namespace

TEST(Mixture, QuotasFollowTheWeightsAndEveryBlockHoldsExactlyThem) {
  MixtureOrder m(three(), 7, 0, 3 * MixtureOrder::kBlock + 1000);
  EXPECT_EQ(m.size(), 3 * MixtureOrder::kBlock + 1000);
  const auto& q = m.quotas();
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0] + q[1] + q[2], MixtureOrder::kBlock);
  for (int s = 0; s < 3; ++s) EXPECT_LE(std::fabs(double(q[s]) - three()[s].weight * MixtureOrder::kBlock), 1.0);
  for (uint64_t b = 0; b < 3; ++b) {
    std::vector<uint64_t> count(3, 0);
    for (uint64_t o = 0; o < MixtureOrder::kBlock; ++o) count[m.source_at(b * MixtureOrder::kBlock + o)]++;
    EXPECT_EQ(count, q) << "block " << b;
  }
}

TEST(Mixture, BatchesDrawInProportionWithinSamplingNoise) {
  MixtureOrder m(three(), 1, 2);
  const uint64_t B = 256, batches = m.size() / B;
  ASSERT_GT(batches, 150u);
  std::vector<double> total(3, 0);
  for (uint64_t k = 0; k < batches; ++k) {
    std::vector<double> c(3, 0);
    for (uint64_t j = 0; j < B; ++j) c[m.source_at(k * B + j)]++;
    for (int s = 0; s < 3; ++s) {
      const double w = three()[s].weight, sd = std::sqrt(B * w * (1 - w));
      EXPECT_LT(std::fabs(c[s] - B * w), 6 * sd + 1) << "batch " << k << " source " << s;
      total[s] += c[s];
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(total[s] / (batches * B), three()[s].weight, 0.003) << "source " << s;
  // Not in blocks of one source: the first batch already mixes them.
  std::set<uint32_t> first;
  for (uint64_t j = 0; j < B; ++j) first.insert(m.source_at(j));
  EXPECT_EQ(first.size(), 3u);
}

TEST(Mixture, EveryDrawOfASourceIsUsedOnceAndExhaustedSourcesStartANewSubEpoch) {
  MixtureOrder m(three(), 3, 5, 2 * MixtureOrder::kBlock + 51300);
  std::vector<MixtureOrder::Draw> all(m.size());
  m.draws(0, m.size(), all.data());
  std::map<std::pair<uint32_t, uint64_t>, std::set<uint64_t>> seen;  // (source, source epoch) -> positions
  std::vector<uint64_t> last_draw(3, 0);
  std::vector<bool> any(3, false);
  for (uint64_t p = 0; p < m.size(); ++p) {
    const auto d = all[p];
    EXPECT_EQ(d.source, m.source_at(p));
    // Each source is read through its order front to back: its draws increase with p.
    const uint64_t draw = d.source_epoch * three()[d.source].samples + d.position;
    if (any[d.source]) ASSERT_GT(draw, last_draw[d.source]) << "position " << p;
    any[d.source] = true;
    last_draw[d.source] = draw;
    ASSERT_LT(d.position, three()[d.source].samples);
    const bool fresh = seen[{d.source, d.source_epoch}].insert(d.position).second;
    ASSERT_TRUE(fresh) << "position " << p << " repeats";
  }
  // Source 2 (300 samples at 0.1 of 51300) runs through ~17 sub-epochs, each complete but the last.
  std::vector<std::pair<uint64_t, size_t>> sub;
  for (const auto& [k, v] : seen)
    if (k.first == 2) sub.emplace_back(k.second, v.size());
  ASSERT_GT(sub.size(), 10u);
  for (size_t i = 0; i + 1 < sub.size(); ++i) EXPECT_EQ(sub[i].second, 300u) << "sub-epoch " << sub[i].first;
  // The next mixture epoch's sub-epochs are new ones.
  MixtureOrder next(three(), 3, 6);
  std::vector<MixtureOrder::Draw> more(5000);
  next.draws(0, 5000, more.data());
  for (uint64_t p = 0; p < 5000; ++p) {
    const auto d = more[p];
    EXPECT_EQ(seen.count({d.source, d.source_epoch}), 0u);
  }
}

TEST(Mixture, DeterministicPerSeedAndEpoch) {
  MixtureOrder a(three(), 9, 1), b(three(), 9, 1), c(three(), 10, 1), e(three(), 9, 2);
  int differ_seed = 0, differ_epoch = 0;
  std::vector<MixtureOrder::Draw> da(4096), db(4096);
  a.draws(0, 4096, da.data());
  b.draws(0, 4096, db.data());
  for (uint64_t p = 0; p < 4096; ++p) {
    const auto x = da[p], y = db[p];
    ASSERT_EQ(x.source, y.source);
    ASSERT_EQ(x.position, y.position);
    ASSERT_EQ(x.source_epoch, y.source_epoch);
    differ_seed += c.source_at(p) != x.source;
    differ_epoch += e.source_at(p) != x.source;
  }
  EXPECT_GT(differ_seed, 500);
  EXPECT_GT(differ_epoch, 500);
}

// The draws of every step are the same for world sizes 1, 2 and 3, and a resume on
// another world size continues the same sequence (the schedule is a function of the
// global position, split by RankSchedule).
TEST(Mixture, WorldSizesCoverTheSameSamplesPerStepAndResumeAnywhere) {
  MixtureOrder m(three(), 4, 0, 20000);
  std::vector<MixtureOrder::Draw> table(m.size());
  m.draws(0, m.size(), table.data());
  EXPECT_EQ(m.at(12345).position, table[12345].position);  // one position alone: the same
  auto key = [&](uint64_t p) {
    const auto d = table[p];
    return std::tuple<uint32_t, uint64_t, uint64_t>{d.source, d.source_epoch, d.position};
  };
  const uint64_t B = 8;
  for (uint32_t W : {1u, 2u, 3u}) {
    std::vector<RankSchedule> ranks;
    for (uint32_t r = 0; r < W; ++r) ranks.emplace_back(m.size(), B, W, r, false, 0);
    for (uint64_t k = 0; k < ranks[0].num_batches(); ++k) {
      std::multiset<std::tuple<uint32_t, uint64_t, uint64_t>> got, want;
      for (uint32_t r = 0; r < W; ++r)
        if (k < ranks[r].num_batches())
          for (uint64_t j = 0; j < ranks[r].batch_length(k); ++j) got.insert(key(ranks[r].position(k, j)));
      // Without drop_last the final step is padded (RankSchedule): its extra positions
      // wrap to the epoch's first, so every rank gets as many batches.
      for (uint64_t p = k * W * B; p < k * W * B + got.size(); ++p) want.insert(key(p % m.size()));
      ASSERT_EQ(got, want) << "world " << W << " step " << k;
    }
  }
  // Two ranks consume 37 steps; three ranks resume from there and finish the epoch.
  const uint64_t consumed = 37 * 2 * B;
  std::multiset<std::tuple<uint32_t, uint64_t, uint64_t>> all, want;
  for (uint64_t p = 0; p < consumed; ++p) all.insert(key(p));
  for (uint32_t r = 0; r < 3; ++r) {
    RankSchedule s(m.size(), B, 3, r, false, consumed);
    for (uint64_t k = 0; k < s.num_batches(); ++k)
      for (uint64_t j = 0; j < s.batch_length(k); ++j) all.insert(key(s.position(k, j)));
  }
  for (uint64_t p = 0; p < m.size(); ++p) want.insert(key(p));
  for (uint64_t p = 0; p < all.size() - m.size(); ++p) want.insert(key(p));  // the final step's padding
  EXPECT_LT(all.size() - m.size(), 3u);
  EXPECT_EQ(all, want);
}

TEST(Mixture, BadSourcesAndWeightsAreNamed) {
  auto code = [](std::vector<MixtureSource> s) -> int {
    try {
      MixtureOrder m(std::move(s), 0, 0);
    } catch (const Error& e) {
      return static_cast<int>(e.code());
    }
    return -1;  // accepted
  };
  const int kBad = static_cast<int>(ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({}), kBad);
  EXPECT_EQ(code({{0, 1}}), kBad);
  EXPECT_EQ(code({{10, -1}}), kBad);
  EXPECT_EQ(code({{10, NAN}}), kBad);
  EXPECT_EQ(code({{10, 1}, {10, 1e-9}}), kBad);  // no share of a block
  EXPECT_EQ(code({{10, 1}, {10, 3}}), -1);
}
