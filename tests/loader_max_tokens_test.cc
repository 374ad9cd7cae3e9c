// Padded batches under a token budget (LoaderOptions::max_tokens): the plan, and the
// Loader's batches checked token by token against the samples they came from, over an
// epoch, over ranks and across a resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "pipeline/sample_packing.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/stage.h"
#include "util/datasets.h"
#include "util/test_util.h"

using namespace stoker;
using stoker::testing::lognormal_lengths;
using stoker::testing::TempDir;
using stoker::testing::write_sample_dataset;

namespace {

constexpr uint64_t kBudget = 512;

LoaderOptions budget_options(const std::string& dir) {
  LoaderOptions o;
  o.path = dir;
  o.max_tokens = kBudget;
  o.pack_window = 64;
  o.pad_id = 7;
  o.rank = 0;
  o.world_size = 1;
  o.threads = 2;
  o.targets = o.position_ids = o.loss_mask = true;
  o.order.seed = 3;
  return o;
}

const TensorView& view(const Batch& b, const std::string& name) {
  const TensorView* t = b.find(name);
  if (!t) throw std::runtime_error("no output " + name);
  return *t;
}

// The samples ("index") of every batch `l` delivers, up to `stop_after` batches.
std::vector<std::vector<int64_t>> batches_of(Loader& l, uint64_t stop_after = UINT64_MAX) {
  std::vector<std::vector<int64_t>> out;
  while (out.size() < stop_after) {
    auto b = l.next();
    if (!b) break;
    const auto& ix = view(*b, "index");
    const int64_t* p = static_cast<const int64_t*>(ix.data);
    out.emplace_back(p, p + b->size());
  }
  return out;
}

}  // namespace

TEST(TokenBatchPlan, EverySampleOnceUnderTheBudgetLongestFirstAndSeedDecided) {
  const auto len = lognormal_lengths(5000, 400, 1);
  // A window of 1 sample: the plan widens it to 128 batches' worth.
  const internal::PackingRules rules{0, 1, LongSamples::kError, 5};
  auto name = [](uint64_t i) { return std::to_string(i); };
  const auto plan = internal::plan_token_batches(len, 1024, rules, name);
  std::vector<int> seen(len.size(), 0);
  uint64_t positions = 0;
  for (uint64_t b = 0; b < plan.batches(); ++b) {
    ASSERT_GE(plan.size(b), 1u);
    ASSERT_LE(plan.size(b) * plan.width(b), 1024u) << "batch " << b << " over the budget";
    positions += plan.size(b) * plan.width(b);
    for (uint64_t x = plan.begin[b]; x < plan.begin[b + 1]; ++x) {
      ASSERT_EQ(plan.lengths[x], len[plan.samples[x]]);
      ASSERT_LE(plan.lengths[x], plan.width(b)) << "the first sample is the longest";
      seen[plan.samples[x]]++;
    }
  }
  for (int s : seen) ASSERT_EQ(s, 1);
  EXPECT_EQ(plan.positions, positions);
  EXPECT_GT(plan.efficiency(), 0.95) << "sorting within wide windows keeps padding small";
  const auto again = internal::plan_token_batches(len, 1024, rules, name);
  EXPECT_EQ(again.samples, plan.samples);
  EXPECT_EQ(again.begin, plan.begin);
  auto other = rules;
  other.seed = 6;
  EXPECT_NE(internal::plan_token_batches(len, 1024, other, name).samples, plan.samples);
}

TEST(TokenBatchPlan, LongSamplesAreRefusedOrTruncatedAndSplitIsRefused) {
  const std::vector<uint32_t> len = {10, 70, 0, 33};
  auto name = [](uint64_t i) { return "sample " + std::to_string(i); };
  try {
    internal::plan_token_batches(len, 64, {0, 8, LongSamples::kError, 0}, name);
    FAIL() << "a sample over the budget was batched";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1: a sample of 70 tokens is longer than max_tokens (64)"),
              std::string::npos)
        << e.what();
  }
  const auto cut = internal::plan_token_batches(len, 64, {0, 8, LongSamples::kTruncate, 0}, name);
  EXPECT_EQ(cut.truncated_tokens, 6u);
  EXPECT_EQ(cut.empty_samples, 1u);
  EXPECT_EQ(cut.tokens, 10u + 64 + 33);
  EXPECT_THROW(internal::plan_token_batches(len, 64, {0, 8, LongSamples::kSplit, 0}, name), Error);
}

