// Aspect-ratio buckets of video clips (LoaderOptions::buckets with a VideoClip field):
// each record in the bucket nearest its stored, upright aspect (the media index's size
// and rotation), every batch one bucket and of its shape [B, T, h, w, 3], the order
// deterministic, the same for world sizes 1, 2 and 4 of one global batch, resumable,
// and nothing lost beyond each bucket's documented last group. Centred clips equal an
// unbucketed VideoClip of the bucket's size, pixel for pixel.
//
// The videos are made here with Debian's ffmpeg CLI (skipped, saying so, without it).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "decode/clip_plan.h"
#include "decode/media_index.h"
#include "stoker/buckets.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/media.h"
#include "stoker/pack.h"
#include "stoker/stage.h"
#include "util/loader_util.h"
#include "util/test_util.h"
#include "util/video_util.h"

namespace stoker {
namespace {

using testing::TempDir;

constexpr int kRecords = 30;
constexpr int kFrames = 3, kStride = 4;
const std::vector<BucketSize> kBuckets = {{32, 64}, {48, 48}, {64, 32}};  // (h, w): landscape, square, portrait

// The buckets as the Loader numbers them (tallest first).
const std::vector<BucketSize>& resolved() {
  static const std::vector<BucketSize> s = resolve_buckets(BucketOptions{kBuckets});
  return s;
}

// Record i's video: kind i % 3 (landscape, square, portrait) in two variants, and every
// other portrait a landscape file whose container turns it a quarter: upright it is
// portrait, and so is its bucket.
struct Made {
  const char* file;
  int upright_w, upright_h;
};
Made made_of(int i) {
  const bool second = (i / 3) % 2;
  switch (i % 3) {
    case 0: return second ? Made{"wide72.mp4", 72, 32} : Made{"wide64.mp4", 64, 32};
    case 1: return second ? Made{"turned.mp4", 32, 64} : Made{"tall.mp4", 32, 64};
    default: return second ? Made{"sq52.mp4", 48, 52} : Made{"sq48.mp4", 48, 48};
  }
}

// 25 frames (1 s at 25 fps) whose luma follows x and the frame number and whose blue
// chroma follows y, so a crop's place shows in its pixels.
std::string pattern(int w, int h) {
  return "-f lavfi -i \"nullsrc=s=" + std::to_string(w) + "x" + std::to_string(h) +
         ":r=25:d=1,geq=lum='16+2*N+X/2':cb='128+Y':cr=128\" -c:v libx264 -g 5 -pix_fmt yuv420p";
}

class LoaderVideoBuckets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!media_available() || !testing::have_ffmpeg()) return;
    dir_ = new TempDir();
    std::filesystem::create_directories(dir_->str("made"));
    std::filesystem::create_directories(dir_->str("src/c"));
    testing::make_video(*dir_, "made/wide64.mp4", pattern(64, 32));
    testing::make_video(*dir_, "made/wide72.mp4", pattern(72, 32));
    testing::make_video(*dir_, "made/tall.mp4", pattern(32, 64));
    testing::make_video(*dir_, "made/sq48.mp4", pattern(48, 48));
    testing::make_video(*dir_, "made/sq52.mp4", pattern(48, 52));
    testing::write_file(dir_->str("made/turned.mp4"), testing::rotate_mp4(testing::read_file(dir_->str("made/wide64.mp4"))));
    for (int i = 0; i < kRecords; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "src/c/v%02d.mp4", i);  // record i: sorted by name
      std::filesystem::copy_file(dir_->str(std::string("made/") + made_of(i).file), dir_->str(name));
    }
    PackOptions o;
    o.threads = 2;
    pack_videofolder(dir_->str("src"), dir_->str("ds"), o);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!media_available()) GTEST_SKIP() << "built without libav";
    if (!dir_) GTEST_SKIP() << "no ffmpeg CLI to make test videos";
  }
  static VideoClipSpec clip(VideoClipSpec::Crop crop) {
    VideoClipSpec s;
    s.frames = kFrames, s.stride = kStride, s.crop = crop;
    return s;
  }
  static LoaderOptions options(uint32_t world = 1, uint32_t rank = 0, uint64_t global = 4,
                               VideoClipSpec::Crop crop = VideoClipSpec::Crop::kRandom) {
    LoaderOptions o = testing::default_options(dir_->str("ds"), global / world);
    o.threads = 2;
    o.order.seed = 11;
    o.world_size = static_cast<int>(world);
    o.rank = static_cast<int>(rank);
    o.buckets.sizes = kBuckets;
    FieldTransform& f = o.fields["video"];
    f.kind = FieldTransform::Kind::kVideoClip;
    f.video = clip(crop);
    return o;
  }
  static uint32_t expected_bucket(int64_t record) {
    const Made m = made_of(static_cast<int>(record));
    return nearest_bucket(resolved(), m.upright_w, m.upright_h);
  }
  struct Seen {
    std::vector<int64_t> index;                // delivery order
    std::vector<int64_t> bucket;               // per batch
    std::vector<std::vector<uint8_t>> frames;  // per sample
  };
  // The rest of the epoch, checking every batch's shape against its bucket.
  static Seen drain(Loader& l) {
    Seen s;
    const std::vector<BucketSize>& sizes = resolved();
    while (auto b = l.next()) {
      const TensorView& video = (*b)["video"];
      const auto* bp = static_cast<const int64_t*>((*b)["bucket"].data);
      const auto* ip = static_cast<const int64_t*>((*b)["index"].data);
      const auto* pts = static_cast<const double*>((*b)["video.pts"].data);
      const int64_t n = static_cast<int64_t>(b->size());
      const BucketSize want = sizes.at(static_cast<size_t>(bp[0]));
      EXPECT_EQ(video.shape, (std::vector<int64_t>{n, kFrames, want.height, want.width, 3}));
      EXPECT_EQ((*b)["video.pts"].shape, (std::vector<int64_t>{n, kFrames}));
      const size_t item = static_cast<size_t>(kFrames) * want.height * want.width * 3;
      EXPECT_EQ(video.bytes(), item * static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(bp[j], bp[0]);
        EXPECT_EQ(expected_bucket(ip[j]), static_cast<uint32_t>(bp[0])) << "record " << ip[j];
        for (int k = 1; k < kFrames; ++k) EXPECT_NEAR(pts[j * kFrames + k] - pts[j * kFrames + k - 1], kStride / 25.0, 1e-6);
        s.index.push_back(ip[j]);
        const auto* px = static_cast<const uint8_t*>(video.data) + static_cast<size_t>(j) * item;
        s.frames.emplace_back(px, px + item);
      }
      s.bucket.push_back(bp[0]);
    }
    return s;
  }
  static std::map<uint32_t, uint64_t> bucket_counts() {
    std::map<uint32_t, uint64_t> c;
    for (int i = 0; i < kRecords; ++i) ++c[expected_bucket(i)];
    return c;
  }
  static TempDir* dir_;
};
TempDir* LoaderVideoBuckets::dir_ = nullptr;

