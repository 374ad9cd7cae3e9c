// Fast crop (jpeg_for_fast_crop + the splice decode): the rewritten file decodes to the
// same bytes as the original under every transform, and a damaged index is named.
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <filesystem>

#include "decode/restart_index.h"
#include "decode/restart_splice.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/dataset.h"
#include "stoker/diagnose.h"
#include "stoker/image.h"
#include "stoker/loader.h"
#include "stoker/pack.h"
#include "stoker/verify.h"
#include "util/tar_builder.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::make_rgb_image;

// A picture with texture at every scale (the smooth test picture plus per-pixel noise),
// so every MCU carries AC coefficients and chroma differs from pixel to pixel.
std::vector<uint8_t> busy_rgb(int w, int h, uint32_t seed) {
  std::vector<uint8_t> px = make_rgb_image(w, h, seed);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& v : px) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(std::clamp(static_cast<int>(v) + static_cast<int>(s >> 28) - 8, 0, 255));
  }
  return px;
}

enum class Kind { k444, k422, k420, k440, k411, kGray, kCmyk420, kCmyk444 };

const char* name_of(Kind k) {
  switch (k) {
    case Kind::k444: return "444";
    case Kind::k422: return "422";
    case Kind::k420: return "420";
    case Kind::k440: return "440";
    case Kind::k411: return "411";
    case Kind::kGray: return "gray";
    case Kind::kCmyk420: return "cmyk420";
    case Kind::kCmyk444: return "cmyk444";
  }
  return "?";
}

// TurboJPEG encode of a busy picture in the given layout.
std::vector<uint8_t> make_test_jpeg(Kind kind, int w, int h, uint32_t seed, bool progressive = false) {
  const std::vector<uint8_t> rgb = busy_rgb(w, h, seed);
  std::vector<uint8_t> src = rgb;
  int pf = TJPF_RGB, ss = TJSAMP_420;
  switch (kind) {
    case Kind::k444: ss = TJSAMP_444; break;
    case Kind::k422: ss = TJSAMP_422; break;
    case Kind::k420: ss = TJSAMP_420; break;
    case Kind::k440: ss = TJSAMP_440; break;
    case Kind::k411: ss = TJSAMP_411; break;
    case Kind::kGray: ss = TJSAMP_GRAY; break;
    case Kind::kCmyk420:
    case Kind::kCmyk444:
      ss = kind == Kind::kCmyk420 ? TJSAMP_420 : TJSAMP_444;
      pf = TJPF_CMYK;
      src.resize(static_cast<size_t>(w) * h * 4);
      for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
        src[4 * i] = rgb[3 * i];
        src[4 * i + 1] = rgb[3 * i + 1];
        src[4 * i + 2] = rgb[3 * i + 2];
        src[4 * i + 3] = static_cast<uint8_t>(180 + (rgb[3 * i] ^ rgb[3 * i + 2]) % 76);
      }
      break;
  }
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(t, src.data(), w, 0, h, pf, &buf, &size, ss, 88,
                             progressive ? TJFLAG_PROGRESSIVE : 0);
  std::string err = rc != 0 ? tjGetErrorStr2(t) : "";
  tjDestroy(t);
  if (rc != 0) throw std::runtime_error("tjCompress2: " + err);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  return out;
}

template <class F>
std::string data_loss_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no stoker::Error thrown";
  return "";
}

ImageTransform train_t(int size, bool dct) {
  ImageTransform t;
  t.kind = ImageTransform::Kind::kTrain;
  t.size = size;
  t.allow_dct_scaling = dct;
  return t;
}

// Decodes `a` and `b` with `t` and the same seed; they must give the same bytes.
void expect_same_decode(ImageDecoder& dec, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                        const ImageTransform& t, uint64_t seed, const std::string& what) {
  const size_t n = static_cast<size_t>(t.size) * t.size * 3;
  std::vector<uint8_t> oa(n), ob(n);
  const DecodeResult ra = dec.decode(a, t, seed, oa.data(), n);
  const DecodeResult rb = dec.decode(b, t, seed, ob.data(), n);
  ASSERT_EQ(ra.crop_x, rb.crop_x) << what;
  ASSERT_EQ(ra.crop_w, rb.crop_w) << what;
  ASSERT_EQ(ra.scale_denom, rb.scale_denom) << what;
  ASSERT_TRUE(oa == ob) << what << " seed " << seed << " crop " << ra.crop_w << "x" << ra.crop_h
                        << "+" << ra.crop_x << "+" << ra.crop_y << " denom " << ra.scale_denom;
}

