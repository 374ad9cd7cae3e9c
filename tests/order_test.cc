// Tests for stoker/order.h: permutations, epoch orders, rank schedules, resume state.
#include "stoker/order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::error_code_of;

std::vector<uint64_t> sequence(const EpochOrder& order) {
  std::vector<uint64_t> s(order.size());
  for (uint64_t p = 0; p < order.size(); ++p) s[p] = order.at(p);
  return s;
}

void expect_permutation_of_range(const std::vector<uint64_t>& s, uint64_t n,
                                 const std::string& what) {
  ASSERT_EQ(s.size(), n) << what;
  std::vector<bool> seen(n, false);
  for (uint64_t v : s) {
    ASSERT_LT(v, n) << what;
    ASSERT_FALSE(seen[v]) << what << ": " << v << " twice";
    seen[v] = true;
  }
}

// Pearson's chi-square statistic of observed counts against a uniform expectation.
double chi_square_uniform(const std::vector<uint64_t>& counts) {
  double total = 0;
  for (uint64_t c : counts) total += static_cast<double>(c);
  const double expected = total / static_cast<double>(counts.size());
  double chi = 0;
  for (uint64_t c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

// kChunkLocal order: `seed`, chunks of `chunk` records, windows of `window` chunks.
OrderOptions chunk_local(uint64_t seed, uint64_t chunk, uint64_t window) {
  OrderOptions o;
  o.kind = OrderKind::kChunkLocal;
  o.seed = seed;
  o.chunk_size = chunk;
  o.window_chunks = window;
  return o;
}

// ---------------------------------------------------------------------------------
// Permutation

TEST(Permutation, IsABijectionForEveryNUpTo2000) {
  for (uint64_t key : {uint64_t{0}, uint64_t{0xdeadbeef}}) {
    for (uint64_t n = 1; n <= 2000; ++n) {
      const Permutation perm(n, key);
      std::vector<bool> seen(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t x = perm(i);
        ASSERT_LT(x, n) << "n=" << n;
        ASSERT_FALSE(seen[x]) << "n=" << n << " x=" << x;
        seen[x] = true;
        ASSERT_EQ(perm.inverse(x), i) << "n=" << n;
      }
    }
  }
}

TEST(Permutation, IsABijectionForLargerN) {
  for (uint64_t n : {uint64_t{65536}, uint64_t{65537}, uint64_t{(1 << 20) - 1},
                     uint64_t{1000003}}) {
    const Permutation perm(n, n * 31);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t x = perm(i);
      ASSERT_LT(x, n);
      ASSERT_FALSE(seen[x]) << "n=" << n;
      seen[x] = true;
    }
  }
}

TEST(Permutation, HugeNRoundTripsThroughInverse) {
  std::mt19937_64 rng(7);
  for (uint64_t n : {(uint64_t{1} << 40) + 7, (uint64_t{1} << 33) - 1, kMaxOrderUnits,
                     uint64_t{1281167}}) {
    const Permutation perm(n, 99);
    std::set<uint64_t> images;
    for (int t = 0; t < 20000; ++t) {
      const uint64_t i = rng() % n;
      const uint64_t x = perm(i);
      ASSERT_LT(x, n);
      ASSERT_EQ(perm.inverse(x), i);
    }
    // Distinct inputs, distinct outputs (a few consecutive inputs).
    for (uint64_t i = 0; i < 1000; ++i) images.insert(perm(i));
    EXPECT_EQ(images.size(), 1000u);
  }
}

TEST(Permutation, BulkApplyMatchesOneAtATime) {
  // Sizes around the half-split boundaries (0-bit halves take the plain path), block
  // edges (64) and large domains where the vectorised rounds run.
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 63ull, 64ull, 65ull, 200ull, 4064ull, 100003ull, 1ull << 40}) {
    for (uint64_t key : {0ull, 7ull, 0x9e3779b97f4a7c15ull}) {
      const Permutation perm(n, key);
      std::vector<uint64_t> xs;
      for (uint64_t i = 0; i < std::min<uint64_t>(n, 300); ++i) xs.push_back(n <= 300 ? i : (i * 2654435761u) % n);
      std::vector<uint64_t> bulk = xs;
      perm.apply(bulk.data(), bulk.size());
      for (size_t i = 0; i < xs.size(); ++i)
        ASSERT_EQ(bulk[i], perm(xs[i])) << "n=" << n << " key=" << key << " x=" << xs[i];
    }
  }
}