TEST_F(LoaderVideoBuckets, BatchesAreOneBucketOfItsShape) {
  Loader l(options());
  EXPECT_EQ(bucket_counts(), (std::map<uint32_t, uint64_t>{{0, 10}, {1, 10}, {2, 10}}));
  const Seen s = drain(l);
  EXPECT_EQ(std::set<int64_t>(s.bucket.begin(), s.bucket.end()).size(), 3u);
  EXPECT_EQ(s.bucket.size(), l.num_batches());
}

TEST_F(LoaderVideoBuckets, NothingLostAndRepeatsOnlyFillEachBucketsLastBatch) {
  Loader l(options());
  const Seen s = drain(l);
  std::map<int64_t, int> times;
  for (int64_t i : s.index) ++times[i];
  EXPECT_EQ(times.size(), static_cast<size_t>(kRecords));
  std::map<uint32_t, uint64_t> repeats;
  for (const auto& [i, n] : times) repeats[expected_bucket(i)] += static_cast<uint64_t>(n - 1);
  for (const auto& [b, n] : bucket_counts()) EXPECT_EQ(repeats[b], (4 - n % 4) % 4) << "bucket " << b;

  LoaderOptions o = options();
  o.drop_last = true;
  Loader d(o);
  const Seen dropped = drain(d);
  std::set<int64_t> seen;
  for (int64_t i : dropped.index) EXPECT_TRUE(seen.insert(i).second) << "record " << i << " twice";
  std::map<uint32_t, uint64_t> missing;
  for (int i = 0; i < kRecords; ++i)
    if (!seen.count(i)) ++missing[expected_bucket(i)];
  for (const auto& [b, n] : bucket_counts()) EXPECT_EQ(missing[b], n % 4) << "bucket " << b;
}

TEST_F(LoaderVideoBuckets, DeterministicAndReshuffledPerEpoch) {
  Loader a(options()), b(options());
  const Seen sa = drain(a), sb = drain(b);
  EXPECT_EQ(sa.index, sb.index);
  EXPECT_EQ(sa.frames, sb.frames);  // the same clip starts, crops and flips
  a.set_epoch(1);
  EXPECT_NE(drain(a).index, sa.index);
}

TEST_F(LoaderVideoBuckets, SameSequenceAndEqualBatchCountsForWorldSizesOfOneGlobalBatch) {
  Loader one(options());
  const Seen ref = drain(one);
  for (uint32_t W : {2u, 4u}) {
    const uint64_t B = 4 / W;
    std::vector<int64_t> global(ref.index.size(), -1);
    std::vector<std::vector<uint8_t>> frames(ref.index.size());
    for (uint32_t r = 0; r < W; ++r) {
      Loader l(options(W, r));
      EXPECT_EQ(l.num_batches(), ref.bucket.size()) << "W=" << W << " rank " << r;
      const Seen s = drain(l);
      EXPECT_EQ(s.bucket, ref.bucket) << "W=" << W << " rank " << r;  // step k is one bucket on every rank
      // Step k, sample j of rank r is global sample k*4 + j*W + r.
      for (size_t t = 0; t < s.index.size(); ++t) {
        const size_t g = (t / B) * 4 + (t % B) * W + r;
        global.at(g) = s.index[t];
        frames.at(g) = s.frames[t];
      }
    }
    EXPECT_EQ(global, ref.index) << "W=" << W;
    EXPECT_EQ(frames, ref.frames) << "W=" << W;  // a sample's draws do not depend on its rank
  }
}

TEST_F(LoaderVideoBuckets, ResumesMidEpochExactly) {
  Loader full(options());
  const Seen all = drain(full);
  Loader part(options());
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(part.next());
  const OrderState st = OrderState::parse(part.state().serialize());
  EXPECT_EQ(st.bucket_batch, 4u);
  Loader resumed(options());
  resumed.load_state(st);
  const Seen rest = drain(resumed);
  EXPECT_EQ(rest.index, std::vector<int64_t>(all.index.begin() + 12, all.index.end()));
  EXPECT_EQ(rest.frames, std::vector<std::vector<uint8_t>>(all.frames.begin() + 12, all.frames.end()));
  // On two ranks of the same global batch: the two halves of the same rest.
  Loader r0(options(2, 0)), r1(options(2, 1));
  r0.load_state(st);
  r1.load_state(st);
  const Seen a = drain(r0), b = drain(r1);
  ASSERT_EQ(a.index.size(), b.index.size());
  for (size_t t = 0; t < a.index.size(); ++t) {
    EXPECT_EQ(a.index[t], all.index[12 + (t / 2) * 4 + (t % 2) * 2]);
    EXPECT_EQ(b.index[t], all.index[12 + (t / 2) * 4 + (t % 2) * 2 + 1]);
  }
}

// Centred: the frames are covered and cropped as an unbucketed centred clip of the
// bucket's size is, pixel for pixel (that path is checked against PyAV in test_video.py).
TEST_F(LoaderVideoBuckets, CentredClipsEqualAnUnbucketedClipOfTheBucketsSize) {
  LoaderOptions o = options(1, 0, 4, VideoClipSpec::Crop::kCenter);
  o.order.kind = OrderKind::kSequential;
  o.drop_last = true;
  Loader l(o);
  const Seen s = drain(l);
  const std::vector<BucketSize>& sizes = resolved();
  for (size_t b = 0; b < sizes.size(); ++b) {
    LoaderOptions plain = testing::default_options(dir_->str("ds"), kRecords);
    plain.order.kind = OrderKind::kSequential;
    FieldTransform& f = plain.fields["video"];
    f.kind = FieldTransform::Kind::kVideoClip;
    f.video = clip(VideoClipSpec::Crop::kCenter);
    f.video.height = sizes[b].height, f.video.width = sizes[b].width;
    Loader p(plain);
    const auto batch = p.next();
    ASSERT_TRUE(batch);
    const auto* px = static_cast<const uint8_t*>((*batch)["video"].data);
    const size_t item = static_cast<size_t>(kFrames) * sizes[b].height * sizes[b].width * 3;
    int compared = 0;
    for (size_t t = 0; t < s.index.size(); ++t) {
      if (expected_bucket(s.index[t]) != b) continue;
      const auto* want = px + static_cast<size_t>(s.index[t]) * item;
      EXPECT_EQ(s.frames[t], std::vector<uint8_t>(want, want + item)) << "record " << s.index[t];
      ++compared;
    }
    EXPECT_EQ(compared, 8) << "bucket " << b;  // 10 records, the last partial group dropped
  }
}