struct Shape {
  Kind kind;
  int w, h;
};

// Widths off the MCU grid, MCU counts per row that are prime (13, 31, 7...), a single MCU
// column, and odd heights.
const Shape kShapes[] = {
    {Kind::k420, 500, 375},  {Kind::k420, 205, 117}, {Kind::k420, 9, 40},   {Kind::k444, 333, 250},
    {Kind::k444, 101, 67},   {Kind::k422, 248, 199}, {Kind::k422, 497, 64}, {Kind::k440, 211, 150},
    {Kind::k411, 290, 100},  {Kind::kGray, 203, 161}, {Kind::kGray, 16, 16}, {Kind::kCmyk420, 180, 141},
    {Kind::kCmyk444, 99, 75},
};

class FastCropShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(FastCropShapes, TrainEvalAndRegionsAreBitIdentical) {
  const Shape s = GetParam();
  const std::string label = std::string(name_of(s.kind)) + " " + std::to_string(s.w) + "x" + std::to_string(s.h);
  const std::vector<uint8_t> plain = make_test_jpeg(s.kind, s.w, s.h, 11);
  ImageDecoder dec;
  for (int target : {1, 2, 4}) {
    FastCropOptions fo;
    fo.target_interval = target;
    const std::vector<uint8_t> fast = jpeg_for_fast_crop(plain, fo);
    const FastCropInfo info = check_fast_crop_index(fast);
    ASSERT_TRUE(info.indexed) << label;
    ASSERT_EQ(info.mcus_per_row % info.interval, 0) << label;
    ASSERT_LE(info.interval, std::max(1, target)) << label;
    ASSERT_FALSE(check_fast_crop_index(plain).indexed);
    const std::string what = label + " k=" + std::to_string(info.interval);

    // Whole image.
    ImageTransform none;
    none.kind = ImageTransform::Kind::kNone;
    std::vector<uint8_t> fa(static_cast<size_t>(s.w) * s.h * 3), fb(fa.size());
    dec.decode(plain, none, 0, fa.data(), fa.size());
    dec.decode(fast, none, 0, fb.data(), fb.size());
    ASSERT_TRUE(fa == fb) << what;

    // Train crops: ordinary, tiny (down to a pixel or two) and whole-image, with and
    // without DCT scaling, at output sizes that do and do not allow scaling.
    for (bool dct : {true, false}) {
      for (int size : {32, 96}) {
        ImageTransform t = train_t(size, dct);
        for (uint64_t seed = 0; seed < 40; ++seed) expect_same_decode(dec, plain, fast, t, seed, what);
        t.scale_min = 1e-5f;
        t.scale_max = 2e-3f;
        for (uint64_t seed = 0; seed < 20; ++seed) expect_same_decode(dec, plain, fast, t, seed, what + " tiny");
        t.scale_min = t.scale_max = 1.0f;
        for (uint64_t seed = 0; seed < 4; ++seed) expect_same_decode(dec, plain, fast, t, seed, what + " whole");
      }
      ImageTransform e;
      e.kind = ImageTransform::Kind::kEval;
      e.allow_dct_scaling = dct;
      for (int size : {8, 24, 64}) {
        e.size = size;
        expect_same_decode(dec, plain, fast, e, 0, what + " eval");
      }
    }

    // Regions touching every edge and corner, tiny and whole.
    const int W = s.w, H = s.h;
    const int rw = std::max(1, W / 5), rh = std::max(1, H / 5);
    const int xs[] = {0, W / 2 - rw / 2, W - rw}, ys[] = {0, H / 2 - rh / 2, H - rh};
    std::vector<uint8_t> ra(static_cast<size_t>(W) * H * 3), rb(ra.size());
    auto same_region = [&](int x, int y, int w, int h) {
      dec.decode_region(plain, x, y, w, h, ra.data(), ra.size());
      dec.decode_region(fast, x, y, w, h, rb.data(), rb.size());
      ASSERT_TRUE(std::equal(ra.begin(), ra.begin() + static_cast<size_t>(w) * h * 3, rb.begin()))
          << what << " region " << w << "x" << h << "+" << x << "+" << y;
    };
    for (int x : xs) {
      for (int y : ys) {
        same_region(x, y, rw, rh);
        same_region(x == 0 ? 0 : x + rw - 1, y == 0 ? 0 : y + rh - 1, 1, 1);
      }
    }
    same_region(0, 0, W, H);
    same_region(0, 0, W, 1);
    same_region(W - 1, 0, 1, H);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, FastCropShapes, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::string(name_of(i.param.kind)) + "_" + std::to_string(i.param.w) +
                                  "x" + std::to_string(i.param.h);
                         });

