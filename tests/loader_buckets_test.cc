// The Loader with aspect-ratio buckets (LoaderOptions::buckets): every batch one bucket
// and of its shape, each record in the bucket nearest its aspect, the order deterministic,
// the same for world sizes 1, 2 and 3 of one global batch, resumable, and nothing lost or
// repeated beyond each bucket's documented last group.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "stoker/buckets.h"
#include "stoker/dataset.h"
#include "stoker/image.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

// 130 images of three aspects, each a little varied: 2:1 landscapes, 1:2 portraits and
// squares, so three buckets get 44, 43 and 43 records.
std::pair<int, int> size_of(int i) {
  const int v = (i * 5) % 9;
  switch (i % 3) {
    case 0: return {64 + v, 32};
    case 1: return {32, 64 + v};
    default: return {48 + v, 48};
  }
}

class LoaderBuckets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    testing::ImageDatasetSpec spec;
    spec.count = 130;
    spec.size = size_of;
    testing::write_image_dataset(dir_->str("ds"), spec);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static LoaderOptions options(uint32_t world = 1, uint32_t rank = 0, uint64_t global = 12) {
    LoaderOptions o = testing::image_options(dir_->str("ds"));
    o.buckets.sizes = {{32, 64}, {48, 48}, {64, 32}};  // (h, w): landscape, square, portrait
    o.batch_size = global / world;
    o.world_size = static_cast<int>(world);
    o.rank = static_cast<int>(rank);
    return o;
  }
  static const std::vector<BucketSize>& sizes() {
    static const std::vector<BucketSize> s = resolve_buckets(options().buckets);
    return s;
  }
  struct Seen {
    std::vector<int64_t> index;   // delivery order
    std::vector<int64_t> bucket;  // per batch
    std::vector<std::vector<uint8_t>> pixels;  // per batch
  };
  // The rest of the epoch, checking every batch's shape against its bucket.
  static Seen drain(Loader& l) {
    Seen s;
    while (auto b = l.next()) {
      const TensorView& img = (*b)["image"];
      const TensorView& bk = (*b)["bucket"];
      const TensorView& idx = (*b)["index"];
      const auto* bp = static_cast<const int64_t*>(bk.data);
      const auto* ip = static_cast<const int64_t*>(idx.data);
      const int64_t n = static_cast<int64_t>(b->size());
      EXPECT_GE(n, 1);
      const BucketSize want = sizes().at(static_cast<size_t>(bp[0]));
      EXPECT_EQ(img.shape, (std::vector<int64_t>{n, want.height, want.width, 3}));
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(bp[j], bp[0]);
        const auto [w, h] = size_of(static_cast<int>(ip[j]));
        EXPECT_EQ(nearest_bucket(sizes(), w, h), static_cast<uint32_t>(bp[0])) << "record " << ip[j];
        s.index.push_back(ip[j]);
      }
      s.bucket.push_back(bp[0]);
      const auto* px = static_cast<const uint8_t*>(img.data);
      s.pixels.emplace_back(px, px + img.bytes());
    }
    return s;
  }
  static TempDir* dir_;
};
TempDir* LoaderBuckets::dir_ = nullptr;

std::map<uint32_t, uint64_t> bucket_counts() {
  std::map<uint32_t, uint64_t> c;
  for (int i = 0; i < 130; ++i) {
    const auto [w, h] = size_of(i);
    ++c[nearest_bucket(resolve_buckets(BucketOptions{{{32, 64}, {48, 48}, {64, 32}}}), w, h)];
  }
  return c;
}

TEST_F(LoaderBuckets, BatchesAreOneBucketOfItsShape) {
  Loader l(options());
  const Seen s = drain(l);
  std::set<int64_t> used(s.bucket.begin(), s.bucket.end());
  EXPECT_EQ(used.size(), 3u);  // every bucket appears, so shapes vary between batches
  EXPECT_EQ(s.bucket.size(), l.num_batches());
}

TEST_F(LoaderBuckets, FillRepeatsOnlyToCompleteEachBucketsLastBatch) {
  Loader l(options());
  const Seen s = drain(l);
  std::map<int64_t, int> times;
  for (int64_t i : s.index) ++times[i];
  EXPECT_EQ(times.size(), 130u);  // no record lost
  std::map<uint32_t, uint64_t> repeats;
  for (const auto& [i, n] : times) {
    const auto [w, h] = size_of(static_cast<int>(i));
    repeats[nearest_bucket(sizes(), w, h)] += static_cast<uint64_t>(n - 1);
  }
  for (const auto& [b, n] : bucket_counts()) EXPECT_EQ(repeats[b], (12 - n % 12) % 12) << "bucket " << b;
}

TEST_F(LoaderBuckets, DropLastDropsOnlyEachBucketsPartialBatch) {
  LoaderOptions o = options();
  o.drop_last = true;
  Loader l(o);
  const Seen s = drain(l);
  std::set<int64_t> seen;
  for (int64_t i : s.index) EXPECT_TRUE(seen.insert(i).second) << "record " << i << " twice";
  std::map<uint32_t, uint64_t> missing;
  for (int i = 0; i < 130; ++i)
    if (!seen.count(i)) {
      const auto [w, h] = size_of(i);
      ++missing[nearest_bucket(sizes(), w, h)];
    }
  for (const auto& [b, n] : bucket_counts()) EXPECT_EQ(missing[b], n % 12) << "bucket " << b;
}

TEST_F(LoaderBuckets, DeterministicAndReshuffledPerEpoch) {
  Loader a(options()), b(options());
  const Seen sa = drain(a), sb = drain(b);
  EXPECT_EQ(sa.index, sb.index);
  EXPECT_EQ(sa.pixels, sb.pixels);
  a.set_epoch(1);
  const Seen s1 = drain(a);
  EXPECT_NE(s1.index, sa.index);
  // Eval: centred crops, the same pixels for a record in every epoch.
  LoaderOptions e = options();
  e.transform.kind = ImageTransform::Kind::kEval;
  e.order.kind = OrderKind::kSequential;
  Loader ev(e);
  const Seen e0 = drain(ev);
  ev.set_epoch(3);
  const Seen e3 = drain(ev);
  EXPECT_EQ(e0.index, e3.index);
  EXPECT_EQ(e0.pixels, e3.pixels);
}

// A record of exactly a bucket's size, centred (eval): every pixel as a full decode
// gives it (the cover's scale is 1, the crop the whole image).
TEST_F(LoaderBuckets, EvalCoversAndCentres) {
  LoaderOptions e = options();
  e.transform.kind = ImageTransform::Kind::kEval;
  e.order.kind = OrderKind::kSequential;
  Loader l(e);
  ImageDecoder dec;
  bool checked = false;
  while (auto b = l.next()) {
    const auto* ip = static_cast<const int64_t*>((*b)["index"].data);
    const TensorView& img = (*b)["image"];
    for (size_t j = 0; j < b->size(); ++j) {
      if (ip[j] % 9 != 0) continue;  // records 0, 9, 18, ...: 64 x 32, the landscape bucket exactly
      ASSERT_EQ(img.shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), 32, 64, 3}));
      const auto jpeg = testing::make_jpeg(64, 32, static_cast<uint32_t>(ip[j]));
      std::vector<uint8_t> full(64 * 32 * 3);
      dec.decode_region(jpeg, 0, 0, 64, 32, full.data(), full.size());
      const auto* px = static_cast<const uint8_t*>(img.data) + j * full.size();
      int worst = 0;
      for (size_t i = 0; i < full.size(); ++i) worst = std::max(worst, std::abs(int(px[i]) - int(full[i])));
      EXPECT_EQ(worst, 0) << "record " << ip[j];
      checked = true;
    }
  }
  EXPECT_TRUE(checked);
}

TEST_F(LoaderBuckets, SameSequenceForWorldSizesOfOneGlobalBatch) {
  Loader one(options());
  const Seen ref = drain(one);
  for (uint32_t W : {2u, 3u}) {
    std::vector<Seen> ranks;
    uint64_t batches = 0;
    for (uint32_t r = 0; r < W; ++r) {
      Loader l(options(W, r));
      if (r == 0) batches = l.num_batches();
      EXPECT_EQ(l.num_batches(), batches) << "W=" << W << " rank " << r;
      ranks.push_back(drain(l));
      EXPECT_EQ(ranks.back().bucket.size(), batches);
    }
    // Step k, sample j of rank r is global sample k*12 + j*W + r.
    std::vector<int64_t> global(ref.index.size(), -1);
    const uint64_t B = 12 / W;
    for (uint32_t r = 0; r < W; ++r) {
      EXPECT_EQ(ranks[r].bucket, ref.bucket) << "W=" << W;  // step k is one bucket on every rank
      for (size_t t = 0; t < ranks[r].index.size(); ++t)
        global.at((t / B) * 12 + (t % B) * W + r) = ranks[r].index[t];
    }
    EXPECT_EQ(global, ref.index) << "W=" << W;
  }
}

TEST_F(LoaderBuckets, ResumesMidEpochExactly) {
  Loader full(options());
  const Seen all = drain(full);
  Loader part(options());
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(part.next());
  const OrderState st = part.state();
  EXPECT_EQ(st.bucket_batch, 12u);
  const OrderState parsed = OrderState::parse(st.serialize());
  EXPECT_EQ(parsed, st);
  {
    Loader resumed(options());
    resumed.load_state(parsed);
    const Seen rest = drain(resumed);
    EXPECT_EQ(rest.index, std::vector<int64_t>(all.index.begin() + 36, all.index.end()));
    EXPECT_EQ(rest.pixels, std::vector<std::vector<uint8_t>>(all.pixels.begin() + 3, all.pixels.end()));
  }
  {
    // On two ranks of the same global batch: the two halves of the same rest.
    Loader r0(options(2, 0)), r1(options(2, 1));
    r0.load_state(parsed);
    r1.load_state(parsed);
    const Seen a = drain(r0), b = drain(r1);
    ASSERT_EQ(a.index.size(), b.index.size());
    for (size_t t = 0; t < a.index.size(); ++t) {
      EXPECT_EQ(a.index[t], all.index[36 + (t / 6) * 12 + (t % 6) * 2]);
      EXPECT_EQ(b.index[t], all.index[36 + (t / 6) * 12 + (t % 6) * 2 + 1]);
    }
  }
  // Another global batch, or no buckets: refused, naming why.
  Loader other(options(1, 0, 8));
  std::string why;
  EXPECT_EQ(testing::error_code_of([&] { other.load_state(parsed); }, &why), ErrorCode::kInvalidArgument);
  EXPECT_NE(why.find("global batch 12"), std::string::npos) << why;
  LoaderOptions plain = testing::image_options(dir_->str("ds"));
  Loader p(plain);
  EXPECT_EQ(testing::error_code_of([&] { p.load_state(parsed); }, &why), ErrorCode::kInvalidArgument);
}

TEST_F(LoaderBuckets, WhatCannotBeBucketedIsRefused) {
  LoaderOptions o = options();
  o.on_error = OnError::kSkip;
  std::string why;
  EXPECT_EQ(testing::error_code_of([&] { Loader l(o); }, &why), ErrorCode::kInvalidArgument);
  EXPECT_NE(why.find("buckets"), std::string::npos) << why;
  o = options();
  o.transform.kind = ImageTransform::Kind::kNone;
  EXPECT_EQ(testing::error_code_of([&] { Loader l(o); }, &why), ErrorCode::kInvalidArgument);
  EXPECT_NE(why.find("buckets"), std::string::npos) << why;
  o = options();
  o.buckets.sizes.push_back({96, 96});  // the square's aspect twice
  EXPECT_EQ(testing::error_code_of([&] { Loader l(o); }, &why), ErrorCode::kInvalidArgument);
}

// A record whose image header is damaged is named (shard, record, source key) when the
// Loader opens, not found in some later epoch.
TEST(LoaderBucketsOpen, AnUnreadableHeaderIsNamedAtOpen) {
  TempDir dir;
  testing::ImageDatasetSpec spec;
  spec.count = 12;
  spec.keys = true;
  testing::write_image_dataset(dir.str("ds"), spec);
  const auto ds = Dataset::open(dir.str("ds"));
  const auto [shard, rec] = ds->locate(5);
  const std::string path = ds->shard_path(shard);
  const uint64_t at = ds->shard(shard)->location(rec).offset;  // the image is the first field
  auto bytes = testing::read_file(path);
  std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin() + static_cast<std::ptrdiff_t>(at) + 4, 0);
  testing::write_file(path, bytes);
  LoaderOptions o = testing::image_options(dir.str("ds"));
  o.buckets.sizes = {{32, 64}, {64, 32}};
  std::string why;
  EXPECT_EQ(testing::error_code_of([&] { Loader l(o); }, &why), ErrorCode::kDataLoss);
  EXPECT_NE(why.find(path + ": record " + std::to_string(rec)), std::string::npos) << why;
  EXPECT_NE(why.find("img-00005"), std::string::npos) << why;
  EXPECT_NE(why.find("image size"), std::string::npos) << why;
}

}  // namespace
}  // namespace stoker