TEST(Permutation, RejectsEmptyAndHugeDomains) {
  EXPECT_EQ(error_code_of([] { Permutation(0, 1); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { Permutation(kMaxOrderUnits + 1, 1); }), ErrorCode::kInvalidArgument);
}

// Over many keys every permutation of a tiny set appears about equally often.
TEST(Permutation, TinyDomainsDrawEveryPermutationUniformly) {
  struct Case {
    uint64_t n;
    size_t perms;
    double max_chi;  // chi-square bound far in the tail (p << 1e-4)
  };
  for (const Case c : {Case{2, 2, 20.0}, Case{3, 6, 30.0}, Case{4, 24, 65.0},
                       Case{5, 120, 200.0}, Case{6, 720, 900.0}}) {
    std::map<std::vector<uint64_t>, uint64_t> counts;
    const uint64_t draws = (c.n <= 5 ? 1000 : 200) * c.perms;
    for (uint64_t key = 0; key < draws; ++key) {
      const Permutation perm(c.n, key);
      std::vector<uint64_t> v(c.n);
      for (uint64_t i = 0; i < c.n; ++i) v[i] = perm(i);
      ++counts[v];
    }
    ASSERT_EQ(counts.size(), c.perms) << "n=" << c.n;
    std::vector<uint64_t> hist;
    for (auto& [v, k] : counts) hist.push_back(k);
    EXPECT_LT(chi_square_uniform(hist), c.max_chi) << "n=" << c.n;
  }
}

// ---------------------------------------------------------------------------------
// Shuffle quality of kShuffled

TEST(EpochOrderShuffled, PositionOfElementZeroIsUniformOverEpochs) {
  const uint64_t n = 20;
  const uint64_t epochs = 20000;
  OrderOptions opt;
  opt.seed = 1234;
  std::vector<uint64_t> hist(n, 0);
  for (uint64_t e = 0; e < epochs; ++e) {
    const EpochOrder order(opt, n, e);
    for (uint64_t p = 0; p < n; ++p) {
      if (order.at(p) == 0) ++hist[p];
    }
  }
  uint64_t sum = 0;
  for (uint64_t h : hist) sum += h;
  ASSERT_EQ(sum, epochs);  // exactly once per epoch
  // 19 degrees of freedom: P(chi2 > 50) ~ 1e-4.
  EXPECT_LT(chi_square_uniform(hist), 50.0);
}

TEST(EpochOrderShuffled, NeighboursAreUncorrelated) {
  const uint64_t n = 200000;
  OrderOptions opt;
  opt.seed = 5;
  const EpochOrder order(opt, n, 0);
  const std::vector<uint64_t> s = sequence(order);
  uint64_t successors = 0, fixed = 0;
  double mean_i = (n - 1) / 2.0, cov = 0, var = 0, sum_gap = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (i + 1 < n && s[i + 1] == s[i] + 1) ++successors;
    if (s[i] == i) ++fixed;
    cov += (i - mean_i) * (s[i] - mean_i);
    var += (i - mean_i) * (i - mean_i);
    if (i + 1 < n) sum_gap += std::fabs(double(s[i + 1]) - double(s[i]));
  }
  // Expected ~1 each for a uniform permutation.
  EXPECT_LE(successors, 8u);
  EXPECT_LE(fixed, 8u);
  EXPECT_LT(std::fabs(cov / var), 0.01);  // rank correlation with position
  // Mean |S[i+1] - S[i]| of a uniform permutation is ~n/3.
  EXPECT_NEAR(sum_gap / (n - 1) / n, 1.0 / 3.0, 0.01);
}

// ---------------------------------------------------------------------------------
// EpochOrder: the kinds, table-driven

struct KindCase {
  const char* name;
  OrderKind kind;
  std::vector<uint64_t> groups;
  uint64_t chunk_size;
  uint64_t window_chunks;
};

std::vector<KindCase> kind_cases() {
  std::vector<uint64_t> rows;  // token data: rows per record, some empty
  for (int r = 0; r < 61; ++r) rows.push_back(r % 7 == 3 ? 0 : 1 + (r * 13) % 9);
  return {
      {"sequential", OrderKind::kSequential, {1000}, 0, 0},
      {"shuffled", OrderKind::kShuffled, {1013}, 0, 0},
      {"shuffled_one", OrderKind::kShuffled, {1}, 0, 0},
      {"chunk_local", OrderKind::kChunkLocal, {100, 37, 0, 250, 1, 64}, 16, 3},
      {"chunk_local_c1_w1", OrderKind::kChunkLocal, {5, 9, 3}, 1, 1},
      {"chunk_local_one_window", OrderKind::kChunkLocal, {40, 41}, 8, 100},
      {"token_window", OrderKind::kTokenWindow, rows, 0, 4},
      {"token_window_w1", OrderKind::kTokenWindow, {3, 3, 3, 3, 0, 3}, 0, 1},
  };
}

OrderOptions options_of(const KindCase& c, uint64_t seed) {
  OrderOptions o;
  o.kind = c.kind;
  o.seed = seed;
  if (c.chunk_size) o.chunk_size = c.chunk_size;
  if (c.window_chunks) o.window_chunks = c.window_chunks;
  return o;
}

uint64_t sum_of(const std::vector<uint64_t>& v) {
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}

TEST(EpochOrder, EveryUnitExactlyOncePerEpochForEveryKind) {
  for (const KindCase& c : kind_cases()) {
    for (uint64_t epoch : {0, 1, 7}) {
      const EpochOrder order(options_of(c, 42), c.groups, epoch);
      ASSERT_EQ(order.size(), sum_of(c.groups)) << c.name;
      expect_permutation_of_range(sequence(order), order.size(),
                                  std::string(c.name) + " epoch " + std::to_string(epoch));
    }
  }
}

TEST(EpochOrder, StridedLookupMatchesAtForEveryKind) {
  for (const KindCase& c : kind_cases()) {
    const EpochOrder order(options_of(c, 42), c.groups, 2);
    const auto s = sequence(order);
    for (uint64_t stride : {1ull, 2ull, 3ull, 7ull}) {
      for (uint64_t first = 0; first < std::min<uint64_t>(order.size(), 9); ++first) {
        const uint64_t n = (order.size() - first + stride - 1) / stride;  // to the epoch's end
        std::vector<uint64_t> out(n);
        order.at_strided(first, stride, n, out.data());
        for (uint64_t i = 0; i < n; ++i)
          ASSERT_EQ(out[i], s[first + i * stride]) << c.name << " first " << first << " stride " << stride << " i " << i;
      }
    }
    uint64_t one = 0;
    EXPECT_EQ(error_code_of([&] { order.at_strided(order.size() - 1, 1, 2, &one); }), ErrorCode::kInvalidArgument) << c.name;
  }
}

TEST(EpochOrder, StridedLookupNamesEachSamplesPlaceInItsWindowsChunks) {
  for (const KindCase& c : kind_cases()) {
    const EpochOrder order(options_of(c, 42), c.groups, 2);
    if (!order.windowed()) {
      uint64_t unit = 0;
      uint32_t place = 0;
      EXPECT_EQ(error_code_of([&] { order.at_strided(0, 1, 1, &unit, &place); }), ErrorCode::kInvalidArgument) << c.name;
      continue;
    }
    const auto s = sequence(order);
    for (uint64_t stride : {1ull, 3ull}) {
      for (uint64_t first = 0; first < std::min<uint64_t>(order.size(), 5); ++first) {
        const uint64_t n = (order.size() - first + stride - 1) / stride;  // across every window
        std::vector<uint64_t> out(n);
        std::vector<uint32_t> place(n, UINT32_MAX);
        order.at_strided(first, stride, n, out.data(), place.data());
        for (uint64_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[i], s[first + i * stride]) << c.name << " first " << first << " i " << i;
          const auto chunks = order.window_chunks(order.window_of(first + i * stride));
          ASSERT_LT(place[i], chunks.size()) << c.name << " first " << first << " i " << i;
          EXPECT_EQ(chunks[place[i]], order.chunk_of(out[i])) << c.name << " first " << first << " i " << i;
        }
      }
    }
  }
}

TEST(EpochOrder, SameSeedAndEpochGiveTheSameOrderOthersDiffer) {
  for (const KindCase& c : kind_cases()) {
    const auto a = sequence(EpochOrder(options_of(c, 42), c.groups, 3));
    const auto b = sequence(EpochOrder(options_of(c, 42), c.groups, 3));
    const auto other_epoch = sequence(EpochOrder(options_of(c, 42), c.groups, 4));
    const auto other_seed = sequence(EpochOrder(options_of(c, 43), c.groups, 3));
    EXPECT_EQ(a, b) << c.name;
    if (c.kind == OrderKind::kSequential || a.size() < 2) {
      EXPECT_EQ(a, other_epoch) << c.name;
      continue;
    }
    EXPECT_NE(a, other_epoch) << c.name;
    EXPECT_NE(a, other_seed) << c.name;
  }
}

// The order is a pure function: threads looking up positions at the same time, in
// different orders, see the same sequence as a single thread.
TEST(EpochOrder, ConcurrentLookupsAgreeWithOneThread) {
  for (const KindCase& c : kind_cases()) {
    const EpochOrder order(options_of(c, 8), c.groups, 1);
    const auto want = sequence(order);
    std::vector<std::vector<uint64_t>> got(4, std::vector<uint64_t>(order.size()));
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t) {
      threads.emplace_back([&, t] {
        const uint64_t n = order.size();
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t p = (t % 2 == 0) ? i : n - 1 - i;
          got[t][p] = order.at(p);
        }
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& g : got) EXPECT_EQ(g, want) << c.name;
  }
}

TEST(EpochOrder, SequentialIsTheIdentity) {
  OrderOptions opt;
  opt.kind = OrderKind::kSequential;
  const EpochOrder order(opt, 777, 5);
  for (uint64_t p = 0; p < 777; ++p) ASSERT_EQ(order.at(p), p);
}

TEST(EpochOrder, WindowedKindsKeepEveryChunkInsideOneWindow) {
  for (const KindCase& c : kind_cases()) {
    if (c.kind != OrderKind::kChunkLocal && c.kind != OrderKind::kTokenWindow) continue;
    const EpochOrder order(options_of(c, 9), c.groups, 2);
    ASSERT_TRUE(order.windowed());
    const UnitLayout& layout = order.layout();

    // Chunks tile each group in order, never straddle a group, hold <= chunk_size.
    uint64_t next_unit = 0;
    for (uint64_t ch = 0; ch < order.chunk_count(); ++ch) {
      const auto [b, e] = order.chunk_units(ch);
      ASSERT_LT(b, e) << c.name;
      const size_t g = order.chunk_group(ch);
      ASSERT_GE(b, layout.group_begin(g)) << c.name;
      ASSERT_LE(e, layout.group_begin(g) + layout.group_size(g)) << c.name;
      if (c.kind == OrderKind::kChunkLocal) {
        ASSERT_LE(e - b, c.chunk_size) << c.name;
        // Only a group's last chunk may be short.
        if (e - b < c.chunk_size) {
          ASSERT_EQ(e, layout.group_begin(g) + layout.group_size(g)) << c.name;
        }
      } else {
        ASSERT_EQ(b, layout.group_begin(g)) << c.name;  // a chunk is a whole record
        ASSERT_EQ(e - b, layout.group_size(g)) << c.name;
      }
      ASSERT_EQ(b, next_unit) << c.name;
      next_unit = e;
      for (uint64_t u = b; u < e; ++u) ASSERT_EQ(order.chunk_of(u), ch) << c.name;
    }
    ASSERT_EQ(next_unit, order.size()) << c.name;

    // Windows tile the positions; the units of window w come exactly from its chunks,
    // and every chunk belongs to exactly one window (decompress-once).
    std::map<uint64_t, uint64_t> window_of_chunk;
    uint64_t next_pos = 0;
    for (uint64_t w = 0; w < order.window_count(); ++w) {
      const auto [pb, pe] = order.window_positions(w);
      ASSERT_EQ(pb, next_pos) << c.name;
      next_pos = pe;
      const auto chunks = order.window_chunks(w);
      ASSERT_LE(chunks.size(), c.window_chunks) << c.name;
      uint64_t units = 0;
      std::set<uint64_t> in_window;
      for (uint64_t ch : chunks) {
        ASSERT_TRUE(window_of_chunk.emplace(ch, w).second) << c.name << ": chunk in 2 windows";
        in_window.insert(ch);
        units += order.chunk_units(ch).second - order.chunk_units(ch).first;
      }
      ASSERT_EQ(units, pe - pb) << c.name;
      for (uint64_t p = pb; p < pe; ++p) {
        ASSERT_EQ(order.window_of(p), w) << c.name;
        ASSERT_TRUE(in_window.count(order.chunk_of(order.at(p)))) << c.name << " p=" << p;
      }
    }
    ASSERT_EQ(next_pos, order.size()) << c.name;
    ASSERT_EQ(window_of_chunk.size(), order.chunk_count()) << c.name;
  }
}