// The pattern's red level is 1.164 * (2 * frame + x / 2): with one window for the whole
// clip, the output's middle pixel shows the same x in every frame, so its level moves
// with the frame number alone (2 * kStride a frame); a window drawn per frame would
// move it by up to tens of levels more.
TEST_F(LoaderVideoBuckets, ARandomCropIsOneWindowForTheWholeClip) {
  Loader l(options());
  const Seen s = drain(l);
  const std::vector<BucketSize>& sizes = resolved();
  for (size_t t = 0; t < s.index.size(); ++t) {
    const BucketSize b = sizes.at(expected_bucket(s.index[t]));
    const size_t frame = static_cast<size_t>(b.height) * b.width * 3;
    const size_t mid = (static_cast<size_t>(b.height / 2) * b.width + b.width / 2) * 3;
    for (int k = 1; k < kFrames; ++k) {
      const int d = int(s.frames[t][k * frame + mid]) - int(s.frames[t][mid]);
      EXPECT_NEAR(d, 2 * kStride * k * 255.0 / 219.0, 5) << "record " << s.index[t] << " frame " << k;
    }
  }
}

// Staged (host backend: the ring and its plan without a GPU): the slots are sized for
// the largest bucket, whichever the first batch has, and each staged batch keeps its
// bucket's shape and the loader's bytes.
TEST_F(LoaderVideoBuckets, StagedClipsKeepTheirBucketsShape) {
  // A seed whose first batch is not of the largest bucket (the square's 48 x 48 pixels),
  // so that a later batch needs more room than the first.
  LoaderOptions o = options();
  for (;; ++o.order.seed) {
    Loader peek(o);
    const auto b = peek.next();
    ASSERT_TRUE(b);
    if (resolved().at(static_cast<size_t>(static_cast<const int64_t*>((*b)["bucket"].data)[0])).width != 48) break;
  }
  Loader l(o);
  const Seen want = drain(l);
  StagerOptions so;
  so.backend = StageBackend::kHost;
  so.device_slots = 2;
  Stager st(o, so);
  size_t t = 0;
  std::set<int64_t> buckets;
  while (auto b = st.next()) {
    b->wait(nullptr);
    const TensorView& video = (*b)["video"];
    const int64_t n = static_cast<int64_t>(b->size());
    const BucketSize size = resolved().at(expected_bucket(static_cast<const int64_t*>((*b)["index"].data)[0]));
    EXPECT_EQ(video.shape, (std::vector<int64_t>{n, kFrames, size.height, size.width, 3}));
    buckets.insert(static_cast<const int64_t*>((*b)["bucket"].data)[0]);
    const size_t item = video.bytes() / static_cast<size_t>(n);
    for (int64_t j = 0; j < n; ++j, ++t) {
      ASSERT_LT(t, want.frames.size());
      const auto* px = static_cast<const uint8_t*>(video.data) + static_cast<size_t>(j) * item;
      EXPECT_EQ(std::vector<uint8_t>(px, px + item), want.frames[t]) << "sample " << t;
    }
    b->release(nullptr);
  }
  EXPECT_EQ(t, want.frames.size());
  EXPECT_EQ(buckets.size(), 3u);
}

// A record whose media index is damaged is named (shard, record, source key) when the
// Loader opens, not found in some later epoch.
TEST_F(LoaderVideoBuckets, AnUnreadableMediaIndexIsNamedAtOpen) {
  TempDir copy;
  std::filesystem::copy(dir_->str("ds"), copy.str("ds"), std::filesystem::copy_options::recursive);
  const auto ds = Dataset::open(copy.str("ds"));
  const auto [shard, rec] = ds->locate(7);
  const std::string path = ds->shard_path(shard);
  const RecordLocation& loc = ds->shard(shard)->location(rec);
  const uint64_t at = loc.offset + loc.field_sizes[0];  // the video follows __key__
  auto bytes = testing::read_file(path);
  bytes.at(at + 40) ^= 0x01;  // the stored height: the index's checksum no longer matches
  testing::write_file(path, bytes);
  LoaderOptions o = options();
  o.path = copy.str("ds");
  std::string why;
  EXPECT_EQ(testing::error_code_of([&] { Loader l(o); }, &why), ErrorCode::kDataLoss);
  EXPECT_NE(why.find(path + ": record " + std::to_string(rec)), std::string::npos) << why;
  EXPECT_NE(why.find("c/v07.mp4"), std::string::npos) << why;
  EXPECT_NE(why.find("video size"), std::string::npos) << why;
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
}

// Covering boxes: the largest of the output's aspect, upright, placed anywhere it fits
// (at random, flipped about half the time) or centred; every frame of a clip shares it.
TEST(ClipPlanCover, TheBoxIsTheLargestOfTheOutputsAspectPlacedAtRandomOrCentred) {
  MediaInfo m;
  m.width = 320, m.height = 240, m.rotation = 90;  // upright 240 x 320
  m.tb_num = 1, m.tb_den = 1000, m.duration = 10000, m.frames = 250;
  m.keyframes = {{0, 0, 0}};
  VideoClipSpec s;
  s.frames = 4, s.stride = 2, s.clips = 2, s.height = 64, s.width = 96;  // a 3:2 landscape bucket
  std::set<double> ys;
  int flips = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (const internal::ClipPlan& p : internal::plan_video_clips(m, s, seed, true)) {
      EXPECT_EQ(p.w, 240);
      EXPECT_EQ(p.h, 160);
      EXPECT_EQ(p.x0, 0);
      EXPECT_GE(p.y0, 0);
      EXPECT_LE(p.y0 + p.h, 320);
      ys.insert(p.y0);
      flips += p.flip;
    }
  }
  EXPECT_GT(ys.size(), 100u);
  EXPECT_GT(flips, 150);
  EXPECT_LT(flips, 250);
  s.crop = VideoClipSpec::Crop::kCenter;
  const internal::ClipPlan c = internal::plan_video_clips(m, s, 3, true)[0];
  EXPECT_EQ(c.w, 240);
  EXPECT_EQ(c.h, 160);
  EXPECT_EQ(c.y0, 80);
  EXPECT_FALSE(c.flip);
}

// The index read from a value's head alone: what the bucket plan reads.
TEST(MediaIndexHead, ParsesWithoutTheFileAndAsksForWhatItLacks) {
  MediaInfo m;
  m.codec = "h264";
  m.width = 64, m.height = 32, m.rotation = 90, m.tb_num = 1, m.tb_den = 12800;
  m.duration = 12800, m.frames = 25;
  m.keyframes = {{0, 48, 0}, {2560, 900, 5}};
  const std::vector<uint8_t> v = make_media_value(m, std::vector<uint8_t>(500, 7));
  const uint32_t head = internal::media_index_bytes(std::span<const uint8_t>(v).first(8));
  EXPECT_EQ(head, 108u + 2 * 24u);
  EXPECT_EQ(internal::media_index_bytes(std::span<const uint8_t>(v).first(4)), 8u);  // too few to tell
  EXPECT_EQ(internal::parse_media_index(std::span<const uint8_t>(v).first(head)), m);
  EXPECT_EQ(testing::error_code_of([&] { internal::parse_media_index(std::span<const uint8_t>(v).first(head - 1)); }),
            ErrorCode::kDataLoss);
  std::vector<uint8_t> bad = v;
  bad[1] ^= 0x20;
  EXPECT_EQ(testing::error_code_of([&] { internal::media_index_bytes(bad); }), ErrorCode::kDataLoss);
  // A keyframe far past a stream that starts before zero (the difference overflows int64).
  m.start_pts = -(int64_t{1} << 58);
  m.keyframes = {{m.start_pts, 48, 0}, {INT64_MAX - 5, 900, 5}};
  const std::vector<uint8_t> far = make_media_value(m, std::vector<uint8_t>(500, 7));
  EXPECT_EQ(testing::error_code_of([&] { internal::parse_media_index(far); }), ErrorCode::kDataLoss);
}

}  // namespace
}  // namespace stoker
