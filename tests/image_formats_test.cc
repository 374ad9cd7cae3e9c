// Tests of the PNG and WebP paths of include/stoker/image.h and of decode_with (Follow):
// every PNG colour type and bit depth against the stored values, WebP against libwebp's
// own decode, crop + resize against decode-then-crop-then-resize, error kinds for
// corrupt, truncated and oversized input, and the alignment of a Followed mask with the
// content of its image.
#include <gtest/gtest.h>
#include <webp/decode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>

#include "decode/crop.h"
#include "decode/resize.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "benchlib/image_encode.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::encode_png;
using testing::encode_png_rgb;
using testing::encode_webp_rgb;
using testing::error_code_of;
using testing::PngColor;

ImageTransform train(int size = 64) {
  ImageTransform t;
  t.kind = ImageTransform::Kind::kTrain;
  t.size = size;
  return t;
}

ImageTransform none() {
  ImageTransform t;
  t.kind = ImageTransform::Kind::kNone;
  return t;
}

std::vector<uint8_t> noisy_rgb(int w, int h, uint32_t seed) {
  auto rgb = testing::make_rgb_image(w, h, seed);
  std::mt19937 rng(seed);
  for (auto& v : rgb) v = static_cast<uint8_t>(std::clamp(int(v) + int(rng() % 31) - 15, 0, 255));
  return rgb;
}

std::vector<uint8_t> decode_none(ImageDecoder& dec, const std::vector<uint8_t>& bytes, int w,
                                 int h) {
  std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
  const DecodeResult r = dec.decode(bytes, none(), 0, out.data(), out.size());
  EXPECT_EQ(r.out_width, w);
  EXPECT_EQ(r.out_height, h);
  return out;
}

// CRC-32 of PNG chunks (ISO 3309), for patching headers.
uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

void put_be32(uint8_t* p, uint32_t v) {
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

// ---- PNG: every colour type against its stored values ---------------------------------

struct PngCase {
  const char* name;
  PngColor color;
  int depth;
  bool interlaced;
};

class PngDecode : public ::testing::TestWithParam<PngCase> {};

TEST_P(PngDecode, RgbMatchesStoredValuesAndOneChannelGivesThemUnchanged) {
  const PngCase c = GetParam();
  const int w = 37, h = 23;  // odd sizes: sub-byte rows end mid-byte
  std::mt19937 rng(c.depth * 10 + static_cast<int>(c.color));
  const int samples = c.color == PngColor::kRgb ? 3 : c.color == PngColor::kRgba ? 4
                      : c.color == PngColor::kGrayAlpha ? 2 : 1;
  const int maxv = (1 << c.depth) - 1;
  // Unpacked sample values, then packed the way the file stores them.
  std::vector<int> vals(static_cast<size_t>(w) * h * samples);
  const int n_palette = std::min(7, 1 << c.depth);
  for (auto& v : vals) v = static_cast<int>(rng() % (c.color == PngColor::kPalette ? n_palette : maxv + 1));
  const size_t row_bytes = (static_cast<size_t>(w) * samples * c.depth + 7) / 8;
  std::vector<uint8_t> stored(row_bytes * h, 0);
  for (int y = 0; y < h; ++y) {
    uint8_t* row = &stored[y * row_bytes];
    for (int i = 0; i < w * samples; ++i) {
      const int v = vals[static_cast<size_t>(y) * w * samples + i];
      if (c.depth == 16) {
        const uint16_t s = static_cast<uint16_t>(v);
        std::memcpy(row + 2 * i, &s, 2);
      } else if (c.depth == 8) {
        row[i] = static_cast<uint8_t>(v);
      } else {
        const int per = 8 / c.depth;
        row[i / per] |= static_cast<uint8_t>(v << (8 - c.depth * (1 + i % per)));
      }
    }
  }
  std::vector<uint8_t> palette;
  for (int i = 0; i < n_palette; ++i) {
    palette.insert(palette.end(), {static_cast<uint8_t>(200 - 20 * i), static_cast<uint8_t>(31 * i),
                                   static_cast<uint8_t>(i * i)});
  }
  const auto png = encode_png(stored, w, h, c.color, c.depth, palette, c.interlaced);

  const ImageInfo info = probe_image(png);
  EXPECT_EQ(info.format, ImageFormat::kPng);
  EXPECT_EQ(info.width, w);
  EXPECT_EQ(info.height, h);
  EXPECT_EQ(info.bit_depth, c.depth);
  EXPECT_EQ(info.palette, c.color == PngColor::kPalette);

  // RGB: palette looked up, gray replicated (sub-byte levels scaled to 0..255), alpha
  // dropped, 16-bit reduced to the high byte.
  ImageDecoder dec;
  const auto rgb = decode_none(dec, png, w, h);
  auto to8 = [&](int v) {
    if (c.depth == 16) return v >> 8;
    return v * 255 / maxv;
  };
  int bad = 0;
  for (int p = 0; p < w * h && bad < 5; ++p) {
    const int* s = &vals[static_cast<size_t>(p) * samples];
    int want[3];
    if (c.color == PngColor::kPalette) {
      for (int k = 0; k < 3; ++k) want[k] = palette[3 * s[0] + k];
    } else if (samples <= 2) {
      want[0] = want[1] = want[2] = to8(s[0]);
    } else {
      for (int k = 0; k < 3; ++k) want[k] = to8(s[k]);
    }
    for (int k = 0; k < 3; ++k) {
      if (rgb[3 * p + k] != want[k]) {
        ++bad;
        ADD_FAILURE() << c.name << " pixel " << p << " channel " << k << ": got "
                      << int(rgb[3 * p + k]) << ", want " << want[k];
      }
    }
  }

  // One channel, identity geometry, nearest: the stored gray level or palette index.
  std::vector<uint8_t> one(static_cast<size_t>(w) * h);
  FollowOutput fo;
  fo.channels = 1;
  fo.interpolation = Interpolation::kNearest;
  ImageGeometry g;
  g.src_width = g.out_width = w;
  g.src_height = g.out_height = h;
  g.w = w;
  g.h = h;
  if (samples <= 2 && (c.depth < 16)) {
    dec.decode_with(png, g, fo, one.data(), one.size());
    for (int p = 0; p < w * h; ++p) {
      ASSERT_EQ(one[p], vals[static_cast<size_t>(p) * samples]) << c.name << " pixel " << p;
    }
  } else if (samples > 2) {
    std::string msg;
    EXPECT_EQ(error_code_of([&] { dec.decode_with(png, g, fo, one.data(), one.size()); }, &msg),
              ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find("colour"), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllColourTypes, PngDecode,
    ::testing::Values(PngCase{"rgb8", PngColor::kRgb, 8, false},
                      PngCase{"rgba8", PngColor::kRgba, 8, false},
                      PngCase{"gray8", PngColor::kGray, 8, false},
                      PngCase{"gray4", PngColor::kGray, 4, false},
                      PngCase{"gray1", PngColor::kGray, 1, false},
                      PngCase{"grayalpha8", PngColor::kGrayAlpha, 8, false},
                      PngCase{"palette8", PngColor::kPalette, 8, false},
                      PngCase{"palette4", PngColor::kPalette, 4, false},
                      PngCase{"palette2_interlaced", PngColor::kPalette, 2, true},
                      PngCase{"gray16", PngColor::kGray, 16, false},
                      PngCase{"rgb16", PngColor::kRgb, 16, false},
                      PngCase{"rgba16_interlaced", PngColor::kRgba, 16, true},
                      PngCase{"rgb8_interlaced", PngColor::kRgb, 8, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(PngDecode, SixteenBitGrayMaskBelow256IsKeptAboveIsInvalidArgument) {
  const int w = 8, h = 4;
  std::vector<uint16_t> v(w * h);
  for (int i = 0; i < w * h; ++i) v[i] = static_cast<uint16_t>(i * 7);
  std::vector<uint8_t> stored(w * h * 2);
  std::memcpy(stored.data(), v.data(), stored.size());
  auto png = encode_png(stored, w, h, PngColor::kGray, 16);
  ImageDecoder dec;
  ImageGeometry g{w, h, 0, 0, w, h, true, false, w, h};
  FollowOutput fo{0, 0, 1, Interpolation::kNearest};
  std::vector<uint8_t> out(w * h);
  dec.decode_with(png, g, fo, out.data(), out.size());
  for (int i = 0; i < w * h; ++i) EXPECT_EQ(out[i], i * 7);
  v[5] = 300;
  std::memcpy(stored.data(), v.data(), stored.size());
  png = encode_png(stored, w, h, PngColor::kGray, 16);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode_with(png, g, fo, out.data(), out.size()); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("300"), std::string::npos) << msg;
}

// ---- WebP against libwebp's own decode ----------------------------------------------

TEST(WebpDecode, LosslessIsExactLossyEqualsLibwebp) {
  const int w = 61, h = 45;
  const auto rgb = noisy_rgb(w, h, 5);
  ImageDecoder dec;
  const auto lossless = encode_webp_rgb(rgb, w, h, true);
  EXPECT_EQ(decode_none(dec, lossless, w, h), rgb);
  const ImageInfo li = probe_image(lossless);
  EXPECT_EQ(li.format, ImageFormat::kWebp);
  EXPECT_EQ(li.width, w);
  EXPECT_EQ(li.height, h);

  const auto lossy = encode_webp_rgb(rgb, w, h, false, 80);
  int rw = 0, rh = 0;
  uint8_t* ref = WebPDecodeRGB(lossy.data(), lossy.size(), &rw, &rh);
  ASSERT_NE(ref, nullptr);
  ASSERT_EQ(rw, w);
  const std::vector<uint8_t> want(ref, ref + static_cast<size_t>(w) * h * 3);
  WebPFree(ref);
  EXPECT_EQ(decode_none(dec, lossy, w, h), want);
}

// ---- crop + resize equal decode, crop, then resize -----------------------------------

struct Encoded {
  const char* name;
  std::vector<uint8_t> bytes;
};

std::vector<Encoded> same_pixels_three_ways(const std::vector<uint8_t>& rgb, int w, int h) {
  return {{"png", encode_png_rgb(rgb, w, h)},
          {"webp_lossless", encode_webp_rgb(rgb, w, h, true)},
          {"webp_lossy", encode_webp_rgb(rgb, w, h, false, 85)}};
}

TEST(RasterTransforms, RegionIsFullDecodeThenCrop) {
  const int w = 90, h = 70;
  const auto rgb = noisy_rgb(w, h, 9);
  ImageDecoder dec;
  for (const auto& e : same_pixels_three_ways(rgb, w, h)) {
    const auto full = decode_none(dec, e.bytes, w, h);
    for (auto [x, y, cw, ch] : {std::array<int, 4>{0, 0, w, h}, {1, 3, 17, 9}, {33, 20, 57, 50},
                                {89, 69, 1, 1}, {10, 0, 3, 70}}) {
      std::vector<uint8_t> out(static_cast<size_t>(cw) * ch * 3);
      const DecodeResult r = dec.decode_region(e.bytes, x, y, cw, ch, out.data(), out.size());
      EXPECT_EQ(r.crop_w, cw);
      int diff = 0;
      for (int yy = 0; yy < ch; ++yy) {
        diff += std::memcmp(&out[static_cast<size_t>(yy) * cw * 3],
                            &full[(static_cast<size_t>(y + yy) * w + x) * 3],
                            static_cast<size_t>(cw) * 3) != 0;
      }
      EXPECT_EQ(diff, 0) << e.name << " region " << cw << "x" << ch << "+" << x << "+" << y;
    }
    std::vector<uint8_t> out(10 * 10 * 3);
    EXPECT_EQ(error_code_of([&] { dec.decode_region(e.bytes, 85, 0, 10, 10, out.data(), out.size()); }),
              ErrorCode::kInvalidArgument);
  }
}

TEST(RasterTransforms, TrainIsCropThenResizeEvalIsResizeThenCrop) {
  const int w = 150, h = 110;
  const auto rgb = noisy_rgb(w, h, 11);
  ImageDecoder dec;
  internal::Resizer resizer;
  for (const auto& e : same_pixels_three_ways(rgb, w, h)) {
    const auto full = decode_none(dec, e.bytes, w, h);
    for (uint64_t seed = 0; seed < 12; ++seed) {
      const ImageTransform t = train(40);
      std::vector<uint8_t> got(40 * 40 * 3), want(40 * 40 * 3);
      const DecodeResult r = dec.decode(e.bytes, t, seed, got.data(), got.size());
      const internal::CropPlan p = internal::plan_train_crop(w, h, t, seed);
      ASSERT_EQ(r.crop_x, p.x0);
      ASSERT_EQ(r.crop_w, p.w);
      ASSERT_EQ(r.flipped, p.flip);
      EXPECT_EQ(r.format, e.name[0] == 'p' ? ImageFormat::kPng : ImageFormat::kWebp);
      // Crop first (decode_region, itself checked above), then resize the crop whole.
      const int cw = static_cast<int>(p.w), ch = static_cast<int>(p.h);
      std::vector<uint8_t> crop(static_cast<size_t>(cw) * ch * 3);
      dec.decode_region(e.bytes, static_cast<int>(p.x0), static_cast<int>(p.y0), cw, ch,
                        crop.data(), crop.size());
      resizer.resize(crop.data(), static_cast<size_t>(cw) * 3, cw, ch, {0, p.w, 0, cw},
                     {0, p.h, 0, ch}, p.flip, want.data(), 40, 40, internal::ResizeKernel::kScalar);
      EXPECT_EQ(got, want) << e.name << " seed " << seed;
    }
    ImageTransform ev;
    ev.kind = ImageTransform::Kind::kEval;
    ev.size = 48;
    std::vector<uint8_t> got(48 * 48 * 3), want(48 * 48 * 3);
    dec.decode(e.bytes, ev, 0, got.data(), got.size());
    const internal::CropPlan p = internal::plan_eval_crop(w, h, ev);
    resizer.resize(full.data(), static_cast<size_t>(w) * 3, w, h, {p.x0, p.w, 0, w},
                   {p.y0, p.h, 0, h}, false, want.data(), 48, 48, internal::ResizeKernel::kScalar);
    EXPECT_EQ(got, want) << e.name << " eval";
  }
}

TEST(RasterTransforms, PngAndLosslessWebpOfTheSamePixelsGiveTheSameOutput) {
  const int w = 120, h = 96;
  const auto rgb = noisy_rgb(w, h, 13);
  const auto png = encode_png_rgb(rgb, w, h);
  const auto webp = encode_webp_rgb(rgb, w, h, true);
  ImageDecoder dec;
  for (uint64_t seed = 100; seed < 110; ++seed) {
    std::vector<uint8_t> a(56 * 56 * 3), b(56 * 56 * 3);
    const DecodeResult ra = dec.decode(png, train(56), seed, a.data(), a.size());
    const DecodeResult rb = dec.decode(webp, train(56), seed, b.data(), b.size());
    EXPECT_EQ(a, b) << seed;
    EXPECT_EQ(ra.geometry.x, rb.geometry.x);
    EXPECT_EQ(ra.geometry.flip, rb.geometry.flip);
  }
}

// ---- errors ----------------------------------------------------------------------------

TEST(RasterErrors, TruncatedAndCorruptPngAreDataLoss) {
  const int w = 64, h = 48;
  const auto png = encode_png_rgb(noisy_rgb(w, h, 17), w, h);
  ImageDecoder dec;
  std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3 + 64 * 64 * 3);
  for (size_t n : {size_t{8}, size_t{20}, size_t{33}, size_t{60}, png.size() / 2, png.size() - 16}) {
    std::vector<uint8_t> cut(png.begin(), png.begin() + n);
    std::string msg;
    EXPECT_EQ(error_code_of([&] { dec.decode(cut, none(), 0, out.data(), out.size()); }, &msg),
              ErrorCode::kDataLoss)
        << n;
    EXPECT_NE(msg.find("PNG"), std::string::npos) << msg;
  }
  auto bad = png;
  bad[png.size() / 2] ^= 0x5A;  // inside IDAT: its CRC no longer matches
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(bad, none(), 1, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("PNG"), std::string::npos) << msg;
  // The decoder is still usable after errors.
  EXPECT_EQ(decode_none(dec, png, w, h).size(), static_cast<size_t>(w) * h * 3);
}

TEST(RasterErrors, HugeDeclaredPngIsResourceExhaustedBeforeDecoding) {
  auto png = encode_png_rgb(noisy_rgb(16, 16, 1), 16, 16);
  // IHDR data at offset 16 (8 signature + 4 length + 4 type), CRC after its 13 bytes.
  put_be32(&png[16], 100000);
  put_be32(&png[20], 100000);
  put_be32(&png[29], crc32(&png[12], 17));
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(png, train(), 0, out.data(), out.size()); }, &msg),
            ErrorCode::kResourceExhausted);
  EXPECT_NE(msg.find("100000x100000"), std::string::npos) << msg;
  EXPECT_EQ(probe_image(png).width, 100000);
}

TEST(RasterErrors, TruncatedOrDamagedWebpIsDataLossAndLimitIsResourceExhausted) {
  const int w = 64, h = 48;
  const auto rgb = noisy_rgb(w, h, 19);
  ImageDecoder dec;
  std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
  for (bool lossless : {false, true}) {
    const auto webp = encode_webp_rgb(rgb, w, h, lossless);
    for (size_t n : {size_t{12}, size_t{20}, size_t{30}, webp.size() / 2, webp.size() - 1}) {
      std::vector<uint8_t> cut(webp.begin(), webp.begin() + n);
      std::string msg;
      EXPECT_EQ(error_code_of([&] { dec.decode(cut, none(), 0, out.data(), out.size()); }, &msg),
                ErrorCode::kDataLoss)
          << lossless << " " << n;
      EXPECT_NE(msg.find("WebP"), std::string::npos) << msg;
    }
    auto bad = webp;
    std::memcpy(&bad[12], "XXXX", 4);  // the VP8/VP8L chunk's tag
    EXPECT_EQ(error_code_of([&] { dec.decode(bad, none(), 0, out.data(), out.size()); }),
              ErrorCode::kDataLoss);
    ImageTransform t = train();
    t.max_pixels = w * h - 1;
    EXPECT_EQ(error_code_of([&] { dec.decode(webp, t, 0, out.data(), out.size()); }),
              ErrorCode::kResourceExhausted);
  }
  std::string msg;
  std::vector<uint8_t> riff = {'R', 'I', 'F', 'F', 4, 0, 0, 0, 'W', 'A', 'V', 'E'};
  EXPECT_EQ(error_code_of([&] { probe_image(riff); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("not a JPEG, PNG or WebP"), std::string::npos) << msg;
}

TEST(Follow, BadGeometryAndOutputAreInvalidArgument) {
  const auto png = encode_png_rgb(noisy_rgb(32, 32, 2), 32, 32);
  ImageDecoder dec;
  std::vector<uint8_t> out(64 * 64 * 3);
  const ImageGeometry good{32, 32, 4, 4, 16, 16, true, false, 8, 8};
  dec.decode_with(png, good, {}, out.data(), out.size());
  auto bad_geometry = [&](auto mutate) {
    ImageGeometry g = good;
    mutate(g);
    return error_code_of([&] { dec.decode_with(png, g, {}, out.data(), out.size()); });
  };
  EXPECT_EQ(bad_geometry([](ImageGeometry& g) { g.w = 0; }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad_geometry([](ImageGeometry& g) { g.x = 20; }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad_geometry([](ImageGeometry& g) { g.src_width = 0; }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad_geometry([](ImageGeometry& g) { g.out_height = 0; }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad_geometry([](ImageGeometry& g) { g.y = NAN; }), ErrorCode::kInvalidArgument);
  FollowOutput two;
  two.channels = 2;
  EXPECT_EQ(error_code_of([&] { dec.decode_with(png, good, two, out.data(), out.size()); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { dec.decode_with(png, good, {}, out.data(), 8 * 8 * 3 - 1); }),
            ErrorCode::kInvalidArgument);
  FollowOutput one{0, 0, 1, Interpolation::kNearest};
  const auto webp = encode_webp_rgb(noisy_rgb(32, 32, 2), 32, 32, true);
  EXPECT_EQ(error_code_of([&] { dec.decode_with(webp, good, one, out.data(), out.size()); }),
            ErrorCode::kInvalidArgument);
  const auto color_jpeg = testing::make_jpeg(32, 32, 3);
  EXPECT_EQ(error_code_of([&] { dec.decode_with(color_jpeg, good, one, out.data(), out.size()); }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