TEST(MaxTokens, EverySampleOnceWithItsTokensMasksAndPadding) {
  TempDir dir;
  const auto len = lognormal_lengths(500, 300, 2);
  write_sample_dataset(dir.str("ds"), len, true);
  Loader l(budget_options(dir.str("ds")));
  std::vector<int> seen(len.size(), 0);
  uint64_t padding = 0, batches = 0;
  while (auto b = l.next()) {
    batches++;
    const auto& tok = view(*b, "tokens");
    ASSERT_EQ(tok.shape.size(), 2u);
    const uint64_t B = b->size();
    const uint64_t L = static_cast<uint64_t>(tok.shape[1]);
    ASSERT_EQ(static_cast<uint64_t>(tok.shape[0]), B);
    ASSERT_LE(B * L, kBudget) << "the budget counts padding";
    for (const char* name : {"targets", "attention_mask", "loss_mask", "position_ids"})
      ASSERT_EQ(view(*b, name).shape, tok.shape) << name;
    ASSERT_EQ(view(*b, "index").shape, std::vector<int64_t>{static_cast<int64_t>(B)});
    const int64_t* ix = static_cast<const int64_t*>(view(*b, "index").data);
    uint64_t longest = 0;
    for (uint64_t i = 0; i < B; ++i) {
      const uint64_t s = static_cast<uint64_t>(ix[i]);
      ASSERT_LT(s, len.size());
      seen[s]++;
      longest = std::max<uint64_t>(longest, len[s]);
      const uint32_t* t = static_cast<const uint32_t*>(tok.data) + i * L;
      const uint32_t* g = static_cast<const uint32_t*>(view(*b, "targets").data) + i * L;
      const uint8_t* a = static_cast<const uint8_t*>(view(*b, "attention_mask").data) + i * L;
      const uint8_t* m = static_cast<const uint8_t*>(view(*b, "loss_mask").data) + i * L;
      const int32_t* p = static_cast<const int32_t*>(view(*b, "position_ids").data) + i * L;
      for (uint32_t k = 0; k < L; ++k) {
        if (k >= len[s]) {  // padding
          ASSERT_EQ(t[k], 7u);
          ASSERT_EQ(g[k], 7u);
          ASSERT_EQ(a[k], 0);
          ASSERT_EQ(m[k], 0);
          ASSERT_EQ(p[k], 0);
          padding++;
          continue;
        }
        ASSERT_EQ(t[k], s * 1000 + k);
        ASSERT_EQ(a[k], 1);
        ASSERT_EQ(p[k], int32_t(k));
        if (k + 1 < len[s]) {
          ASSERT_EQ(g[k], t[k] + 1);
          ASSERT_EQ(m[k], (k + 1) % 3 != 0) << "the stored mask of the target";
        } else {
          ASSERT_EQ(g[k], 7u);
          ASSERT_EQ(m[k], 0);
        }
      }
    }
    ASSERT_EQ(L, longest) << "padded to the longest sample";
  }
  for (size_t s = 0; s < len.size(); ++s) ASSERT_EQ(seen[s], 1) << "sample " << s;
  EXPECT_EQ(batches, l.num_batches());
  const LoaderStats st = l.stats();
  EXPECT_EQ(st.padding_tokens, padding);
  EXPECT_EQ(st.samples, len.size());
}

TEST(MaxTokens, OneGlobalSequenceRoundRobinOverRanksWithEqualCountsAndExactResume) {
  TempDir dir;
  const auto len = lognormal_lengths(700, 200, 3);
  write_sample_dataset(dir.str("ds"), len, false);
  auto open = [&](int rank, int world, bool drop_last = false) {
    auto o = budget_options(dir.str("ds"));
    o.rank = rank;
    o.world_size = world;
    o.drop_last = drop_last;
    return std::make_unique<Loader>(o);
  };
  const auto one = batches_of(*open(0, 1));
  EXPECT_EQ(batches_of(*open(0, 1)), one) << "the seed decides the batches";
  std::multiset<int64_t> all;
  for (const auto& b : one) all.insert(b.begin(), b.end());
  ASSERT_EQ(all.size(), len.size());
  ASSERT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), len.size()) << "no sample twice";
  const uint64_t G = one.size();
  for (int W : {2, 3}) {
    for (bool drop_last : {false, true}) {
      std::vector<std::vector<std::vector<int64_t>>> ranks;
      for (int r = 0; r < W; ++r) ranks.push_back(batches_of(*open(r, W, drop_last)));
      const uint64_t steps = drop_last ? G / W : (G + W - 1) / W;
      for (int r = 0; r < W; ++r) {
        ASSERT_EQ(ranks[r].size(), steps) << "rank " << r << " of " << W << ": every rank the same count";
        for (uint64_t k = 0; k < steps; ++k)  // rank r takes global batches r, r + W, ...; past the end, the first
          ASSERT_EQ(ranks[r][k], one[(k * W + r) % G]) << "rank " << r << " of " << W << ", batch " << k;
      }
    }
  }
  // Resume after 4 batches, on one rank and on two: the rest, exactly.
  auto l = open(0, 1);
  batches_of(*l, 4);
  const OrderState st = l->state();
  auto rest = open(0, 1);
  rest->load_state(st);
  EXPECT_EQ(batches_of(*rest), std::vector<std::vector<int64_t>>(one.begin() + 4, one.end()));
  std::vector<std::vector<int64_t>> two[2];
  for (int r = 0; r < 2; ++r) {
    auto lr = open(r, 2, true);
    lr->load_state(st);
    two[r] = batches_of(*lr);
  }
  ASSERT_EQ(two[0].size(), two[1].size());
  for (size_t k = 0; k < two[0].size(); ++k) {
    EXPECT_EQ(two[0][k], one[4 + 2 * k]);
    EXPECT_EQ(two[1][k], one[4 + 2 * k + 1]);
  }
}

TEST(MaxTokens, BadInputAndOptionsAreRefusedNamingWhy) {
  TempDir dir;
  write_sample_dataset(dir.str("ds"), {5, 600, 3}, false);
  try {
    Loader l(budget_options(dir.str("ds")));
    FAIL() << "a sample over the budget was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("record 1 (source 'conv/1'): a sample of 600 tokens is longer than "
                                         "max_tokens (512)"),
              std::string::npos)
        << e.what();
  }
  auto cut = budget_options(dir.str("ds"));
  cut.long_samples = LongSamples::kTruncate;
  Loader l(cut);
  uint64_t tokens = 0;
  while (auto b = l.next()) {
    const auto& a = view(*b, "attention_mask");
    for (int64_t i = 0; i < a.shape[0] * a.shape[1]; ++i) tokens += static_cast<const uint8_t*>(a.data)[i];
  }
  EXPECT_EQ(tokens, 5u + 512 + 3);
  EXPECT_EQ(l.stats().truncated_tokens, 600u - 512);
  for (auto bad : {+[](LoaderOptions& o) { o.doc_ids = true; }, +[](LoaderOptions& o) { o.cu_seqlens = true; },
                   +[](LoaderOptions& o) { o.seq_len = 64; }, +[](LoaderOptions& o) { o.on_error = OnError::kSkip; },
                   +[](LoaderOptions& o) { o.long_samples = LongSamples::kSplit; }}) {
    auto o = cut;
    bad(o);
    EXPECT_THROW(Loader{o}, Error);
  }
}

// The Stager's slots hold the budget, whatever [B, L] a batch has: the same batches as
// the Loader's, tokens and attention mask byte for byte.
TEST(MaxTokens, StagedBatchesVaryInShapeWithinTheSlotsAndMatchTheLoaders) {
  TempDir dir;
  write_sample_dataset(dir.str("ds"), lognormal_lengths(300, 250, 4), false);
  const LoaderOptions o = budget_options(dir.str("ds"));
  std::vector<std::string> want;
  {
    Loader l(o);
    while (auto b = l.next()) {
      const auto& t = view(*b, "tokens");
      const auto& a = view(*b, "attention_mask");
      want.push_back(std::to_string(t.shape[0]) + "x" + std::to_string(t.shape[1]) + ":" +
                     std::string(static_cast<const char*>(t.data), t.bytes()) +
                     std::string(static_cast<const char*>(a.data), a.bytes()));
    }
  }
  StagerOptions so;
  so.backend = StageBackend::kHost;
  so.device_slots = 2;
  Stager st(o, so);
  std::vector<std::string> got;
  std::set<int64_t> widths;
  while (auto b = st.next()) {
    b->wait(nullptr);
    const auto& t = (*b)["tokens"];
    const auto& a = (*b)["attention_mask"];
    widths.insert(t.shape[1]);
    got.push_back(std::to_string(t.shape[0]) + "x" + std::to_string(t.shape[1]) + ":" +
                  std::string(static_cast<const char*>(t.data), t.bytes()) +
                  std::string(static_cast<const char*>(a.data), a.bytes()));
    b->release(nullptr);
  }
  EXPECT_GT(widths.size(), 3u) << "batches of several lengths";
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << "batch " << k;
}