TEST(FastCrop, RegionsAtEveryPhaseOfTheMcuGrid) {
  // Small regions starting and ending at every pixel of two MCUs (inside the image, so
  // the splice has neighbours to leave out): the context margin must be right at each.
  for (Kind k : {Kind::k420, Kind::k422, Kind::k440, Kind::k411, Kind::kCmyk420}) {
    const std::vector<uint8_t> plain = make_test_jpeg(k, 200, 150, 31);
    FastCropOptions o;
    o.target_interval = 1;
    const std::vector<uint8_t> fast = jpeg_for_fast_crop(plain, o);
    ImageDecoder dec;
    std::vector<uint8_t> ra(64 * 64 * 3), rb(ra.size());
    for (int p = 0; p < 64; ++p) {
      for (int size : {1, 5}) {
        const int x = 64 + p, y = 40 + p / 2;
        for (auto [rx, ry, rw, rh] : {std::array<int, 4>{x, 60, size, 20}, std::array<int, 4>{60, y, 20, size}}) {
          dec.decode_region(plain, rx, ry, rw, rh, ra.data(), ra.size());
          dec.decode_region(fast, rx, ry, rw, rh, rb.data(), rb.size());
          ASSERT_TRUE(std::equal(ra.begin(), ra.begin() + rw * rh * 3, rb.begin()))
              << name_of(k) << " region " << rw << "x" << rh << "+" << rx << "+" << ry;
        }
      }
    }
  }
}

TEST(FastCrop, ManySeedsOnAnImageNetSizedPicture) {
  const std::vector<uint8_t> plain = make_test_jpeg(Kind::k420, 500, 375, 3);
  const std::vector<uint8_t> fast = jpeg_for_fast_crop(plain);
  ImageDecoder dec;
  const ImageTransform t = train_t(224, true);
  for (uint64_t seed = 0; seed < 300; ++seed) expect_same_decode(dec, plain, fast, t, seed, "train");
  ImageTransform e;
  e.kind = ImageTransform::Kind::kEval;
  expect_same_decode(dec, plain, fast, e, 0, "eval");
}

TEST(FastCrop, SpliceHoldsOnlyWhatTheCropNeeds) {
  FastCropOptions two;
  two.target_interval = 2;
  const std::vector<uint8_t> fast = jpeg_for_fast_crop(make_test_jpeg(Kind::k420, 500, 375, 5), two);
  internal::RestartLayout l;
  ASSERT_TRUE(internal::read_restart_layout(fast, l));
  EXPECT_EQ(l.mcus_per_row, 32);
  EXPECT_EQ(l.mcu_rows, 24);
  EXPECT_EQ(l.interval, 2);
  std::vector<uint8_t> out;
  // A crop in the middle: MCU columns 12..18 and rows 9..15, widened by one MCU where the
  // crop is within one chroma sample (2 px at full scale) of an edge: the left column 193
  // is 1 px in, the right 302 2 px from 304, the top 146 2 px in, the bottom 255 1 px
  // from 256. Columns 11..18 -> whole intervals of 2: 10..19; rows 9..16.
  const internal::SpliceRect r = internal::splice_restart_intervals(fast, l, 193, 302, 146, 255, 1, out);
  EXPECT_FALSE(r.whole);
  EXPECT_EQ(r.x, 160);
  EXPECT_EQ(r.y, 144);
  EXPECT_EQ(r.width, 160);
  EXPECT_EQ(r.height, 128);
  EXPECT_LT(out.size(), fast.size() / 4);
  const JpegInfo info = probe_jpeg(out);
  EXPECT_EQ(info.width, 160);
  EXPECT_EQ(info.height, 128);
  EXPECT_FALSE(check_fast_crop_index(out).indexed);  // the index is not copied
  // The whole image needs no splice.
  EXPECT_TRUE(internal::splice_restart_intervals(fast, l, 0, 500, 0, 375, 1, out).whole);
  // At 1/4 scale a chroma sample covers 8 px: the same crop is widened on every side.
  const internal::SpliceRect q = internal::splice_restart_intervals(fast, l, 193, 302, 146, 255, 4, out);
  EXPECT_EQ(q.x, 160);
  EXPECT_EQ(q.y, 128);
  EXPECT_EQ(q.width, 160);
  EXPECT_EQ(q.height, 144);
}

