// Video fields: the media index, the pack-time probe, clip plans and VideoDecoder.
//
// Test videos are made here with Debian's ffmpeg CLI (skipped, saying so, without it):
// each frame a flat grey of level 16 + 4 * N (limited-range luma), so a decoded frame
// tells its index; H.264 with B-frames, VP9, a variable frame rate, a rotation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "decode/clip_plan.h"
#include "decode/video_decode.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/media.h"
#include "stoker/pack.h"
#include "stoker/verify.h"
#include "util/loader_util.h"
#include "util/test_util.h"
#include "util/video_util.h"

namespace stoker {
namespace {

using internal::ClipPlan;
using internal::VideoDecoder;
using stoker::testing::TempDir;

using stoker::testing::grey;
using stoker::testing::grey_index;
using stoker::testing::have_ffmpeg;
using stoker::testing::make_video;
using stoker::testing::rotate_mp4;

class VideoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!media_available()) GTEST_SKIP() << "built without libav";
    if (!have_ffmpeg()) GTEST_SKIP() << "no ffmpeg CLI to make test videos";
  }
  TempDir dir_;
};

TEST(MediaIndex, RoundTripsAndRefusesDamage) {
  MediaInfo m;
  m.codec = "h264";
  m.width = 64, m.height = 48, m.rotation = 90, m.tb_num = 1, m.tb_den = 12800;
  m.duration = 25600, m.frames = 50;
  m.keyframes = {{0, 48, 0}, {6144, 1746, 12}};
  const std::vector<uint8_t> file = {1, 2, 3, 4, 5};
  std::vector<uint8_t> v = make_media_value(m, file);
  MediaInfo back;
  const auto bytes = parse_media_value(v, back);
  EXPECT_EQ(back, m);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin(), bytes.end()), file);
  for (size_t at : {0ul, 5ul, 20ul, 60ul, 110ul}) {
    std::vector<uint8_t> bad = v;
    bad[at] ^= 0x40;
    MediaInfo x;
    EXPECT_EQ(stoker::testing::error_code_of([&] { parse_media_value(bad, x); }), ErrorCode::kDataLoss) << "byte " << at;
  }
  std::vector<uint8_t> cut(v.begin(), v.end() - 1);
  MediaInfo x;
  std::string why;
  EXPECT_EQ(stoker::testing::error_code_of([&] { parse_media_value(cut, x); }, &why), ErrorCode::kDataLoss);
  EXPECT_NE(why.find("the file has 4 bytes"), std::string::npos) << why;
}

TEST_F(VideoTest, ProbeIndexesH264WithBFrames) {
  const auto file = make_video(dir_, "b.mp4", grey() + " -c:v libx264 -bf 3 -g 10 -pix_fmt yuv420p");
  const MediaInfo m = probe_media(file, MediaKind::kVideo);
  EXPECT_EQ(m.codec, "h264");
  EXPECT_EQ(m.width, 64);
  EXPECT_EQ(m.height, 48);
  EXPECT_EQ(m.frames, 50);
  EXPECT_NEAR(m.seconds(m.duration), 2.0, 1e-6);
  ASSERT_EQ(m.keyframes.size(), 5u);
  for (size_t k = 0; k < m.keyframes.size(); ++k) {
    EXPECT_EQ(m.keyframes[k].frame, static_cast<int64_t>(k * 10));
    EXPECT_NEAR(m.seconds(m.keyframes[k].pts - m.start_pts), k * 0.4, 1e-6);
    EXPECT_GT(m.keyframes[k].pos, 0);
  }
}

// Every frame index, through a seek or from the start, on H.264 (B-frames) and VP9.
TEST_F(VideoTest, StrideClipsDecodeTheFramesTheyName) {
  for (const char* codec : {"-c:v libx264 -bf 3 -g 10 -pix_fmt yuv420p", "-c:v libvpx-vp9 -g 10 -deadline realtime -crf 4 -b:v 0"}) {
    const bool vp9 = std::string(codec).find("vp9") != std::string::npos;
    const auto file = make_video(dir_, vp9 ? "v.webm" : "v.mp4", grey() + " " + codec);
    const MediaInfo m = probe_media(file, MediaKind::kVideo);
    VideoDecoder dec;
    for (int64_t first : {0, 7, 10, 23, 41}) {
      ClipPlan p;
      p.by_frame = true;
      p.w = m.width, p.h = m.height;
      for (int k = 0; k < 4; ++k) p.at.push_back(std::min<int64_t>(first + 3 * k, 49));
      std::vector<uint8_t> out(4 * 64 * 48 * 3);
      std::vector<double> pts(4);
      dec.decode(file, m, p, 64, 48, out.data(), pts.data());
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(grey_index(out.data() + k * 64 * 48 * 3, 64 * 48), p.at[k]) << codec << " first " << first;
        EXPECT_NEAR(pts[k], p.at[k] / 25.0, 1e-6);
      }
    }
    EXPECT_GT(dec.stats().seeks, 0u);
    // A clip near the end decodes one GOP, not the file.
    EXPECT_LT(dec.stats().frames_decoded, 5u * 50u);
  }
}

// Times map to the frame shown then, on a stream whose frame rate changes mid-way.
TEST_F(VideoTest, TimeClipsFollowAVariableFrameRate) {
  // Frames 0..19 every 40 ms, then every 100 ms (0.8 s, 0.9 s, ...).
  const auto file = make_video(dir_, "vfr.mkv",
                               grey(",setpts='if(lt(N,20),N*0.04,0.8+(N-20)*0.1)/TB'") + " -vsync vfr "
                               "-c:v libx264 -bf 2 -g 8 -pix_fmt yuv420p");
  const MediaInfo m = probe_media(file, MediaKind::kVideo);
  ASSERT_EQ(m.frames, 50);
  auto shown_at = [](double t) { return t < 0.8 ? static_cast<int>(std::floor(t / 0.04 + 1e-9)) : 20 + static_cast<int>(std::floor((t - 0.8) / 0.1 + 1e-9)); };
  VideoDecoder dec;
  for (double t0 : {0.0, 0.5, 0.77, 1.3, 2.5, 3.3}) {
    ClipPlan p;
    p.w = m.width, p.h = m.height;
    std::vector<double> times;
    for (int k = 0; k < 6; ++k) {
      times.push_back(t0 + k * 0.07);
      p.at.push_back(static_cast<int64_t>(std::floor(times.back() * m.tb_den / m.tb_num + 1e-6)));
    }
    std::vector<uint8_t> out(6 * 64 * 48 * 3);
    std::vector<double> pts(6);
    dec.decode(file, m, p, 64, 48, out.data(), pts.data());
    for (int k = 0; k < 6; ++k) {
      const int want = std::min(49, shown_at(times[k]));
      EXPECT_EQ(grey_index(out.data() + k * 64 * 48 * 3, 64 * 48), want) << "t " << times[k];
    }
  }
}

// Frames a clip does not show and no other frame refers to (H.264's non-reference
// B-frames) are dropped undecoded, by index and by time, and the frames shown stay exact.
TEST_F(VideoTest, FramesNoneShowsOrRefersToAreNotDecoded) {
  const auto file = make_video(dir_, "gop.mp4", grey() + " -c:v libx264 -bf 3 -b_strategy 0 -g 50 -pix_fmt yuv420p");
  const MediaInfo m = probe_media(file, MediaKind::kVideo);
  ASSERT_EQ(m.frames, 50);
  for (const bool by_frame : {true, false}) {
    VideoDecoder dec;
    uint64_t span = 0;  // frames from the keyframe (frame 0) to each clip's last
    for (int64_t first : {0, 9, 20, 33}) {
      ClipPlan p;
      p.by_frame = by_frame;
      p.w = m.width, p.h = m.height;
      std::vector<int64_t> want;
      for (int k = 0; k < 6; ++k) {
        want.push_back(std::min<int64_t>(first + 3 * k, 49));
        // By time: a moment inside the frame's 40 ms.
        p.at.push_back(by_frame ? want.back() : m.start_pts + (want.back() * 40 + 13) * m.tb_den / (1000 * m.tb_num));
      }
      span += static_cast<uint64_t>(want.back() + 1);
      std::vector<uint8_t> out(6 * 64 * 48 * 3);
      std::vector<double> pts(6);
      dec.decode(file, m, p, 64, 48, out.data(), pts.data());
      for (int k = 0; k < 6; ++k)
        EXPECT_EQ(grey_index(out.data() + k * 64 * 48 * 3, 64 * 48), want[k]) << "by_frame " << by_frame << " first " << first;
    }
    EXPECT_EQ(dec.stats().every_frame, 0u) << "by_frame " << by_frame;
    EXPECT_GT(dec.stats().packets_marked_skippable, 0u);
    // Half the frames are non-reference B-frames with -bf 3 (pyramid), two thirds of them
    // not shown: a fifth of the span (100 of 126 here) is never decoded.
    EXPECT_LT(dec.stats().frames_decoded * 10, span * 9) << "decoded " << dec.stats().frames_decoded << " of " << span;
  }
}

TEST_F(VideoTest, TruncatedAndCorruptFilesAreNamedErrors) {
  const auto file = make_video(dir_, "t.mp4", grey() + " -c:v libx264 -g 10 -pix_fmt yuv420p");
  const MediaInfo m = probe_media(file, MediaKind::kVideo);
  const std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<ptrdiff_t>(file.size() * 2 / 3));
  std::string why;
  EXPECT_EQ(stoker::testing::error_code_of([&] { probe_media(cut, MediaKind::kVideo); }, &why), ErrorCode::kDataLoss);
  // At train time (an index of the whole file over the cut bytes): an error, not frames.
  ClipPlan p;
  p.by_frame = true;
  p.w = 64, p.h = 48;
  p.at = {45, 49};
  std::vector<uint8_t> out(2 * 64 * 48 * 3);
  std::vector<double> pts(2);
  VideoDecoder dec;
  EXPECT_EQ(stoker::testing::error_code_of([&] { dec.decode(cut, m, p, 64, 48, out.data(), pts.data()); }, &why), ErrorCode::kDataLoss);
  EXPECT_FALSE(why.empty());
  const std::vector<uint8_t> junk(4000, 0x5a);
  EXPECT_EQ(stoker::testing::error_code_of([&] { probe_media(junk, MediaKind::kVideo); }, &why), ErrorCode::kDataLoss);
  EXPECT_NE(why.find("container"), std::string::npos) << why;
}

// A playlist or concat script in a record names a file on this machine: refused, never
// read (the whitelist of no protocols is one guard; the demuxers' own rules another).
TEST_F(VideoTest, PlaylistsInARecordAreRefused) {
  make_video(dir_, "inner.mp4", grey() + " -c:v libx264 -g 10 -pix_fmt yuv420p");
  for (const std::string& text :
       {"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nfile://" + dir_.str("inner.mp4") + "\n#EXT-X-ENDLIST\n",
        "ffconcat version 1.0\nfile '" + dir_.str("inner.mp4") + "'\n"}) {
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    EXPECT_EQ(stoker::testing::error_code_of([&] { probe_media(bytes, MediaKind::kVideo); }), ErrorCode::kDataLoss) << text;
  }
}

TEST_F(VideoTest, ACodecWithoutDecoderIsRefusedNamingIt) {
  const auto file = make_video(dir_, "a64.mkv", "-f lavfi -i testsrc=size=64x48:rate=10:duration=1 -c:v a64multi");
  std::string why;
  EXPECT_EQ(stoker::testing::error_code_of([&] { probe_media(file, MediaKind::kVideo); }, &why), ErrorCode::kDataLoss);
  EXPECT_NE(why.find("codec 'a64m'"), std::string::npos) << why;
  EXPECT_NE(why.find("no decoder"), std::string::npos) << why;
}

// The rotated file is the plain one with its track matrix turned a quarter (tkhd, as a
// phone writes it); its frames come out as the plain file's, turned.
TEST_F(VideoTest, RotationIsReadAndApplied) {
  const auto plain = make_video(dir_, "r0.mp4", "-f lavfi -i testsrc=size=64x48:rate=25:duration=1 -c:v libx264 -g 10 -pix_fmt yuv420p");
  std::vector<uint8_t> turned = rotate_mp4(plain);
  const MediaInfo m0 = probe_media(plain, MediaKind::kVideo), m = probe_media(turned, MediaKind::kVideo);
  EXPECT_EQ(m0.rotation, 0);
  ASSERT_EQ(m.rotation, 90);
  EXPECT_EQ(internal::upright_width(m), 48);
  EXPECT_EQ(internal::upright_height(m), 64);
  ClipPlan p;
  p.by_frame = true;
  p.at = {3};
  p.w = 64, p.h = 48;
  std::vector<uint8_t> a(64 * 48 * 3), b(64 * 48 * 3);
  double pts = 0;
  VideoDecoder dec;
  dec.decode(plain, m0, p, 64, 48, a.data(), &pts);
  p.w = 48, p.h = 64;
  dec.decode(turned, m, p, 48, 64, b.data(), &pts);
  // Turned clockwise: upright (x, y) shows coded (y, H - 1 - x).
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 48; ++x)
      ASSERT_EQ(0, std::memcmp(&b[(y * 48 + x) * 3], &a[((47 - x) * 64 + y) * 3], 3)) << x << "," << y;
}

// pack videofolder: classes, keys and the index; a decoder-less file is refused naming
// it, or skipped; extract gives the files back byte for byte.
TEST_F(VideoTest, VideoFolderPacksRefusesAndExtracts) {
  std::filesystem::create_directories(dir_.str("src/cats"));
  std::filesystem::create_directories(dir_.str("src/dogs"));
  make_video(dir_, "src/cats/a.mp4", grey() + " -c:v libx264 -g 10 -pix_fmt yuv420p");
  make_video(dir_, "src/dogs/b.webm", grey() + " -c:v libvpx-vp9 -g 10 -deadline realtime -crf 4 -b:v 0");
  stoker::testing::write_file(dir_.str("src/dogs/notes.txt"), {'h', 'i'});
  PackSummary s = pack_videofolder(dir_.str("src"), dir_.str("ds"));
  EXPECT_EQ(s.records, 2u);
  auto ds = Dataset::open(dir_.str("ds"));
  EXPECT_EQ(ds->schema().to_string(), "__key__:text video:video label:int64");
  EXPECT_EQ(ds->manifest().class_names, (std::vector<std::string>{"cats", "dogs"}));
  const Record r = ds->read(1);
  EXPECT_EQ(r.text_field(0), "dogs/b.webm");
  MediaInfo m;
  parse_media_value(r.fields[1], m);
  EXPECT_EQ(m.codec, "vp9");
  EXPECT_EQ(r.int64_field(2), 1);
  extract_dataset(dir_.str("ds"), dir_.str("back"));
  EXPECT_EQ(stoker::testing::read_file(dir_.str("back/dogs/b.webm")), stoker::testing::read_file(dir_.str("src/dogs/b.webm")));

  // The C++ loader: clips through LoaderOptions::fields, frames and their times.
  LoaderOptions lo = stoker::testing::default_options(dir_.str("ds"), 2);
  lo.order.kind = OrderKind::kSequential;
  FieldTransform& f = lo.fields["video"];
  f.kind = FieldTransform::Kind::kVideoClip;
  f.video.frames = 5, f.video.stride = 4, f.video.crop = VideoClipSpec::Crop::kNone;
  f.video.height = 24, f.video.width = 32;
  {
    Loader loader(lo);
    auto b = loader.next();
    ASSERT_TRUE(b);
    EXPECT_EQ((*b)["video"].shape, (std::vector<int64_t>{2, 5, 24, 32, 3}));
    EXPECT_EQ((*b)["video.pts"].shape, (std::vector<int64_t>{2, 5}));
    const auto* frames = static_cast<const uint8_t*>((*b)["video"].data);
    const auto* pts = static_cast<const double*>((*b)["video.pts"].data);
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 5; ++k) {
        const int shown = grey_index(frames + ((j * 5 + k) * 24 * 32) * 3, 24 * 32);
        EXPECT_NEAR(pts[j * 5 + k], shown / 25.0, 1e-6) << j << " " << k;  // the frame its pts names
        if (k) EXPECT_EQ(shown - grey_index(frames + ((j * 5 + k - 1) * 24 * 32) * 3, 24 * 32), 4);
      }
  }

  make_video(dir_, "src/dogs/c.mkv", "-f lavfi -i testsrc=size=64x48:rate=10:duration=1 -c:v a64multi");
  std::string why;
  PackOptions o;
  o.overwrite = true;
  EXPECT_EQ(stoker::testing::error_code_of([&] { pack_videofolder(dir_.str("src"), dir_.str("ds"), o); }, &why),
            ErrorCode::kDataLoss);
  EXPECT_NE(why.find("src/dogs/c.mkv"), std::string::npos) << why;
  EXPECT_NE(why.find("codec 'a64m'"), std::string::npos) << why;
  o.skip_bad = true;
  s = pack_videofolder(dir_.str("src"), dir_.str("ds"), o);
  EXPECT_EQ(s.records, 2u);
  ASSERT_EQ(s.skipped.size(), 1u);
}

// A video damaged before packing gets in with --no-check (demuxed only); verify --decode
// finds it, naming the record's key and field; plain verify checks the index alone.
TEST_F(VideoTest, VerifyDecodeFindsAVideoPackedWithoutTheCheck) {
  std::filesystem::create_directories(dir_.str("src/a"));
  std::vector<uint8_t> bad = make_video(dir_, "src/a/good.mp4",
                                        "-f lavfi -i testsrc=size=64x48:rate=25:duration=2 -c:v libx264 -bf 3 -g 12 -pix_fmt yuv420p");
  const uint8_t mdat[] = {'m', 'd', 'a', 't'};
  const size_t at = static_cast<size_t>(std::search(bad.begin(), bad.end(), std::begin(mdat), std::end(mdat)) - bad.begin());
  // Slice data inside the mdat box (its size precedes its type), past the first
  // keyframe's headers: the container opens and its packets demux.
  const size_t end = at - 4 + (static_cast<size_t>(bad[at - 4]) << 24 | bad[at - 3] << 16 | bad[at - 2] << 8 | bad[at - 1]);
  for (size_t i = at + 600; i < std::min(end, at + 4000); i += 7) bad[i] ^= 0xFF;
  stoker::testing::write_file(dir_.str("src/a/bad.mp4"), bad);
  PackOptions o;
  std::string why;
  EXPECT_EQ(stoker::testing::error_code_of([&] { pack_videofolder(dir_.str("src"), dir_.str("ds"), o); }, &why),
            ErrorCode::kDataLoss);
  EXPECT_NE(why.find("src/a/bad.mp4"), std::string::npos) << why;
  o.check_decode = false;
  EXPECT_EQ(pack_videofolder(dir_.str("src"), dir_.str("ds"), o).records, 2u);
  EXPECT_TRUE(verify_path(dir_.str("ds"), VerifyOptions{}).problems.empty());
  VerifyOptions v;
  v.decode = true;
  const VerifyReport r = verify_path(dir_.str("ds"), v);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].where.find("a/bad.mp4"), std::string::npos) << r.problems[0].where;
  EXPECT_NE(r.problems[0].reason.find("field 'video'"), std::string::npos) << r.problems[0].reason;
}

TEST(ClipPlan, DrawsAreAFunctionOfTheSeedAndStayInTheStream) {
  MediaInfo m;
  m.width = 320, m.height = 240, m.tb_num = 1, m.tb_den = 1000, m.start_pts = 100, m.duration = 10000, m.frames = 250;
  m.keyframes = {{100, 0, 0}};
  VideoClipSpec s;
  s.frames = 8, s.fps = 4, s.clips = 3, s.height = 112, s.width = 112;
  std::set<int64_t> starts;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const auto a = internal::plan_video_clips(m, s, seed), b = internal::plan_video_clips(m, s, seed);
    ASSERT_EQ(a.size(), 3u);
    for (size_t c = 0; c < a.size(); ++c) {
      EXPECT_EQ(a[c].at, b[c].at);
      EXPECT_EQ(a[c].x0, b[c].x0);
      EXPECT_EQ(a[c].flip, b[c].flip);
      ASSERT_EQ(a[c].at.size(), 8u);
      EXPECT_GE(a[c].at.front(), m.start_pts);
      EXPECT_LT(a[c].at.back(), m.start_pts + m.duration);
      EXPECT_EQ(a[c].at[1] - a[c].at[0], 250);
      EXPECT_GE(a[c].x0, 0);
      EXPECT_LE(a[c].x0 + a[c].w, 320);
      EXPECT_LE(a[c].y0 + a[c].h, 240);
      starts.insert(a[c].at.front());
    }
  }
  EXPECT_GT(starts.size(), 100u);  // random starts, not a few fixed ones
  s.crop = VideoClipSpec::Crop::kCenter;
  s.fps = 0, s.stride = 2, s.clips = 2;
  const auto c = internal::plan_video_clips(m, s, 1);
  EXPECT_EQ(c[0].at.front(), 0);
  EXPECT_EQ(c[1].at.back(), 249);
  EXPECT_EQ(c[0].w, 240);
  EXPECT_EQ(c[0].x0, 40);
  // A stream shorter than the clip repeats its last frame.
  m.frames = 5;
  s.clips = 1;
  EXPECT_EQ(internal::plan_video_clips(m, s, 1)[0].at.back(), 4);
}

// VideoClipSpec::audio_rate: each clip's span of the file's audio track. The track is a
// ramp (the sample at t is t / 10, PCM at 8 kHz), so a window tells where it starts.
TEST_F(VideoTest, AudioFollowsTheClipSpan) {
  std::filesystem::create_directories(dir_.str("src/a"));
  make_video(dir_, "src/a/ramp.mkv", "-f lavfi -i testsrc=size=64x48:rate=25:duration=2 -f lavfi -i aevalsrc=t/10:s=8000:d=2 "
                                     "-c:v libx264 -g 10 -pix_fmt yuv420p -c:a pcm_s16le");
  pack_videofolder(dir_.str("src"), dir_.str("ds"));
  LoaderOptions lo = stoker::testing::default_options(dir_.str("ds"), 1);
  FieldTransform& f = lo.fields["video"];
  f.kind = FieldTransform::Kind::kVideoClip;
  f.video.frames = 8, f.video.fps = 10, f.video.clips = 3, f.video.height = f.video.width = 16;
  f.video.audio_rate = 8000;
  Loader loader(lo);
  auto b = loader.next();
  ASSERT_TRUE(b);
  ASSERT_EQ((*b)["video.audio"].shape, (std::vector<int64_t>{1, 3, 1, 6400}));  // 0.8 s at 8 kHz
  const auto* audio = static_cast<const float*>((*b)["video.audio"].data);
  const auto* pts = static_cast<const double*>((*b)["video.pts"].data);
  for (int c = 0; c < 3; ++c) {
    const float* a = audio + c * 6400;
    const double t0 = a[0] * 10.0;
    EXPECT_GE(t0, pts[c * 8] - 1e-3) << c;  // between the first frame shown and the next
    EXPECT_LT(t0, pts[c * 8] + 0.04 + 1e-3) << c;
    for (int i = 0; i < 6400 && t0 + i / 8000.0 < 1.99; i += 97) EXPECT_NEAR(a[i], (t0 + i / 8000.0) / 10, 2e-4) << c << " " << i;
  }
}

}  // namespace
}  // namespace stoker