// A mixture under a token budget: every batch is one source's planned batch, whole (its
// samples all from that source, each checked token by token, under the budget), and the
// sequence is the seed's, the same on every world size with equal counts, and resumes.
TEST(MaxTokens, MixturesDrawWholePlannedBatchesDeterministicOnRanksAndResumable) {
  TempDir dir;
  const std::vector<std::vector<uint32_t>> len = {lognormal_lengths(400, 300, 5), lognormal_lengths(150, 120, 6)};
  write_sample_dataset(dir.str("a"), len[0], false);
  write_sample_dataset(dir.str("b"), len[1], false);
  using Drawn = std::pair<int64_t, std::vector<int64_t>>;  // (source, its samples)
  auto open = [&](int rank, int world, bool drop_last = false) {
    auto o = budget_options(dir.str("a"));
    o.sources = {dir.str("a"), dir.str("b")};
    o.weights = {1, 3};
    o.rank = rank;
    o.world_size = world;
    o.drop_last = drop_last;
    return std::make_unique<Loader>(o);
  };
  auto drawn = [&](Loader& l, uint64_t stop_after = UINT64_MAX) {
    std::vector<Drawn> out;
    while (out.size() < stop_after) {
      auto b = l.next();
      if (!b) break;
      const auto& tok = view(*b, "tokens");
      const uint64_t B = b->size(), L = static_cast<uint64_t>(tok.shape[1]);
      EXPECT_LE(B * L, kBudget);
      EXPECT_EQ(view(*b, "source").shape, std::vector<int64_t>{static_cast<int64_t>(B)});
      EXPECT_EQ(view(*b, "attention_mask").shape, tok.shape);
      const int64_t* src = static_cast<const int64_t*>(view(*b, "source").data);
      const int64_t* ix = static_cast<const int64_t*>(view(*b, "index").data);
      Drawn d{src[0], {}};
      for (uint64_t i = 0; i < B; ++i) {
        EXPECT_EQ(src[i], src[0]) << "a batch is one source's";
        const uint64_t s = static_cast<uint64_t>(ix[i]);
        const auto& n = len[static_cast<size_t>(src[0])];
        if (s >= n.size()) {
          ADD_FAILURE() << "index " << s << " past source " << src[0];
          continue;
        }
        const uint32_t* t = static_cast<const uint32_t*>(tok.data) + i * L;
        for (uint32_t k = 0; k < L; ++k) EXPECT_EQ(t[k], k < n[s] ? s * 1000 + k : 7u) << "sample " << s << " token " << k;
        d.second.push_back(ix[i]);
      }
      out.push_back(std::move(d));
    }
    return out;
  };
  const auto one = drawn(*open(0, 1));
  ASSERT_EQ(drawn(*open(0, 1)), one) << "the seed decides the sequence";
  // Whole batches: each source's distinct batches hold each of its samples at most once.
  uint64_t from_b = 0;
  std::set<std::pair<int64_t, std::vector<int64_t>>> distinct(one.begin(), one.end());
  std::vector<std::multiset<int64_t>> samples(2);
  for (const auto& [s, ix] : distinct) samples[static_cast<size_t>(s)].insert(ix.begin(), ix.end());
  for (const auto& m : samples) EXPECT_EQ(std::set<int64_t>(m.begin(), m.end()).size(), m.size());
  for (const auto& d : one) from_b += d.first == 1;
  const uint64_t G = one.size();
  EXPECT_NEAR(static_cast<double>(from_b) / static_cast<double>(G), 0.75, 0.1) << "weights count batches";
  for (int W : {2, 3}) {
    for (bool drop_last : {false, true}) {
      const uint64_t steps = drop_last ? G / W : (G + W - 1) / W;
      for (int r = 0; r < W; ++r) {
        const auto got = drawn(*open(r, W, drop_last));
        ASSERT_EQ(got.size(), steps) << "rank " << r << " of " << W << ": every rank the same count";
        for (uint64_t k = 0; k < steps; ++k)
          ASSERT_EQ(got[k], one[(k * W + r) % G]) << "rank " << r << " of " << W << ", batch " << k;
      }
    }
  }
  auto l = open(0, 1);
  drawn(*l, 5);
  const OrderState st = l->state();
  auto rest = open(0, 1);
  rest->load_state(st);
  EXPECT_EQ(drawn(*rest), std::vector<Drawn>(one.begin() + 5, one.end()));
  auto second = open(1, 2);
  second->load_state(st);
  const auto odd = drawn(*second);
  for (size_t k = 0; k < odd.size() && 5 + 2 * k + 1 < G; ++k) EXPECT_EQ(odd[k], one[5 + 2 * k + 1]);
}