TEST(FastCrop, ProgressiveSourcesBecomeSequentialWithTheSamePixels) {
  for (Kind k : {Kind::k420, Kind::k444, Kind::kGray}) {
    const std::vector<uint8_t> prog = make_test_jpeg(k, 301, 203, 9, true);
    ASSERT_TRUE(jpeg_is_progressive(prog));
    const std::vector<uint8_t> fast = jpeg_for_fast_crop(prog);
    EXPECT_FALSE(jpeg_is_progressive(fast));
    EXPECT_TRUE(check_fast_crop_index(fast).indexed);
    ImageDecoder dec;
    for (uint64_t seed = 0; seed < 30; ++seed) expect_same_decode(dec, prog, fast, train_t(64, true), seed, name_of(k));
  }
}

TEST(FastCrop, RewritingAFastCropFileGivesAFreshIndex) {
  const std::vector<uint8_t> plain = make_test_jpeg(Kind::k420, 320, 240, 4);
  FastCropOptions four;
  four.target_interval = 4;
  const std::vector<uint8_t> once = jpeg_for_fast_crop(plain, four);
  const std::vector<uint8_t> twice = jpeg_for_fast_crop(once);  // the default, 1, now
  EXPECT_EQ(check_fast_crop_index(once).interval, 4);
  EXPECT_EQ(check_fast_crop_index(twice).interval, 1);
  // jpeg_to_baseline drops the restart interval, so it drops the index too.
  EXPECT_FALSE(check_fast_crop_index(jpeg_to_baseline(once)).indexed);
  ImageDecoder dec;
  for (uint64_t seed = 0; seed < 20; ++seed) expect_same_decode(dec, plain, twice, train_t(64, true), seed, "twice");
}

TEST(FastCrop, SizeStaysCloseToTheOriginal) {
  // Huffman optimisation pays for most of the restart markers and the index.
  const std::vector<uint8_t> plain = make_test_jpeg(Kind::k420, 500, 375, 8);
  const std::vector<uint8_t> fast = jpeg_for_fast_crop(plain);
  EXPECT_LT(static_cast<double>(fast.size()), plain.size() * 1.05) << fast.size() << " vs " << plain.size();
}