TEST(EpochOrder, ChunkLocalShufflesChunksAndRecordsWithinWindows) {
  // 8 shards of 1000 records, chunks of 50, windows of 4 chunks (200 records).
  const OrderOptions opt = chunk_local(11, 50, 4);
  const EpochOrder order(opt, std::vector<uint64_t>(8, 1000), 0);
  ASSERT_EQ(order.chunk_count(), 160u);
  ASSERT_EQ(order.window_count(), 40u);
  const auto s = sequence(order);
  // Records are mixed within the window: hardly any run of consecutive records.
  uint64_t successors = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) successors += s[i + 1] == s[i] + 1;
  // A uniform shuffle of a 200-record window has ~1 such pair: ~40 in 40 windows
  // (unshuffled: 7960).
  EXPECT_LT(successors, 80u);
  // Chunk order is shuffled: the first window is not the first four chunks.
  const auto first = order.window_chunks(0);
  EXPECT_NE(first, (std::vector<uint64_t>{0, 1, 2, 3}));
  // Each window holds records of ~4 distinct chunks across its positions.
  const auto [pb, pe] = order.window_positions(5);
  std::set<uint64_t> chunks;
  for (uint64_t p = pb; p < pb + 20; ++p) chunks.insert(order.chunk_of(order.at(p)));
  EXPECT_GE(chunks.size(), 3u);
}

TEST(EpochOrder, TokenWindowRowsMapBackToRecordAndRow) {
  const std::vector<uint64_t> rows = {4, 0, 2, 5, 1};
  const auto layout = std::make_shared<const UnitLayout>(rows);
  OrderOptions opt;
  opt.kind = OrderKind::kTokenWindow;
  opt.window_chunks = 2;
  const EpochOrder order(opt, layout, 0);
  EXPECT_EQ(order.chunk_count(), 4u);  // the empty record is no chunk
  EXPECT_EQ(order.window_count(), 2u);
  std::map<size_t, std::set<uint64_t>> rows_seen;
  for (uint64_t p = 0; p < order.size(); ++p) {
    const auto [record, row] = layout->locate(order.at(p));
    ASSERT_LT(row, rows[record]);
    ASSERT_TRUE(rows_seen[record].insert(row).second);
    ASSERT_EQ(order.chunk_group(order.chunk_of(order.at(p))), record);
  }
  EXPECT_EQ(rows_seen.size(), 4u);
  for (auto& [record, seen] : rows_seen) EXPECT_EQ(seen.size(), rows[record]);
}

TEST(EpochOrder, BadArgumentsAreInvalidArgument) {
  OrderOptions chunked;
  chunked.kind = OrderKind::kChunkLocal;
  chunked.chunk_size = 0;
  EXPECT_EQ(error_code_of([&] { EpochOrder(chunked, 10, 0); }), ErrorCode::kInvalidArgument);
  OrderOptions windowed;
  windowed.kind = OrderKind::kTokenWindow;
  windowed.window_chunks = 0;
  EXPECT_EQ(error_code_of([&] { EpochOrder(windowed, 10, 0); }), ErrorCode::kInvalidArgument);
  const EpochOrder shuffled(OrderOptions{}, 10, 0);
  EXPECT_EQ(error_code_of([&] { shuffled.at(10); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { shuffled.window_chunks(0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { shuffled.chunk_of(0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(shuffled.window_count(), 1u);
  const EpochOrder empty(OrderOptions{}, 0, 0);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.window_count(), 0u);
  EXPECT_EQ(error_code_of([&] { empty.at(0); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { order_kind_from_name("random"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(order_kind_from_name("chunk_local"), OrderKind::kChunkLocal);
}

TEST(UnitLayout, LocateSkipsEmptyGroups) {
  const UnitLayout layout({3, 0, 0, 2, 0, 1});
  struct Case {
    uint64_t unit;
    size_t group;
    uint64_t in_group;
  };
  for (const Case c : {Case{0, 0, 0}, Case{2, 0, 2}, Case{3, 3, 0}, Case{4, 3, 1},
                       Case{5, 5, 0}}) {
    EXPECT_EQ(layout.locate(c.unit), std::make_pair(c.group, c.in_group)) << c.unit;
  }
  EXPECT_EQ(layout.units(), 6u);
  EXPECT_EQ(layout.groups(), 6u);
  EXPECT_EQ(error_code_of([&] { layout.locate(6); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { UnitLayout({kMaxOrderUnits, 1}); }), ErrorCode::kInvalidArgument);
}

// Packed tokens take the division path (equal records, a shorter last one); layouts
// that are almost like that must still be searched. Both must agree with a plain walk.
TEST(UnitLayout, LocateAgreesWithAWalkOverTheGroups) {
  const std::vector<std::vector<uint64_t>> layouts = {
      {127, 127, 127, 127},  // uniform
      {127, 127, 127, 5},    // shorter last record
      {127, 127, 127, 1},
      {7},
      {127, 127, 128},       // a larger last record: not uniform
      {127, 0, 127, 127},    // an empty record in between
      {127, 127, 127, 0},    // an empty last record
      {0, 127, 127},
      {127, 126, 127},
  };
  for (const auto& sizes : layouts) {
    const UnitLayout layout(sizes);
    uint64_t unit = 0;
    for (size_t g = 0; g < sizes.size(); ++g)
      for (uint64_t r = 0; r < sizes[g]; ++r, ++unit)
        ASSERT_EQ(layout.locate(unit), std::make_pair(g, r)) << "unit " << unit << " of layout " << sizes.size();
    EXPECT_EQ(layout.units(), unit);
    EXPECT_EQ(error_code_of([&] { layout.locate(unit); }), ErrorCode::kInvalidArgument);
  }
}

// ---------------------------------------------------------------------------------
// RankSchedule

// Samples of a whole world, in (step, j, rank) order: the world's view of S, without
// the final step's padding (the last padding() entries in that order).
std::vector<uint64_t> world_positions(uint64_t n, uint64_t b, uint32_t w, bool drop_last,
                                      uint64_t consumed) {
  std::vector<RankSchedule> ranks;
  for (uint32_t r = 0; r < w; ++r) ranks.emplace_back(n, b, w, r, drop_last, consumed);
  std::vector<uint64_t> out;
  for (uint64_t k = 0; k < ranks[0].steps(); ++k) {
    std::vector<std::vector<uint64_t>> batch(w);
    for (uint32_t r = 0; r < w; ++r) {
      if (k < ranks[r].num_batches()) batch[r] = ranks[r].positions(k);
    }
    for (uint64_t j = 0; j < b; ++j) {
      for (uint32_t r = 0; r < w; ++r) {
        if (j < batch[r].size()) out.push_back(batch[r][j]);
      }
    }
  }
  out.resize(out.size() - ranks[0].padding());
  return out;
}

TEST(RankSchedule, RanksAreDisjointAndCoverTheEpoch) {
  for (uint64_t n : {0, 1, 2, 7, 20, 100, 101, 1001}) {
    for (uint64_t b : {1, 3, 8}) {
      for (uint32_t w = 1; w <= 5; ++w) {
        for (bool drop_last : {false, true}) {
          const std::string what = "n=" + std::to_string(n) + " b=" + std::to_string(b) +
                                   " w=" + std::to_string(w) + " drop_last=" +
                                   std::to_string(drop_last);
          const uint64_t full = n / (w * b);
          const uint64_t rest = n % (w * b);
          std::vector<int> hits(n, 0);
          std::set<uint64_t> batch_counts;
          std::set<uint64_t> last_lengths;
          for (uint32_t r = 0; r < w; ++r) {
            const RankSchedule s(n, b, w, r, drop_last);
            batch_counts.insert(s.num_batches());
            if (s.num_batches()) last_lengths.insert(s.batch_length(s.num_batches() - 1));
            for (uint64_t k = 0; k < s.num_batches(); ++k) {
              const auto pos = s.positions(k);
              ASSERT_EQ(pos.size(), s.batch_length(k)) << what;
              ASSERT_FALSE(pos.empty()) << what;
              if (drop_last || k < full) {
                ASSERT_EQ(pos.size(), b) << what;
              }
              for (uint64_t j = 0; j < pos.size(); ++j) {
                const uint64_t raw = k * w * b + r + j * w;  // interleaved
                ASSERT_EQ(pos[j], raw < n ? raw : (raw - n) % n) << what;  // padding wraps
                ASSERT_LT(pos[j], n) << what;
                ++hits[pos[j]];
              }
            }
            EXPECT_EQ(error_code_of([&] { s.batch_length(s.num_batches()); }),
                      ErrorCode::kInvalidArgument);
          }
          // Every rank the same number of batches, the last of the same length (DDP).
          ASSERT_EQ(batch_counts.size(), 1u) << what;
          ASSERT_LE(last_lengths.size(), 1u) << what;
          const uint64_t covered = drop_last ? full * w * b : n;
          std::vector<int> want(n, 0);
          for (uint64_t p = 0; p < covered; ++p) want[p] = 1;
          if (drop_last || rest == 0) {
            ASSERT_EQ(*batch_counts.begin(), full) << what;
          } else {
            ASSERT_EQ(*batch_counts.begin(), full + 1) << what;
            ASSERT_EQ(*last_lengths.begin(), (rest + w - 1) / w) << what;
            // The padding repeats the epoch's first positions, wrapping.
            const uint64_t pad = (rest + w - 1) / w * w - rest;
            ASSERT_LT(pad, w) << what;
            for (uint64_t i = 0; i < pad; ++i) ++want[i % n];
          }
          for (uint64_t p = 0; p < n; ++p) ASSERT_EQ(hits[p], want[p]) << what << " p=" << p;
        }
      }
    }
  }
}

TEST(RankSchedule, UnevenTailIsPaddedForEveryRank) {
  // 120 samples, 7 ranks, batch 17: one step of 119 and one sample left. Without padding
  // rank 0 got two batches and the others one, and DDP hung in the second step.
  for (uint32_t r = 0; r < 7; ++r) {
    const RankSchedule s(120, 17, 7, r, /*drop_last=*/false);
    ASSERT_EQ(s.num_batches(), 2u) << "rank " << r;
    ASSERT_EQ(s.batch_length(1), 1u) << "rank " << r;
    // Rank 0 gets the real sample 119; ranks 1..6 repeat positions 0..5.
    EXPECT_EQ(s.positions(1), std::vector<uint64_t>{r == 0 ? 119u : r - 1u}) << "rank " << r;
    EXPECT_EQ(s.padding(), 6u);
    EXPECT_EQ(s.consumed_after(2), 120u);
  }
  // drop_last: the step of one sample is dropped for every rank, as before.
  for (uint32_t r = 0; r < 7; ++r) EXPECT_EQ(RankSchedule(120, 17, 7, r, true).num_batches(), 1u);
}

TEST(RankSchedule, TrimTailCutsToAMultipleOfTheWorldSize) {
  // 130 samples, 7 ranks, batch 17: 11 left after one step: one each, 4 left out.
  for (uint32_t r = 0; r < 7; ++r) {
    const RankSchedule s(130, 17, 7, r, false, 0, TailPolicy::kTrim);
    ASSERT_EQ(s.num_batches(), 2u);
    EXPECT_EQ(s.positions(1), std::vector<uint64_t>{119u + r});
    EXPECT_EQ(s.end(), 126u);
    EXPECT_EQ(s.padding(), 0u);
  }
  // Fewer left than ranks: the step goes, the full ones keep their length; one rank
  // keeps every sample.
  const RankSchedule few(120, 17, 7, 0, false, 0, TailPolicy::kTrim);
  EXPECT_EQ(few.num_batches(), 1u);
  EXPECT_EQ(few.batch_length(0), 17u);
  EXPECT_EQ(few.end(), 119u);
  const RankSchedule one(120, 17, 1, 0, false, 0, TailPolicy::kTrim);
  EXPECT_EQ(one.num_batches(), 8u);
  EXPECT_EQ(one.batch_length(7), 1u);
}

TEST(RankSchedule, GlobalSequenceDoesNotDependOnWorldSize) {
  OrderOptions opt;
  opt.seed = 77;
  const uint64_t n = 1003, b = 5;
  const EpochOrder order(opt, n, 2);
  const auto s = sequence(order);
  for (uint32_t w = 1; w <= 4; ++w) {
    const auto pos = world_positions(n, b, w, /*drop_last=*/false, 0);
    ASSERT_EQ(pos.size(), n) << "w=" << w;
    std::vector<uint64_t> samples;
    for (uint64_t p : pos) samples.push_back(order.at(p));
    EXPECT_EQ(samples, s) << "w=" << w;
    // With drop_last, the world sees a prefix of S.
    const auto dropped = world_positions(n, b, w, /*drop_last=*/true, 0);
    ASSERT_EQ(dropped.size(), n / (w * b) * w * b);
    for (uint64_t i = 0; i < dropped.size(); ++i) ASSERT_EQ(dropped[i], i);
  }
}

TEST(RankSchedule, StartsAtAnyConsumedCount) {
  for (uint64_t consumed : {0, 1, 13, 99, 100}) {
    for (uint32_t w : {1, 2, 3}) {
      const auto pos = world_positions(100, 4, w, false, consumed);
      ASSERT_EQ(pos.size(), 100 - consumed);
      for (uint64_t i = 0; i < pos.size(); ++i) ASSERT_EQ(pos[i], consumed + i);
      const RankSchedule s(100, 4, w, 0, false, consumed);
      EXPECT_EQ(s.consumed_after(0), consumed);
      EXPECT_EQ(s.consumed_after(s.steps()), 100u);
      if (s.steps() > 1) {
        EXPECT_EQ(s.consumed_after(1), consumed + 4 * w);
      }
    }
  }
}

TEST(RankSchedule, BadArgumentsAreInvalidArgument) {
  EXPECT_EQ(error_code_of([] { RankSchedule(10, 0, 1, 0, false); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { RankSchedule(10, 2, 0, 0, false); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { RankSchedule(10, 2, 2, 2, false); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { RankSchedule(10, 2, 2, 0, false, 11); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([] { RankSchedule(10, uint64_t{1} << 40, 1u << 30, 0, false); }),
            ErrorCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------
// Resume

struct ResumeCase {
  OrderKind kind;
  uint32_t world_before;
  uint32_t world_after;
  uint64_t steps_before;
  bool drop_last;
};

TEST(Resume, ContinuesTheUninterruptedSequenceAtAnyWorldSize) {
  std::vector<uint64_t> rows;
  for (int r = 0; r < 150; ++r) rows.push_back(1 + r % 11);
  const std::vector<ResumeCase> cases = {
      {OrderKind::kShuffled, 3, 2, 4, false},     {OrderKind::kShuffled, 3, 3, 4, false},
      {OrderKind::kShuffled, 3, 2, 5, true},      {OrderKind::kShuffled, 2, 5, 7, false},
      {OrderKind::kShuffled, 4, 1, 0, false},     {OrderKind::kChunkLocal, 3, 2, 6, false},
      {OrderKind::kTokenWindow, 3, 2, 9, false},  {OrderKind::kTokenWindow, 1, 4, 3, true},
      {OrderKind::kSequential, 3, 2, 2, false},
  };
  const uint64_t b = 7;
  for (const ResumeCase& c : cases) {
    OrderOptions opt;
    opt.kind = c.kind;
    opt.seed = 2024;
    opt.chunk_size = 10;
    opt.window_chunks = 3;
    const std::vector<uint64_t> groups =
        c.kind == OrderKind::kTokenWindow ? rows : std::vector<uint64_t>{300, 95, 406};
    const EpochOrder order(opt, groups, 5);
    const uint64_t n = order.size();
    const auto s = sequence(order);
    const std::string what = std::string(order_kind_name(c.kind)) + " " +
                             std::to_string(c.world_before) + "->" +
                             std::to_string(c.world_after);

    // Before: the world trains steps_before steps, then saves the state.
    std::vector<uint64_t> consumed_samples;
    for (uint64_t p : world_positions(n, b, c.world_before, c.drop_last, 0)) {
      if (p >= c.steps_before * c.world_before * b) break;
      consumed_samples.push_back(order.at(p));
    }
    const RankSchedule before(n, b, c.world_before, 0, c.drop_last);
    OrderState state = OrderState::start(opt, n, 5);
    state.consumed = before.consumed_after(c.steps_before);
    ASSERT_EQ(state.consumed, consumed_samples.size()) << what;
    const OrderState restored = OrderState::parse(state.serialize());
    ASSERT_EQ(restored, state) << what;
    restored.check_matches(opt, n);

    // After: a new world rebuilds the order from the state and continues.
    const EpochOrder resumed_order(restored.options(), groups, restored.epoch);
    std::vector<uint64_t> all = consumed_samples;
    for (uint64_t p : world_positions(n, b, c.world_after, c.drop_last, restored.consumed)) {
      all.push_back(resumed_order.at(p));
    }
    if (!c.drop_last) {
      EXPECT_EQ(all, s) << what;
    } else {
      // The resumed world drops only its own final incomplete step.
      const uint64_t left = n - restored.consumed;
      const uint64_t kept = restored.consumed + left / (c.world_after * b) * c.world_after * b;
      ASSERT_EQ(all.size(), kept) << what;
      EXPECT_TRUE(std::equal(all.begin(), all.end(), s.begin())) << what;
    }
  }
}

// ---------------------------------------------------------------------------------
// OrderState

std::string with_crc(const std::string& body) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", crc32c(body.data(), body.size()));
  return body + " crc=" + crc;
}

TEST(OrderState, SerializesToAStableLine) {
  const OrderOptions opt = chunk_local(42, 64, 16);
  OrderState s = OrderState::start(opt, 1281167, 3);
  s.consumed = 1536;
  EXPECT_EQ(s.serialize(), with_crc("stoker-order v1 kind=chunk_local seed=42 epoch=3 "
                                    "consumed=1536 total=1281167 chunk=64 window=16"));
  OrderOptions shuffled;  // chunk params of non-windowed kinds are normalised to 0
  shuffled.seed = 1;
  EXPECT_EQ(OrderState::start(shuffled, 10).serialize(),
            with_crc("stoker-order v1 kind=shuffled seed=1 epoch=0 consumed=0 total=10 "
                     "chunk=0 window=0"));
}

TEST(OrderState, RoundTrips) {
  std::vector<OrderState> states;
  for (OrderKind kind : {OrderKind::kSequential, OrderKind::kShuffled, OrderKind::kChunkLocal,
                         OrderKind::kTokenWindow}) {
    OrderOptions opt;
    opt.kind = kind;
    opt.seed = UINT64_MAX;
    opt.chunk_size = 3;
    opt.window_chunks = 1;
    OrderState s = OrderState::start(opt, kMaxOrderUnits, UINT64_MAX);
    s.consumed = kMaxOrderUnits - 1;
    states.push_back(s);
    states.push_back(OrderState::start(opt, 0));
  }
  for (const OrderState& s : states) {
    const std::string text = s.serialize();
    EXPECT_EQ(OrderState::parse(text), s) << text;
    EXPECT_EQ(OrderState::parse(text + "\n"), s) << text;
    EXPECT_EQ(s.next_epoch().epoch, s.epoch + 1);
    EXPECT_EQ(s.next_epoch().consumed, 0u);
  }
}

TEST(OrderState, RejectsGarbage) {
  const std::string good =
      with_crc("stoker-order v1 kind=shuffled seed=7 epoch=2 consumed=10 total=100 chunk=0 window=0");
  ASSERT_NO_THROW(OrderState::parse(good));
  std::string flipped = good;
  flipped[good.find("consumed=10") + 9] = '2';  // consumed=20, stale CRC
  std::string bad_crc = good;
  bad_crc.back() = bad_crc.back() == '0' ? '1' : '0';
  std::string upper = good;
  for (size_t i = good.find("crc=") + 4; i < upper.size(); ++i) upper[i] = std::toupper(upper[i]);
  struct Case {
    const char* name;
    std::string text;
    ErrorCode code;
  };
  const std::vector<Case> cases = {
      {"empty", "", ErrorCode::kDataLoss},
      {"junk", "hello world", ErrorCode::kDataLoss},
      {"binary", std::string("\0\xff\x01", 3), ErrorCode::kDataLoss},
      {"truncated", good.substr(0, good.size() - 3), ErrorCode::kDataLoss},
      {"no crc", good.substr(0, good.find(" crc=")), ErrorCode::kDataLoss},
      {"flipped digit", flipped, ErrorCode::kDataLoss},
      {"bad crc", bad_crc, ErrorCode::kDataLoss},
      {"upper-case crc", upper, ErrorCode::kDataLoss},
      {"two newlines", good + "\n\n", ErrorCode::kDataLoss},
      {"trailing space", good + " ", ErrorCode::kDataLoss},
      {"no version", with_crc("stoker-order kind=shuffled seed=7 epoch=2 consumed=10 total=100 "
                              "chunk=0 window=0"), ErrorCode::kDataLoss},
      {"future version", with_crc("stoker-order v2 kind=shuffled seed=7"),
       ErrorCode::kInvalidArgument},
      {"extra field", with_crc("stoker-order v1 kind=shuffled seed=7 epoch=2 consumed=10 "
                               "total=100 chunk=0 window=0 extra=1"), ErrorCode::kDataLoss},
      {"fields swapped", with_crc("stoker-order v1 kind=shuffled epoch=2 seed=7 consumed=10 "
                                  "total=100 chunk=0 window=0"), ErrorCode::kDataLoss},
      {"unknown kind", with_crc("stoker-order v1 kind=random seed=7 epoch=2 consumed=10 "
                                "total=100 chunk=0 window=0"), ErrorCode::kDataLoss},
      {"leading zero", with_crc("stoker-order v1 kind=shuffled seed=07 epoch=2 consumed=10 "
                                "total=100 chunk=0 window=0"), ErrorCode::kDataLoss},
      {"negative", with_crc("stoker-order v1 kind=shuffled seed=-7 epoch=2 consumed=10 "
                            "total=100 chunk=0 window=0"), ErrorCode::kDataLoss},
      {"seed overflow", with_crc("stoker-order v1 kind=shuffled seed=18446744073709551616 "
                                 "epoch=2 consumed=10 total=100 chunk=0 window=0"),
       ErrorCode::kDataLoss},
      {"consumed > total", with_crc("stoker-order v1 kind=shuffled seed=7 epoch=2 "
                                    "consumed=101 total=100 chunk=0 window=0"),
       ErrorCode::kDataLoss},
      {"total > 2^62", with_crc("stoker-order v1 kind=shuffled seed=7 epoch=2 consumed=0 "
                                "total=9223372036854775807 chunk=0 window=0"),
       ErrorCode::kDataLoss},
      {"chunk on shuffled", with_crc("stoker-order v1 kind=shuffled seed=7 epoch=2 "
                                     "consumed=10 total=100 chunk=4 window=0"),
       ErrorCode::kDataLoss},
      {"chunk_local no chunk", with_crc("stoker-order v1 kind=chunk_local seed=7 epoch=2 "
                                        "consumed=10 total=100 chunk=0 window=4"),
       ErrorCode::kDataLoss},
      {"token no window", with_crc("stoker-order v1 kind=token_window seed=7 epoch=2 "
                                   "consumed=10 total=100 chunk=0 window=0"),
       ErrorCode::kDataLoss},
      {"huge", std::string(4096, 'x'), ErrorCode::kDataLoss},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(error_code_of([&] { OrderState::parse(c.text); }), c.code) << c.name;
  }
}

TEST(OrderState, MismatchedOptionsAreInvalidArgument) {
  const OrderOptions opt = chunk_local(3, 32, 8);
  const OrderState s = OrderState::start(opt, 1000, 4);
  s.check_matches(opt, 1000);
  OrderOptions o = opt;
  o.seed = 4;
  EXPECT_EQ(error_code_of([&] { s.check_matches(o, 1000); }), ErrorCode::kInvalidArgument);
  o = opt;
  o.kind = OrderKind::kShuffled;
  EXPECT_EQ(error_code_of([&] { s.check_matches(o, 1000); }), ErrorCode::kInvalidArgument);
  o = opt;
  o.chunk_size = 16;
  EXPECT_EQ(error_code_of([&] { s.check_matches(o, 1000); }), ErrorCode::kInvalidArgument);
  o = opt;
  o.window_chunks = 9;
  EXPECT_EQ(error_code_of([&] { s.check_matches(o, 1000); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { s.check_matches(opt, 1001); }), ErrorCode::kInvalidArgument);
  // Options the kind ignores do not matter.
  OrderOptions shuffled;
  shuffled.seed = 3;
  const OrderState t = OrderState::start(shuffled, 50);
  shuffled.chunk_size = 999;
  t.check_matches(shuffled, 50);
}

// ---------------------------------------------------------------------------------
// sample_seed and rank_from_env

TEST(SampleSeed, IsDeterministicAndDistinctPerSample) {
  EXPECT_EQ(sample_seed(1, 2, 3), sample_seed(1, 2, 3));
  std::set<uint64_t> seen;
  uint64_t ones = 0, count = 0;
  for (uint64_t seed : {0, 1}) {
    for (uint64_t epoch = 0; epoch < 10; ++epoch) {
      for (uint64_t i = 0; i < 5000; ++i) {
        const uint64_t x = sample_seed(seed, epoch, i);
        ASSERT_TRUE(seen.insert(x).second);
        ones += static_cast<uint64_t>(__builtin_popcountll(x));
        ++count;
      }
    }
  }
  // Bits are balanced: mean popcount 32 +- a small margin (sd of the mean ~0.03).
  EXPECT_NEAR(double(ones) / double(count), 32.0, 0.2);
  // Swapping the arguments gives a different seed (no symmetric combination).
  EXPECT_NE(sample_seed(1, 2, 3), sample_seed(3, 2, 1));
  EXPECT_NE(sample_seed(0, 0, 0), sample_seed(0, 1, 0));
}

class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name : {"RANK", "WORLD_SIZE"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~EnvGuard() {
    for (auto& [name, v] : saved_) {
      if (v) setenv(name, v->c_str(), 1);
      else unsetenv(name);
    }
  }
  static void set(const char* name, const char* value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST(RankFromEnv, ReadsAndValidatesRankAndWorldSize) {
  EnvGuard guard;
  struct Case {
    const char* rank;
    const char* world;
    std::optional<RankInfo> want;  // nullopt: kInvalidArgument
  };
  const std::vector<Case> cases = {
      {nullptr, nullptr, RankInfo{0, 1}}, {"0", "1", RankInfo{0, 1}},
      {"3", "4", RankInfo{3, 4}},         {"4", "4", std::nullopt},
      {"0", "0", std::nullopt},           {"1", nullptr, std::nullopt},
      {nullptr, "2", std::nullopt},       {"-1", "2", std::nullopt},
      {"1x", "2", std::nullopt},          {"", "2", std::nullopt},
      {"1", " 2", std::nullopt},          {"0", "99999999999", std::nullopt},
  };
  for (const Case& c : cases) {
    EnvGuard::set("RANK", c.rank);
    EnvGuard::set("WORLD_SIZE", c.world);
    const std::string what = std::string(c.rank ? c.rank : "(unset)") + "/" +
                             (c.world ? c.world : "(unset)");
    if (c.want) {
      const RankInfo got = rank_from_env();
      EXPECT_EQ(got.rank, c.want->rank) << what;
      EXPECT_EQ(got.world_size, c.want->world_size) << what;
    } else {
      EXPECT_EQ(error_code_of([] { rank_from_env(); }), ErrorCode::kInvalidArgument) << what;
    }
  }
}

}  // namespace
}  // namespace stoker
