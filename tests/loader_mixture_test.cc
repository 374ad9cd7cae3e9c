// Loader over a weighted mixture of token datasets (LoaderOptions::sources): every
// sample is its source's row, the proportions hold, the sequence is deterministic,
// the same for world sizes 1, 2 and 3, and resumes on another world size.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/pack.h"
#include "util/test_util.h"

using namespace stoker;
using stoker::testing::TempDir;
using stoker::testing::write_file;

namespace {

constexpr uint32_t N = 16;

// Source s's stream: token t is (s * 20000 + t * 7) % 65521, so a row names its source and place.
uint16_t tok(int s, uint64_t t) { return static_cast<uint16_t>((s * 20000 + t * 7) % 65521); }

std::string make_source(TempDir& dir, int s, uint64_t tokens) {
  std::vector<uint8_t> b(tokens * 2);
  for (uint64_t t = 0; t < tokens; ++t) {
    const uint16_t v = tok(s, t);
    std::memcpy(b.data() + 2 * t, &v, 2);
  }
  const std::string bin = dir.str("s" + std::to_string(s) + ".bin"), out = dir.str("ds" + std::to_string(s));
  write_file(bin, b);
  TokensPackOptions o;
  o.seq_len = N;
  o.rows_per_record = 5;
  o.zstd_level = 1;
  pack_tokens(bin, out, o);
  return out;
}

struct Mix {
  TempDir dir;
  std::vector<std::string> paths;
  Mix() {
    paths.push_back(make_source(dir, 0, 4001 * N + 1));  // 4001 rows
    paths.push_back(make_source(dir, 1, 700 * N + 1));   // 700 rows: runs out, sub-epochs
  }
  LoaderOptions options(uint64_t batch, int rank, int world) const {
    LoaderOptions o;
    o.sources = paths;
    o.weights = {1, 1};  // half each: source 1 repeats ~3.4 times an epoch
    o.batch_size = batch;
    o.rank = rank;
    o.world_size = world;
    o.threads = 1;
    o.order.seed = 17;
    return o;
  }
};

using Sample = std::pair<int64_t, int64_t>;  // (source, index)

// The batch's samples, each checked against its source's stream.
std::vector<Sample> samples_of(const Batch& b) {
  std::vector<Sample> out;
  const auto* src = static_cast<const int64_t*>(b["source"].data);
  const auto* idx = static_cast<const int64_t*>(b["index"].data);
  const auto* t = static_cast<const uint16_t*>(b["tokens"].data);
  EXPECT_EQ(b["source"].shape, (std::vector<int64_t>{static_cast<int64_t>(b.size())}));
  for (uint64_t j = 0; j < b.size(); ++j) {
    for (uint32_t i = 0; i < N; i += 5)
      EXPECT_EQ(t[j * N + i], tok(static_cast<int>(src[j]), static_cast<uint64_t>(idx[j]) * N + i))
          << "sample " << j << " token " << i;
    out.emplace_back(src[j], idx[j]);
  }
  return out;
}

std::vector<Sample> epoch_of(Loader& l) {
  std::vector<Sample> all;
  while (auto b = l.next()) {
    auto s = samples_of(*b);
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

}  // namespace

TEST(LoaderMixture, SamplesAreTheirSourcesRowsInProportion) {
  Mix m;
  Loader l(m.options(32, 0, 1));
  EXPECT_EQ(l.epoch_samples(), 4701u);
  const auto all = epoch_of(l);
  ASSERT_EQ(all.size(), 4701u);
  std::map<int64_t, uint64_t> count;
  std::map<int64_t, std::set<int64_t>> distinct;
  for (auto [s, i] : all) {
    count[s]++;
    distinct[s].insert(i);
  }
  EXPECT_NEAR(double(count[0]) / all.size(), 0.5, 0.02);
  EXPECT_NEAR(double(count[1]) / all.size(), 0.5, 0.02);
  EXPECT_EQ(distinct[1].size(), 700u);  // the small source ran through all its rows (several times)
  // Within a batch of 32 both sources appear (not runs of one).
  Loader again(m.options(32, 0, 1));
  auto b = again.next();
  std::set<int64_t> in_first;
  for (auto [s, i] : samples_of(*b)) in_first.insert(s);
  EXPECT_EQ(in_first.size(), 2u);
}

TEST(LoaderMixture, DeterministicPerSeedAndEpoch) {
  Mix m;
  Loader a(m.options(16, 0, 1)), b(m.options(16, 0, 1));
  const auto x = epoch_of(a), y = epoch_of(b);
  EXPECT_EQ(x, y);
  b.set_epoch(1);
  EXPECT_NE(epoch_of(b), x);
  a.set_epoch(0);
  EXPECT_EQ(epoch_of(a), x);  // again, from its start
}

TEST(LoaderMixture, WorldSizesCoverTheSameSamplesPerStepAndResumeOnAnother) {
  Mix m;
  const uint64_t B = 4;
  Loader one(m.options(B, 0, 1));
  const auto S = epoch_of(one);  // the epoch's sequence
  for (int W : {2, 3}) {
    std::vector<std::vector<std::vector<Sample>>> per_rank(W);
    for (int r = 0; r < W; ++r) {
      Loader l(m.options(B, r, W));
      while (auto b = l.next()) per_rank[r].push_back(samples_of(*b));
    }
    for (size_t k = 0; k < per_rank[0].size(); ++k) {
      std::multiset<Sample> got, want;
      for (int r = 0; r < W; ++r)
        if (k < per_rank[r].size()) got.insert(per_rank[r][k].begin(), per_rank[r][k].end());
      // The final step is padded with the epoch's first samples (RankSchedule, no drop_last).
      for (size_t p = k * W * B; p < k * W * B + got.size(); ++p) want.insert(S[p % S.size()]);
      ASSERT_EQ(got, want) << "world " << W << " step " << k;
    }
  }
  // Two ranks take 50 steps; three ranks resume from their state and finish the epoch.
  std::multiset<Sample> seen;
  OrderState st;
  for (int r = 0; r < 2; ++r) {
    Loader l(m.options(B, r, 2));
    for (int k = 0; k < 50; ++k) {
      auto b = l.next();
      ASSERT_TRUE(b);
      for (auto s : samples_of(*b)) seen.insert(s);
    }
    st = l.state();
  }
  EXPECT_EQ(st.consumed, 50 * 2 * B);
  for (int r = 0; r < 3; ++r) {
    Loader l(m.options(B, r, 3));
    l.load_state(st);
    for (auto s : epoch_of(l)) seen.insert(s);
  }
  std::multiset<Sample> want(S.begin(), S.end());
  ASSERT_GE(seen.size(), S.size());
  EXPECT_LT(seen.size() - S.size(), 3u);  // three ranks pad the final step
  want.insert(S.begin(), S.begin() + static_cast<long>(seen.size() - S.size()));
  EXPECT_EQ(seen, want);
}

TEST(LoaderMixture, BadMixturesAreNamed) {
  Mix m;
  auto o = m.options(8, 0, 1);
  o.weights = {1};
  EXPECT_THROW(Loader{o}, Error);
  o.weights = {1, -2};
  EXPECT_THROW(Loader{o}, Error);
  o = m.options(8, 0, 1);
  o.on_error = OnError::kSkip;
  EXPECT_THROW(Loader{o}, Error);
}

// Image datasets mix the same way: each sample is what its own dataset's loader gives
// for that record (eval transform: no random draw), with its label.
TEST(LoaderMixture, ImageDatasetsMixToo) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int s = 0; s < 2; ++s) {
    SampleImageFolderOptions so;
    so.images = 24 + 12 * s;
    so.classes = 3;
    so.seed = 40 + s;
    so.threads = 2;
    make_sample_imagefolder(dir.str("src" + std::to_string(s)), so);
    pack_imagefolder(dir.str("src" + std::to_string(s)), dir.str("img" + std::to_string(s)));
    paths.push_back(dir.str("img" + std::to_string(s)));
  }
  auto base = [](const std::string& path) {
    LoaderOptions o;
    o.path = path;
    o.batch_size = 5;
    o.rank = 0;
    o.world_size = 1;
    o.threads = 2;
    o.transform.kind = ImageTransform::Kind::kEval;
    o.transform.size = 32;
    o.order.kind = OrderKind::kSequential;
    return o;
  };
  // Each dataset alone: index -> (image bytes, label).
  std::vector<std::map<int64_t, std::pair<std::vector<uint8_t>, int64_t>>> alone(2);
  for (int s = 0; s < 2; ++s) {
    Loader l(base(paths[s]));
    while (auto b = l.next()) {
      const auto& im = (*b)["image"];
      const size_t per = im.bytes() / b->size();
      for (uint64_t j = 0; j < b->size(); ++j) {
        const auto* p = static_cast<const uint8_t*>(im.data) + j * per;
        alone[s][static_cast<const int64_t*>((*b)["index"].data)[j]] = {
            std::vector<uint8_t>(p, p + per), static_cast<const int64_t*>((*b)["label"].data)[j]};
      }
    }
  }
  auto o = base("");
  o.sources = paths;
  o.weights = {2, 1};
  o.order.kind = OrderKind::kShuffled;
  o.samples_per_epoch = 90;  // more than both hold: each starts epochs of its own
  Loader l(o);
  std::vector<int> count(2, 0);
  while (auto b = l.next()) {
    const auto& im = (*b)["image"];
    ASSERT_EQ(im.shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), 32, 32, 3}));
    const size_t per = im.bytes() / b->size();
    for (uint64_t j = 0; j < b->size(); ++j) {
      const int64_t s = static_cast<const int64_t*>((*b)["source"].data)[j];
      const int64_t i = static_cast<const int64_t*>((*b)["index"].data)[j];
      const auto& want = alone.at(static_cast<size_t>(s)).at(i);
      const auto* p = static_cast<const uint8_t*>(im.data) + j * per;
      EXPECT_EQ(std::vector<uint8_t>(p, p + per), want.first) << "source " << s << " index " << i;
      EXPECT_EQ(static_cast<const int64_t*>((*b)["label"].data)[j], want.second);
      count[static_cast<size_t>(s)]++;
    }
  }
  EXPECT_EQ(count[0] + count[1], 90);
  EXPECT_NEAR(count[0], 60, 6);
}