TEST(FastCrop, BadOptionsAreInvalidArgument) {
  FastCropOptions o;
  o.target_interval = 0;
  try {
    jpeg_for_fast_crop(make_test_jpeg(Kind::k420, 64, 64, 1), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

// --- damage --------------------------------------------------------------------------

struct Damage : ::testing::Test {
  void SetUp() override {
    fast = jpeg_for_fast_crop(make_test_jpeg(Kind::k420, 500, 375, 21));
    ASSERT_TRUE(internal::read_restart_layout(fast, l));
  }
  // Rewrites the index payload with `edit` applied and a CRC that matches it again.
  std::vector<uint8_t> with_edited_index(const std::function<void(uint8_t*)>& edit) {
    std::vector<uint8_t> f = fast;
    uint8_t* p = f.data() + l.index_offset + 4;
    const size_t pl = l.index_size - 4;
    edit(p);
    const uint32_t crc = crc32c(p, pl - 4);
    for (int i = 0; i < 4; ++i) p[pl - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
    return f;
  }
  void expect_named(const std::vector<uint8_t>& f, const std::string& needle) {
    ImageDecoder dec;
    std::vector<uint8_t> out(64 * 64 * 3);
    const std::string m1 = data_loss_message([&] { check_fast_crop_index(f); });
    EXPECT_NE(m1.find(needle), std::string::npos) << m1;
    // The decoder names it too, for a crop that needs the damaged part (eval: the centre).
    ImageTransform e;
    e.kind = ImageTransform::Kind::kEval;
    e.size = 64;
    const std::string m2 = data_loss_message([&] { dec.decode(f, e, 0, out.data(), out.size()); });
    EXPECT_NE(m2.find(needle), std::string::npos) << m2;
    EXPECT_NE(m2.find("fast-crop index"), std::string::npos) << m2;
  }
  std::vector<uint8_t> fast;
  internal::RestartLayout l;
};

TEST_F(Damage, FlippedIndexByteFailsTheCrc) {
  std::vector<uint8_t> f = fast;
  f[l.index_offset + 4 + 30] ^= 0x10;
  expect_named(f, "CRC32C mismatch");
}

TEST_F(Damage, WrongGeometryIsNamed) {
  expect_named(with_edited_index([](uint8_t* p) { p[10] ^= 1; }), "MCUs per row");
  expect_named(with_edited_index([](uint8_t* p) { p[8] = 4; }), "restart interval");
  expect_named(with_edited_index([](uint8_t* p) { p[7] = 9; }), "unsupported version 9");
}

TEST_F(Damage, HugeDeclaredIntervalCountIsRefusedBeforeAllocating) {
  // Frame and index agree on 16000x16000 (a million MCUs), but the index holds far fewer
  // sizes than that: refused from the segment's size, before anything is allocated.
  std::vector<uint8_t> f = with_edited_index([](uint8_t* p) {
    p[10] = 1000 & 0xFF, p[11] = 1000 >> 8, p[12] = 1000 & 0xFF, p[13] = 1000 >> 8;
    const uint32_t n = 1000u * 1000u;
    for (int i = 0; i < 4; ++i) p[18 + i] = static_cast<uint8_t>(n >> (8 * i));
  });
  uint8_t* sof = f.data() + l.sof_offset;
  sof[5] = sof[7] = 16000 >> 8;
  sof[6] = sof[8] = 16000 & 0xFF;
  const std::string m = data_loss_message([&] { check_fast_crop_index(f); });
  EXPECT_NE(m.find("1000000 intervals cannot fit"), std::string::npos) << m;
}

TEST_F(Damage, ShiftedOffsetsDoNotMatchTheData) {
  // Move one byte from an interval in the middle rows to its neighbour: sizes still add
  // up, the CRC is right, but that boundary no longer sits after an RST marker.
  const size_t victim = l.intervals() / 2 + l.intervals_per_row() / 2;  // the centre
  std::vector<uint8_t> f = with_edited_index([&](uint8_t* p) {
    // Walk the LEB128 sizes to the victim's and its successor's.
    size_t q = 22;
    std::vector<size_t> at;
    for (size_t i = 0; i < l.intervals(); ++i) {
      at.push_back(q);
      while (p[q] & 0x80) ++q;
      ++q;
    }
    // Only single-byte sizes can be nudged in place without re-encoding; find a pair.
    for (size_t i = victim; i + 1 < l.intervals(); ++i) {
      if ((p[at[i]] & 0x80) == 0 && (p[at[i + 1]] & 0x80) == 0 && p[at[i]] < 0x7F && p[at[i + 1]] > 3) {
        ++p[at[i]];
        --p[at[i + 1]];
        return;
      }
    }
    ADD_FAILURE() << "no nudgeable pair of interval sizes";
  });
  expect_named(f, "does not match the data");
}

TEST_F(Damage, OverwrittenRestartMarkerInTheScanIsNamed) {
  std::vector<uint8_t> f = fast;
  const size_t i = l.intervals() / 2 + l.intervals_per_row() / 2;  // near the centre
  f[l.scan_offset + l.starts[i] - 1] = 0xD0 + ((i + 3) & 7);
  expect_named(f, "RST");
}

TEST_F(Damage, TruncatedScanIsNamed) {
  std::vector<uint8_t> f(fast.begin(), fast.end() - 100);
  expect_named(f, "EOI");
}

TEST_F(Damage, CorruptEntropyDataInsideAnIntervalIsDataLoss) {
  // The index is fine; the damage is libjpeg's to find, as for any file.
  std::vector<uint8_t> f = fast;
  const size_t mid = l.intervals() / 2 + l.intervals_per_row() / 2;
  for (size_t b = l.starts[mid]; b + 2 < l.starts[mid + 1]; ++b) f[l.scan_offset + b] = 0xFF;
  ImageDecoder dec;
  ImageTransform e;
  e.kind = ImageTransform::Kind::kEval;
  e.size = 64;
  std::vector<uint8_t> out(64 * 64 * 3);
  data_loss_message([&] { dec.decode(f, e, 0, out.data(), out.size()); });
  // The decoder stays usable.
  EXPECT_NO_THROW(dec.decode(fast, e, 0, out.data(), out.size()));
}

// --- packing ---------------------------------------------------------------------------

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_file;

// An ImageFolder of every layout the splice handles, some progressive, odd sizes.
std::vector<std::vector<uint8_t>> write_mixed_folder(const TempDir& tmp) {
  const Shape shapes[] = {{Kind::k420, 500, 375}, {Kind::k420, 205, 117}, {Kind::k444, 333, 250},
                          {Kind::k422, 248, 199}, {Kind::kGray, 203, 161}, {Kind::kCmyk420, 180, 141},
                          {Kind::k440, 211, 150}, {Kind::k420, 375, 500}};
  std::vector<std::vector<uint8_t>> files;
  for (int i = 0; i < 24; ++i) {
    const Shape& sh = shapes[i % std::size(shapes)];
    files.push_back(make_test_jpeg(sh.kind, sh.w, sh.h, 100 + i, /*progressive=*/i % 5 == 3));
    const std::string dir = tmp.str("src/c" + std::to_string(i % 3));
    fs::create_directories(dir);
    char name[32];
    std::snprintf(name, sizeof(name), "/%03d.jpg", i);
    write_file(dir + name, files.back());
  }
  return files;
}

// Every batch of `epochs` epochs, images and labels, as bytes.
std::vector<std::vector<uint8_t>> all_batches(const std::string& path, ImageTransform t, int epochs) {
  LoaderOptions o;
  o.path = path;
  o.batch_size = 5;
  o.transform = t;
  o.threads = 2;
  o.order.seed = 42;
  o.rank = 0;
  o.world_size = 1;
  Loader loader(o);
  std::vector<std::vector<uint8_t>> out;
  for (int e = 0; e < epochs; ++e) {
    loader.set_epoch(static_cast<uint64_t>(e));
    while (auto batch = loader.next()) {
      for (const char* name : {"image", "label"}) {
        const TensorView& v = (*batch)[name];
        const auto* p = static_cast<const uint8_t*>(v.data);
        out.emplace_back(p, p + v.bytes());
      }
    }
  }
  return out;
}

TEST(FastCropPack, ImageFolderDatasetsGiveIdenticalBatches) {
  TempDir tmp;
  write_mixed_folder(tmp);
  ImageFolderPackOptions plain_o, fast_o;
  plain_o.threads = fast_o.threads = 2;
  fast_o.fast_crop = true;
  pack_imagefolder(tmp.str("src"), tmp.str("plain"), plain_o);
  const PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("fast"), fast_o);
  EXPECT_EQ(s.rewritten, 24u);
  auto ds = Dataset::open(tmp.str("fast"));
  EXPECT_EQ(ds->manifest().meta.at("fast_crop"), "1");
  for (uint64_t i = 0; i < ds->record_count(); ++i) {
    const Record r = ds->read(i);
    const auto image = r.fields[static_cast<size_t>(ds->schema().find("image"))];
    EXPECT_TRUE(check_fast_crop_index(image).indexed) << i;
    EXPECT_FALSE(jpeg_is_progressive(image)) << i;
  }
  EXPECT_EQ(Dataset::open(tmp.str("plain"))->manifest().meta.count("fast_crop"), 0u);

  // verify checks each index.
  const VerifyReport vf = verify_path(tmp.str("fast"), 2);
  EXPECT_TRUE(vf.ok());
  EXPECT_EQ(vf.fast_crop_indexes, 24u);
  EXPECT_EQ(verify_path(tmp.str("plain"), 2).fast_crop_indexes, 0u);

  for (bool dct : {true, false}) {
    ImageTransform t = train_t(64, dct);
    EXPECT_EQ(all_batches(tmp.str("plain"), t, 3), all_batches(tmp.str("fast"), t, 3)) << "train dct " << dct;
    t.kind = ImageTransform::Kind::kEval;
    EXPECT_EQ(all_batches(tmp.str("plain"), t, 1), all_batches(tmp.str("fast"), t, 1)) << "eval dct " << dct;
  }
}

TEST(FastCropPack, DoctorSaysWhetherADatasetIsPackedForFastCrop) {
  TempDir tmp, root;
  fs::create_directories(tmp.str("src/a"));
  write_file(tmp.str("src/a/0.jpg"), make_test_jpeg(Kind::k420, 64, 48, 1));
  ImageFolderPackOptions o;
  pack_imagefolder(tmp.str("src"), tmp.str("plain"), o);
  o.fast_crop = true;
  pack_imagefolder(tmp.str("src"), tmp.str("fast"), o);
  auto fast_crop_check = [&](const std::string& ds) {
    DoctorOptions d;
    d.root = root.str();  // a bare fixture root: only the dataset checks read anything
    d.dataset = ds;
    for (const Check& c : run_doctor(d).checks) {
      if (c.name == "fast_crop") return c;
    }
    ADD_FAILURE() << "no fast_crop check";
    return Check{};
  };
  const Check plain = fast_crop_check(tmp.str("plain"));
  EXPECT_EQ(plain.status, CheckStatus::kWarn);
  EXPECT_NE(plain.advice.find("--fast-crop"), std::string::npos) << plain.advice;
  EXPECT_EQ(fast_crop_check(tmp.str("fast")).status, CheckStatus::kOk);
}

TEST(FastCropPack, WdsFastCropRewritesEverySample) {
  TempDir tmp;
  testing::TarBuilder tar;
  std::vector<std::vector<uint8_t>> jpegs;
  for (int i = 0; i < 6; ++i) {
    jpegs.push_back(make_test_jpeg(i % 2 ? Kind::k444 : Kind::k420, 120 + 7 * i, 90, 200 + i, i == 4));
    tar.file("s" + std::to_string(i) + ".jpg", jpegs.back());
    tar.file("s" + std::to_string(i) + ".cls", std::to_string(i % 2));
  }
  tar.end();
  write_file(tmp.str("a.tar"), tar.bytes);
  WdsPackOptions o;
  o.fast_crop = true;
  const PackSummary s = pack_wds({tmp.str("a.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.rewritten, 6u);
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->manifest().meta.at("fast_crop"), "1");
  ImageDecoder dec;
  for (uint64_t i = 0; i < ds->record_count(); ++i) {
    const Record r = ds->read(i);
    const auto image = r.fields[static_cast<size_t>(ds->schema().find("jpg"))];
    ASSERT_TRUE(check_fast_crop_index(image).indexed);
    const std::vector<uint8_t> stored(image.begin(), image.end());
    for (uint64_t seed = 0; seed < 10; ++seed) {
      expect_same_decode(dec, jpegs[i], stored, train_t(48, true), seed, "wds " + std::to_string(i));
    }
  }
}

TEST(FastCropPack, VerifyNamesARecordWhoseIndexIsDamaged) {
  // A fast-crop JPEG damaged before it was packed: the record CRC is right (it covers
  // what was packed), the index CRC is not.
  TempDir tmp;
  std::vector<uint8_t> bad = jpeg_for_fast_crop(make_test_jpeg(Kind::k420, 200, 120, 5));
  internal::RestartLayout l;
  ASSERT_TRUE(internal::read_restart_layout(bad, l));
  bad[l.index_offset + 4 + 25] ^= 0x01;
  fs::create_directories(tmp.str("src/a"));
  write_file(tmp.str("src/a/0.jpg"), make_test_jpeg(Kind::k420, 64, 64, 6));
  write_file(tmp.str("src/a/1.jpg"), bad);
  // Pack's decode check refuses it; packed without the check, verify names it.
  EXPECT_THROW(pack_imagefolder(tmp.str("src"), tmp.str("out")), Error);
  ImageFolderPackOptions po;
  po.check_decode = false;
  pack_imagefolder(tmp.str("src"), tmp.str("out"), po);
  const VerifyReport r = verify_path(tmp.str("out"), 1);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].where, "record 1 (__key__ 'a/1.jpg')");
  EXPECT_NE(r.problems[0].reason.find("fast-crop index: CRC32C mismatch"), std::string::npos)
      << r.problems[0].reason;
  // The loader names it too.
  LoaderOptions o;
  o.path = tmp.str("out");
  o.batch_size = 2;
  o.transform = train_t(32, true);
  o.threads = 1;
  o.rank = 0;
  o.world_size = 1;
  Loader loader(o);
  try {
    while (loader.next()) {
    }
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("fast-crop index"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker
