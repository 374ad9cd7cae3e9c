// Tests of include/stoker/image.h: ROI decode exactness, the fused train/eval transforms
// against reference decodes, crop statistics, determinism, error kinds, colour spaces,
// progressive input, the baseline rewrite and pixel conversion.
#include "stoker/image.h"

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "decode/crop.h"
#include "decode/resize.h"
#include "stoker/error.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::encode_jpeg;
using testing::error_code_of;
using testing::make_rgb_image;

// ---- helpers ----------------------------------------------------------------------------

// make_rgb_image plus noise and a fine pattern, so files are ImageNet-sized
// (500x375 at quality 90, 4:2:0 ~ 85 KiB) rather than tiny smooth ones.
std::vector<uint8_t> textured_rgb(int w, int h, uint32_t seed) {
  auto rgb = make_rgb_image(w, h, seed);
  std::mt19937 rng(seed * 7919u + 1);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int n = static_cast<int>(rng() % 25) - 12;
      const int pattern = ((x / 3 + y / 5) % 2) ? 12 : -12;
      for (int c = 0; c < 3; ++c) {
        auto& p = rgb[(static_cast<size_t>(y) * w + x) * 3 + c];
        const int v = p + n + pattern + static_cast<int>(rng() % 9) - 4;
        p = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return rgb;
}

std::vector<uint8_t> textured_jpeg(int w, int h, uint32_t seed, int subsamp = 2,
                                   bool progressive = false, int quality = 90) {
  return encode_jpeg(textured_rgb(w, h, seed), w, h, quality, subsamp, progressive);
}

// Any TurboJPEG subsampling (TJSAMP_*), for the ones test_util does not offer.
std::vector<uint8_t> encode_tj(const std::vector<uint8_t>& rgb, int w, int h, int quality,
                               int tjsamp, bool progressive) {
  tjhandle t = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(t, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, tjsamp, quality,
                        progressive ? TJFLAG_PROGRESSIVE : 0),
            0);
  std::vector<uint8_t> j(out, out + size);
  tjFree(out);
  tjDestroy(t);
  return j;
}

struct Decoded {
  int w = 0, h = 0;
  std::vector<uint8_t> px;
};

// The reference: TurboJPEG full decode (ISLOW IDCT, fancy upsampling, as ImageDecoder).
Decoded tj_decode(const std::vector<uint8_t>& jpeg, int pf = TJPF_RGB) {
  tjhandle h = tjInitDecompress();
  Decoded d;
  int subsamp = 0, cs = 0;
  EXPECT_EQ(tjDecompressHeader3(h, jpeg.data(), jpeg.size(), &d.w, &d.h, &subsamp, &cs), 0);
  d.px.resize(static_cast<size_t>(d.w) * d.h * tjPixelSize[pf]);
  EXPECT_EQ(tjDecompress2(h, jpeg.data(), jpeg.size(), d.px.data(), d.w, 0, d.h, pf, 0), 0)
      << tjGetErrorStr2(h);
  tjDestroy(h);
  return d;
}

std::vector<uint8_t> crop_rgb(const Decoded& d, int x, int y, int w, int h) {
  std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
  for (int r = 0; r < h; ++r) {
    std::memcpy(&out[static_cast<size_t>(r) * w * 3],
                &d.px[(static_cast<size_t>(y + r) * d.w + x) * 3], static_cast<size_t>(w) * 3);
  }
  return out;
}

// A plain antialiased bilinear resize in double precision, written independently of
// src/decode/resize.cc (PIL's algorithm: triangle filter, support max(scale, 1)).
std::vector<double> ref_resize(const std::vector<uint8_t>& rgb, int w, int h, int ow, int oh) {
  auto weights = [](int in, int out, int i, int& lo, std::vector<double>& ws) {
    const double scale = static_cast<double>(in) / out;
    const double fs = std::max(scale, 1.0);
    const double center = (i + 0.5) * scale;
    lo = std::max(0, static_cast<int>(std::floor(center - fs + 0.5)));
    const int hi = std::min(in, static_cast<int>(std::floor(center + fs + 0.5)));
    ws.clear();
    double sum = 0;
    for (int k = lo; k < hi; ++k) {
      const double v = std::max(0.0, 1.0 - std::fabs((k - center + 0.5) / fs));
      ws.push_back(v);
      sum += v;
    }
    for (auto& v : ws) v /= sum;
  };
  std::vector<double> tmp(static_cast<size_t>(h) * ow * 3), out(static_cast<size_t>(oh) * ow * 3);
  std::vector<double> ws;
  for (int x = 0; x < ow; ++x) {
    int lo;
    weights(w, ow, x, lo, ws);
    for (int y = 0; y < h; ++y) {
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (size_t k = 0; k < ws.size(); ++k) s += ws[k] * rgb[(static_cast<size_t>(y) * w + lo + k) * 3 + c];
        tmp[(static_cast<size_t>(y) * ow + x) * 3 + c] = s;
      }
    }
  }
  for (int y = 0; y < oh; ++y) {
    int lo;
    weights(h, oh, y, lo, ws);
    for (int x = 0; x < ow * 3; ++x) {
      double s = 0;
      for (size_t k = 0; k < ws.size(); ++k) s += ws[k] * tmp[(static_cast<size_t>(lo) + k) * ow * 3 + x];
      out[static_cast<size_t>(y) * ow * 3 + x] = s;
    }
  }
  return out;
}

// Resize(short -> round(size/frac)) + CenterCrop(size), torchvision style, from `d`.
std::vector<double> ref_eval(const Decoded& d, int size, double frac) {
  const int s = static_cast<int>(std::nearbyint(size / frac));
  int nw, nh;
  if (d.w <= d.h) {
    nw = s;
    nh = static_cast<int>(static_cast<int64_t>(s) * d.h / d.w);
  } else {
    nh = s;
    nw = static_cast<int>(static_cast<int64_t>(s) * d.w / d.h);
  }
  auto full = ref_resize(d.px, d.w, d.h, nw, nh);
  const int left = static_cast<int>(std::nearbyint((nw - size) / 2.0));
  const int top = static_cast<int>(std::nearbyint((nh - size) / 2.0));
  std::vector<double> out(static_cast<size_t>(size) * size * 3);
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size * 3; ++x) {
      out[static_cast<size_t>(y) * size * 3 + x] =
          full[static_cast<size_t>(top + y) * nw * 3 + left * 3 + x];
    }
  }
  return out;
}

struct Diff {
  double mean = 0;
  double max = 0;
};
Diff diff(const std::vector<uint8_t>& a, const std::vector<double>& b) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    d.mean += e;
    d.max = std::max(d.max, e);
  }
  d.mean /= static_cast<double>(a.size());
  return d;
}

// Encodes `pixels` (`components` bytes a pixel, in `in_space`) with the libjpeg API, for
// what TurboJPEG's API cannot write; `configure` runs after jpeg_set_defaults.
std::vector<uint8_t> encode_with_libjpeg(const std::vector<uint8_t>& pixels, int w, int h, int components,
                                         J_COLOR_SPACE in_space,
                                         const std::function<void(jpeg_compress_struct&)>& configure) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = components;
  c.in_color_space = in_space;
  jpeg_set_defaults(&c);
  configure(c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[static_cast<size_t>(c.next_scanline) * w * components]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  free(buf);
  jpeg_destroy_compress(&c);
  return out;
}

// Encodes CMYK (4 bytes a pixel) with the libjpeg API; libjpeg writes an Adobe marker.
std::vector<uint8_t> encode_cmyk(const std::vector<uint8_t>& cmyk, int w, int h, bool ycck) {
  return encode_with_libjpeg(cmyk, w, h, 4, JCS_CMYK, [ycck](jpeg_compress_struct& c) {
    jpeg_set_colorspace(&c, ycck ? JCS_YCCK : JCS_CMYK);
    jpeg_set_quality(&c, 95, TRUE);
  });
}

ImageTransform train(int size = 224) {
  ImageTransform t;
  t.kind = ImageTransform::Kind::kTrain;
  t.size = size;
  return t;
}
ImageTransform eval(int size = 224) {
  ImageTransform t;
  t.kind = ImageTransform::Kind::kEval;
  t.size = size;
  return t;
}

// ---- ROI decode ---------------------------------------------------------------------------

struct RoiCase {
  const char* name;
  int tjsamp;  // TJSAMP_*
  bool progressive;
};

class RoiDecode : public ::testing::TestWithParam<RoiCase> {};

TEST_P(RoiDecode, RegionIsBitIdenticalToFullDecodeThenCrop) {
  const RoiCase rc = GetParam();
  const int W = 333, H = 257;  // not multiples of any iMCU size
  const auto jpeg = encode_tj(textured_rgb(W, H, 7), W, H, 88, rc.tjsamp, rc.progressive);
  const Decoded full = tj_decode(jpeg);
  ImageDecoder dec;
  std::vector<std::array<int, 4>> rects = {
      {0, 0, W, H}, {1, 1, W - 2, H - 2}, {16, 16, 32, 32}, {17, 9, 100, 50},
      {15, 7, 1, 1},  {W - 1, H - 1, 1, 1}, {W - 40, 100, 40, H - 100}, {0, H - 3, W, 3},
      {8, 0, 16, 1},  {31, 33, 2, 200}};
  std::mt19937 rng(42);
  for (int i = 0; i < 30; ++i) {
    const int w = 1 + static_cast<int>(rng() % W), h = 1 + static_cast<int>(rng() % H);
    rects.push_back({static_cast<int>(rng() % (W - w + 1)), static_cast<int>(rng() % (H - h + 1)), w, h});
  }
  for (const auto& [x, y, w, h] : rects) {
    std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
    const DecodeResult r = dec.decode_region(jpeg, x, y, w, h, out.data(), out.size());
    EXPECT_EQ(r.src_width, W);
    EXPECT_EQ(r.src_height, H);
    ASSERT_EQ(out, crop_rgb(full, x, y, w, h)) << rc.name << " rect " << w << "x" << h << "+" << x << "+" << y;
  }
}

INSTANTIATE_TEST_SUITE_P(Subsampling, RoiDecode,
                         ::testing::Values(RoiCase{"444", TJSAMP_444, false},
                                           RoiCase{"422", TJSAMP_422, false},
                                           RoiCase{"420", TJSAMP_420, false},
                                           RoiCase{"gray", TJSAMP_GRAY, false},
                                           RoiCase{"440", TJSAMP_440, false},
                                           RoiCase{"411", TJSAMP_411, false},
                                           RoiCase{"420_progressive", TJSAMP_420, true},
                                           RoiCase{"422_progressive", TJSAMP_422, true},
                                           RoiCase{"444_progressive", TJSAMP_444, true},
                                           RoiCase{"gray_progressive", TJSAMP_GRAY, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ImageDecode, RegionOutsideImageIsInvalidArgument) {
  const auto jpeg = textured_jpeg(64, 48, 1);
  ImageDecoder dec;
  std::vector<uint8_t> out(64 * 48 * 3);
  EXPECT_EQ(error_code_of([&] { dec.decode_region(jpeg, 60, 0, 8, 8, out.data(), out.size()); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { dec.decode_region(jpeg, 0, 0, 0, 8, out.data(), out.size()); }),
            ErrorCode::kInvalidArgument);
}

// ---- the fused train path ------------------------------------------------------------------

// At full resolution the fused path (crop-aware ROI decode + resize) must give the same
// bytes as decoding everything, cropping the drawn rectangle and resizing it.
TEST(ImageDecode, TrainEqualsFullDecodeCropResize) {
  for (int subsamp : {0, 1, 2, 3}) {
    const auto jpeg = textured_jpeg(500, 375, 3, subsamp);
    const Decoded full = tj_decode(jpeg);
    ImageTransform t = train();
    t.allow_dct_scaling = false;
    ImageDecoder dec;
    internal::Resizer ref;
    std::vector<uint8_t> out(224 * 224 * 3), want(out.size());
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const DecodeResult r = dec.decode(jpeg, t, seed, out.data(), out.size());
      ASSERT_EQ(r.scale_denom, 1);
      const auto crop = crop_rgb(full, r.crop_x, r.crop_y, r.crop_w, r.crop_h);
      internal::ResizeAxis ax{0, static_cast<double>(r.crop_w), 0, r.crop_w};
      internal::ResizeAxis ay{0, static_cast<double>(r.crop_h), 0, r.crop_h};
      ref.resize(crop.data(), static_cast<size_t>(r.crop_w) * 3, r.crop_w, r.crop_h, ax, ay,
                 r.flipped, want.data(), 224, 224, internal::ResizeKernel::kScalar);
      ASSERT_EQ(out, want) << "subsamp " << subsamp << " seed " << seed;
    }
  }
}

TEST(ImageDecode, CropMatchesPlanAndFlipMirrorsOutput) {
  const auto jpeg = textured_jpeg(500, 375, 5);
  ImageDecoder dec;
  ImageTransform no_flip = train(), flip = train();
  no_flip.flip_prob = 0;
  flip.flip_prob = 1;
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
  for (uint64_t seed = 100; seed < 110; ++seed) {
    const DecodeResult ra = dec.decode(jpeg, no_flip, seed, a.data(), a.size());
    const DecodeResult rb = dec.decode(jpeg, flip, seed, b.data(), b.size());
    const internal::CropPlan p = internal::plan_train_crop(500, 375, flip, seed);
    EXPECT_EQ(rb.crop_x, p.x0);
    EXPECT_EQ(rb.crop_y, p.y0);
    EXPECT_EQ(rb.crop_w, p.w);
    EXPECT_EQ(rb.crop_h, p.h);
    EXPECT_FALSE(ra.flipped);
    EXPECT_TRUE(rb.flipped);
    ASSERT_EQ(ra.crop_x, rb.crop_x);  // the flip is drawn after the crop
    for (int y = 0; y < 224; ++y) {
      for (int x = 0; x < 224; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(a[(y * 224 + x) * 3 + c], b[(y * 224 + 223 - x) * 3 + c]) << seed;
        }
      }
    }
  }
}

TEST(ImageDecode, TrainCropGeometryStatistics) {
  const int W = 500, H = 375, N = 4000;
  const ImageTransform t = train();
  int flips = 0, wide = 0;
  double min_scale = 1, max_scale = 0;
  for (uint64_t seed = 0; seed < N; ++seed) {
    const internal::CropPlan p = internal::plan_train_crop(W, H, t, seed);
    ASSERT_GE(p.x0, 0);
    ASSERT_GE(p.y0, 0);
    ASSERT_LE(p.x0 + p.w, W);
    ASSERT_LE(p.y0 + p.h, H);
    const double w = p.w, h = p.h;
    // w, h are rounded from sqrt(A r), sqrt(A / r): allow half a pixel each way.
    ASSERT_GE((w + 0.5) / (h - 0.5), 3.0 / 4) << seed;
    ASSERT_LE((w - 0.5) / (h + 0.5), 4.0 / 3) << seed;
    const double scale = w * h / (W * H);
    ASSERT_GE((w + 0.5) * (h + 0.5) / (W * H), 0.08) << seed;
    ASSERT_LE((w - 0.5) * (h - 0.5) / (W * H), 1.0) << seed;
    min_scale = std::min(min_scale, scale);
    max_scale = std::max(max_scale, scale);
    flips += p.flip;
    wide += w > h;
  }
  // Binomial(4000, 0.5): sd 31.6; 5 sd bound.
  EXPECT_NEAR(flips, N / 2, 160);
  // log-uniform ratio in [3/4, 4/3] is symmetric about 1: about half wider than tall
  // (a bit more since the fit test favours wide crops in a landscape image).
  EXPECT_GT(wide, N * 0.40);
  EXPECT_LT(wide, N * 0.70);
  EXPECT_LT(min_scale, 0.09);
  EXPECT_GT(max_scale, 0.97);
}

TEST(ImageDecode, TrainFallsBackToCenterCropWhenNoAttemptFits) {
  ImageTransform t = train();
  t.scale_min = t.scale_max = 1.0f;  // whole area with ratio in [3/4, 4/3]
  // A 1000x100 image: no 10-attempt crop fits; fallback keeps the height, width 4/3 h.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const internal::CropPlan p = internal::plan_train_crop(1000, 100, t, seed);
    EXPECT_EQ(p.h, 100);
    EXPECT_EQ(p.w, 133);
    EXPECT_EQ(p.x0, (1000 - 133) / 2);
    EXPECT_EQ(p.y0, 0);
  }
}

TEST(ImageDecode, SameSeedSameBytesAnyThreadDifferentSeedsDiffer) {
  const auto jpeg = textured_jpeg(500, 375, 9);
  const ImageTransform t = train();
  std::vector<std::vector<uint8_t>> outs(4, std::vector<uint8_t>(224 * 224 * 3));
  {
    ImageDecoder dec;
    dec.decode(jpeg, t, 1234, outs[0].data(), outs[0].size());
    dec.decode(jpeg, t, 99, outs[2].data(), outs[2].size());  // state left from another draw
    dec.decode(jpeg, t, 1234, outs[1].data(), outs[1].size());
  }
  std::thread th([&] {
    ImageDecoder dec;
    dec.decode(jpeg, t, 1234, outs[3].data(), outs[3].size());
  });
  th.join();
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[3]);
  ImageDecoder dec;
  std::vector<uint8_t> other(outs[0].size());
  for (uint64_t seed : {1235ull, 1ull, 0xFFFFFFFFFFFFull}) {
    dec.decode(jpeg, t, seed, other.data(), other.size());
    EXPECT_NE(other, outs[0]) << seed;
  }
}

// ---- eval ---------------------------------------------------------------------------------

TEST(ImageDecode, EvalMatchesReferenceResizeAndCenterCrop) {
  struct Case { int w, h, size; };
  for (const Case c : {Case{500, 375, 224}, Case{375, 500, 224}, Case{300, 300, 224},
                       Case{640, 427, 224}, Case{333, 500, 160}, Case{200, 150, 224}}) {
    const auto jpeg = textured_jpeg(c.w, c.h, 17);
    const Decoded full = tj_decode(jpeg);
    ImageTransform t = eval(c.size);
    t.allow_dct_scaling = false;
    ImageDecoder dec;
    std::vector<uint8_t> out(static_cast<size_t>(c.size) * c.size * 3);
    const DecodeResult r = dec.decode(jpeg, t, 0, out.data(), out.size());
    EXPECT_EQ(r.scale_denom, 1);
    EXPECT_FALSE(r.flipped);
    const Diff d = diff(out, ref_eval(full, c.size, 0.875));
    EXPECT_LT(d.mean, 0.6) << c.w << "x" << c.h;
    EXPECT_LE(d.max, 1.5) << c.w << "x" << c.h;
  }
}

TEST(ImageDecode, DctScalingOnlyWhenScaledCropStaysLargeEnough) {
  const auto jpeg = textured_jpeg(1600, 1200, 19);
  const Decoded full = tj_decode(jpeg);
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  // Eval window is 1200 * 224/256 = 1050 px: 1050/4 = 262 >= 224, so 1/4.
  DecodeResult r = dec.decode(jpeg, eval(), 0, out.data(), out.size());
  EXPECT_EQ(r.scale_denom, 4);
  const Diff d = diff(out, ref_eval(full, 224, 0.875));
  EXPECT_LT(d.mean, 2.5);  // a different low-pass than the exact resize, but the same picture
  ImageTransform t = eval();
  t.allow_dct_scaling = false;
  r = dec.decode(jpeg, t, 0, out.data(), out.size());
  EXPECT_EQ(r.scale_denom, 1);
  // Train: the denominator is the largest of 1, 2, 4 keeping both sides >= size.
  for (uint64_t seed = 0; seed < 60; ++seed) {
    r = dec.decode(jpeg, train(), seed, out.data(), out.size());
    const int expect = (r.crop_w / 4 >= 224 && r.crop_h / 4 >= 224)   ? 4
                       : (r.crop_w / 2 >= 224 && r.crop_h / 2 >= 224) ? 2
                                                                      : 1;
    ASSERT_EQ(r.scale_denom, expect) << seed;
  }
  // 500x375: no crop is twice 224 in both sides.
  const auto small = textured_jpeg(500, 375, 19);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    EXPECT_EQ(dec.decode(small, train(), seed, out.data(), out.size()).scale_denom, 1);
  }
}

TEST(ImageDecode, NoneDecodesFullImageAndNeedsRoom) {
  const auto jpeg = textured_jpeg(123, 77, 23);
  const Decoded full = tj_decode(jpeg);
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kNone;
  std::vector<uint8_t> out(123 * 77 * 3);
  const DecodeResult r = dec.decode(jpeg, t, 0, out.data(), out.size());
  EXPECT_EQ(r.out_width, 123);
  EXPECT_EQ(r.out_height, 77);
  EXPECT_EQ(out, full.px);
  EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, t, 0, out.data(), out.size() - 1); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, train(), 0, out.data(), 224 * 224 * 3 - 1); }),
            ErrorCode::kInvalidArgument);
}

TEST(ImageDecode, TinyImagesDecodeToEveryTransform) {
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  for (auto [w, h] : {std::pair{1, 1}, std::pair{2, 3}, std::pair{17, 1}, std::pair{1, 40}}) {
    const auto rgb = textured_rgb(w, h, 59);
    const auto jpeg = encode_tj(rgb, w, h, 95, TJSAMP_420, false);
    const Decoded full = tj_decode(jpeg);
    for (const auto& t : {train(), eval(), train(5)}) {
      const DecodeResult r = dec.decode(jpeg, t, 1, out.data(), out.size());
      EXPECT_EQ(r.out_width, t.size);
      if (w == 1 && h == 1) {  // one pixel scaled up stays that pixel
        for (int i = 0; i < t.size * t.size; ++i) {
          ASSERT_EQ(out[3 * i], full.px[0]);
          ASSERT_EQ(out[3 * i + 1], full.px[1]);
          ASSERT_EQ(out[3 * i + 2], full.px[2]);
        }
      }
    }
  }
}

TEST(ImageDecode, BadTransformIsInvalidArgument) {
  const auto jpeg = textured_jpeg(64, 64, 1);
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  std::vector<ImageTransform> bad(6, train());
  bad[0].size = 0;
  bad[1].scale_min = 0;
  bad[2].scale_min = 0.9f, bad[2].scale_max = 0.5f;
  bad[3].ratio_min = 2, bad[3].ratio_max = 1;
  bad[4].flip_prob = 1.5f;
  bad[5] = eval();
  bad[5].eval_crop_fraction = 1.5f;
  for (const auto& t : bad) {
    EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, t, 0, out.data(), out.size()); }),
              ErrorCode::kInvalidArgument);
  }
}

TEST(ImageDecode, SimdAndScalarDecodersAgree) {
  const auto jpeg = textured_jpeg(500, 375, 13);
  ImageDecoder simd, scalar(ImageDecoderOptions{.allow_simd = false});
  EXPECT_FALSE(scalar.uses_simd());
  EXPECT_EQ(simd.uses_simd(), internal::best_resize_kernel() != internal::ResizeKernel::kScalar);
  std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
  for (uint64_t seed = 0; seed < 20; ++seed) {
    simd.decode(jpeg, train(), seed, a.data(), a.size());
    scalar.decode(jpeg, train(), seed, b.data(), b.size());
    ASSERT_EQ(a, b) << seed;
  }
  simd.decode(jpeg, eval(), 0, a.data(), a.size());
  scalar.decode(jpeg, eval(), 0, b.data(), b.size());
  EXPECT_EQ(a, b);
}

// ---- resize kernels -----------------------------------------------------------------------

// The SIMD kernel of this machine (AVX2 on x86-64, NEON on aarch64) against the scalar
// one: random crops and sizes (tap counts 4 and 8 apart, pixels whose loads would leave
// the row, flips), then narrow sources where most pixels sit near the row's end.
TEST(ImageResize, SimdAndScalarGiveIdenticalBytes) {
  const auto simd = internal::best_resize_kernel();
  if (simd == internal::ResizeKernel::kScalar) GTEST_SKIP() << "no SIMD resize kernel on this CPU";
  std::mt19937 rng(7);
  internal::Resizer a, b;
  auto check = [&](int W, int H, int n, uint32_t seed) {
    auto src = textured_rgb(W, H, seed);
    for (int i = 0; i < n; ++i) {
      const int dw = 1 + static_cast<int>(rng() % 300), dh = 1 + static_cast<int>(rng() % 300);
      const int cw = 1 + static_cast<int>(rng() % W), ch = 1 + static_cast<int>(rng() % H);
      const int cx = static_cast<int>(rng() % (W - cw + 1)), cy = static_cast<int>(rng() % (H - ch + 1));
      const bool flip = rng() % 2;
      internal::ResizeAxis ax{cx + 0.25, cw - 0.25, cx, cx + cw}, ay{static_cast<double>(cy), static_cast<double>(ch), cy, cy + ch};
      std::vector<uint8_t> o1(static_cast<size_t>(dw) * dh * 3), o2(o1.size());
      a.resize(src.data(), W * 3, W, H, ax, ay, flip, o1.data(), dw, dh, simd);
      b.resize(src.data(), W * 3, W, H, ax, ay, flip, o2.data(), dw, dh, internal::ResizeKernel::kScalar);
      ASSERT_EQ(o1, o2) << W << "x" << H << ": " << dw << "x" << dh << " from " << cw << "x" << ch << "+" << cx
                        << "+" << cy;
    }
  };
  check(301, 211, 60, 11);
  check(37, 29, 30, 12);
}

// Each platform's SIMD kernel is the one in use where it exists, so the test above runs it.
TEST(ImageResize, BestKernelIsThePlatformsSimdKernel) {
#if defined(__aarch64__)
  EXPECT_EQ(internal::best_resize_kernel(), internal::ResizeKernel::kNeon);
#elif defined(__x86_64__)
  EXPECT_EQ(internal::best_resize_kernel() == internal::ResizeKernel::kAvx2, internal::cpu_has_avx2());
#else
  GTEST_SKIP() << "no SIMD resize kernel for this architecture";
#endif
  // A kernel the platform lacks runs scalar.
  EXPECT_TRUE(internal::resize_kernel_available(internal::ResizeKernel::kScalar));
}

TEST(ImageResize, ConstantImageStaysConstant) {
  std::vector<uint8_t> src(97 * 53 * 3, 173);
  internal::Resizer r;
  for (auto k : {internal::ResizeKernel::kScalar, internal::best_resize_kernel()}) {
    for (int n : {7, 53, 224}) {
      std::vector<uint8_t> out(static_cast<size_t>(n) * n * 3);
      r.resize(src.data(), 97 * 3, 97, 53, {0, 97, 0, 97}, {0, 53, 0, 53}, true, out.data(), n, n, k);
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 173; })) << n;
    }
  }
}

// ---- errors on untrusted input ------------------------------------------------------------

size_t find_marker(const std::vector<uint8_t>& j, uint8_t m) {
  for (size_t i = 0; i + 1 < j.size(); ++i) {
    if (j[i] == 0xFF && j[i + 1] == m) return i;
  }
  return std::string::npos;
}

TEST(ImageErrors, CorruptEntropyDataIsDataLoss) {
  auto jpeg = textured_jpeg(500, 375, 29);
  const size_t sos = find_marker(jpeg, 0xDA);
  ASSERT_NE(sos, std::string::npos);
  const auto noise = testing::random_bytes(4000, 5);
  std::copy(noise.begin(), noise.end(), jpeg.begin() + sos + 2000);
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kNone;
  std::vector<uint8_t> out(500 * 375 * 3);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, t, 0, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("corrupt JPEG"), std::string::npos) << msg;
  // The decoder is reusable after an error.
  const auto good = textured_jpeg(50, 40, 1);
  EXPECT_NO_THROW(dec.decode(good, t, 0, out.data(), out.size()));
}

TEST(ImageErrors, TruncatedFileIsDataLoss) {
  auto jpeg = textured_jpeg(500, 375, 31);
  jpeg.resize(jpeg.size() * 6 / 10);
  ImageDecoder dec;
  std::vector<uint8_t> out(500 * 375 * 3);
  ImageTransform none;
  none.kind = ImageTransform::Kind::kNone;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, none, 0, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("Premature end of JPEG file"), std::string::npos) << msg;
  // The center crop needs rows below 60 %: also caught.
  EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, eval(), 0, out.data(), out.size()); }),
            ErrorCode::kDataLoss);
  // Progressive: every scan is read up front, so any truncation is caught.
  auto prog = textured_jpeg(500, 375, 31, 2, true);
  prog.resize(prog.size() - 100);
  EXPECT_EQ(error_code_of([&] { dec.decode(prog, train(), 0, out.data(), out.size()); }),
            ErrorCode::kDataLoss);
}

TEST(ImageErrors, NotAJpegAndEmptyAreDataLoss) {
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  auto junk = testing::random_bytes(1000, 3);
  junk[0] = 0x89;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(junk, train(), 0, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("not a JPEG"), std::string::npos) << msg;
  EXPECT_EQ(error_code_of([&] { dec.decode({}, train(), 0, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  junk[0] = 0xFF;
  junk[1] = 0xD8;  // SOI then garbage
  EXPECT_EQ(error_code_of([&] { dec.decode(junk, train(), 0, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_EQ(error_code_of([&] { probe_jpeg(junk); }), ErrorCode::kDataLoss);
  EXPECT_EQ(error_code_of([&] { jpeg_to_baseline(junk); }), ErrorCode::kDataLoss);
}

TEST(ImageErrors, HugeDeclaredDimensionsAreResourceExhausted) {
  auto jpeg = textured_jpeg(64, 48, 37);
  const size_t sof = find_marker(jpeg, 0xC0);
  ASSERT_NE(sof, std::string::npos);
  // SOF0: FF C0, length(2), precision(1), height(2), width(2).
  jpeg[sof + 5] = 60000 >> 8;
  jpeg[sof + 6] = 60000 & 0xFF;
  jpeg[sof + 7] = 60000 >> 8;
  jpeg[sof + 8] = 60000 & 0xFF;
  EXPECT_EQ(probe_jpeg(jpeg).width, 60000);
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(jpeg, train(), 0, out.data(), out.size()); }, &msg),
            ErrorCode::kResourceExhausted);
  EXPECT_NE(msg.find("60000x60000"), std::string::npos) << msg;
  EXPECT_EQ(error_code_of([&] { jpeg_to_baseline(jpeg); }), ErrorCode::kResourceExhausted);
  // The limit is the caller's.
  const auto ok = textured_jpeg(64, 48, 37);
  ImageTransform t = train();
  t.max_pixels = 64 * 48 - 1;
  EXPECT_EQ(error_code_of([&] { dec.decode(ok, t, 0, out.data(), out.size()); }),
            ErrorCode::kResourceExhausted);
  t.max_pixels = 64 * 48;
  EXPECT_NO_THROW(dec.decode(ok, t, 0, out.data(), out.size()));
}

// A valid progressive gray JPEG with 1 + 63 * (al + 1) scans: one DC scan, then each AC
// coefficient alone, sent at point transform `al` and refined bit by bit.
std::vector<uint8_t> encode_many_scans(int al) {
  const int W = 16, H = 16;
  std::vector<uint8_t> gray(W * H);
  for (int i = 0; i < W * H; ++i) gray[i] = static_cast<uint8_t>(i * 37);
  std::vector<jpeg_scan_info> scans;
  scans.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
  for (int k = 1; k < 64; ++k) {
    scans.push_back({1, {0, 0, 0, 0}, k, k, 0, al});
    for (int a = al; a > 0; --a) scans.push_back({1, {0, 0, 0, 0}, k, k, a, a - 1});
  }
  return encode_with_libjpeg(gray, W, H, 1, JCS_GRAYSCALE, [&scans](jpeg_compress_struct& c) {
    c.scan_info = scans.data();
    c.num_scans = static_cast<int>(scans.size());
  });
}

TEST(ImageErrors, ProgressiveWithMoreThan500ScansIsDataLoss) {
  ImageDecoder dec;
  std::vector<uint8_t> out(224 * 224 * 3);
  const auto ok = encode_many_scans(5);  // 379 scans
  ASSERT_TRUE(jpeg_is_progressive(ok));
  EXPECT_NO_THROW(dec.decode(ok, train(), 0, out.data(), out.size()));
  const auto bomb = encode_many_scans(8);  // 568 scans
  std::string msg;
  EXPECT_EQ(error_code_of([&] { dec.decode(bomb, train(), 0, out.data(), out.size()); }, &msg),
            ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("more than 500 scans"), std::string::npos) << msg;
  EXPECT_EQ(error_code_of([&] { jpeg_to_baseline(bomb); }), ErrorCode::kDataLoss);
}

// ---- colour spaces and progressive --------------------------------------------------------

TEST(ImageColor, GrayscaleIsReplicatedToRgb) {
  const auto jpeg = textured_jpeg(150, 100, 41, /*subsamp=*/3);
  EXPECT_EQ(probe_jpeg(jpeg).components, 1);
  const Decoded gray = tj_decode(jpeg, TJPF_GRAY);
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kNone;
  std::vector<uint8_t> out(150 * 100 * 3);
  dec.decode(jpeg, t, 0, out.data(), out.size());
  for (size_t i = 0; i < gray.px.size(); ++i) {
    ASSERT_EQ(out[3 * i], gray.px[i]);
    ASSERT_EQ(out[3 * i + 1], gray.px[i]);
    ASSERT_EQ(out[3 * i + 2], gray.px[i]);
  }
  std::vector<uint8_t> small(224 * 224 * 3);
  dec.decode(jpeg, train(), 3, small.data(), small.size());
  for (size_t i = 0; i < small.size(); i += 3) {
    ASSERT_EQ(small[i], small[i + 1]);
    ASSERT_EQ(small[i], small[i + 2]);
  }
}

TEST(ImageColor, AdobeCmykAndYcckAreConvertedToRgb) {
  const int W = 120, H = 90;
  const auto rgb = textured_rgb(W, H, 43);
  // Adobe's inverted convention: stored C = R, M = G, Y = B, K = 255 means "no ink beyond
  // what C/M/Y say"; R = C * K / 255.
  std::vector<uint8_t> cmyk(static_cast<size_t>(W) * H * 4);
  for (size_t i = 0; i < static_cast<size_t>(W) * H; ++i) {
    cmyk[4 * i] = rgb[3 * i];
    cmyk[4 * i + 1] = rgb[3 * i + 1];
    cmyk[4 * i + 2] = rgb[3 * i + 2];
    cmyk[4 * i + 3] = static_cast<uint8_t>(200 + i % 56);
  }
  for (bool ycck : {false, true}) {
    const auto jpeg = encode_cmyk(cmyk, W, H, ycck);
    EXPECT_EQ(probe_jpeg(jpeg).components, 4);
    const Decoded ref = tj_decode(jpeg, TJPF_CMYK);
    ImageDecoder dec;
    ImageTransform t;
    t.kind = ImageTransform::Kind::kNone;
    std::vector<uint8_t> out(static_cast<size_t>(W) * H * 3);
    dec.decode(jpeg, t, 0, out.data(), out.size());
    for (size_t i = 0; i < static_cast<size_t>(W) * H; ++i) {
      const int k = ref.px[4 * i + 3];
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(out[3 * i + c], (ref.px[4 * i + c] * k + 127) / 255) << "ycck " << ycck << " px " << i;
      }
    }
    // And the picture is the RGB we meant, up to JPEG loss.
    double err = 0;
    for (size_t i = 0; i < static_cast<size_t>(W) * H; ++i) {
      for (int c = 0; c < 3; ++c) err += std::abs(out[3 * i + c] - rgb[3 * i + c] * cmyk[4 * i + 3] / 255.0);
    }
    EXPECT_LT(err / (W * H * 3), 6.0);
    // ROI + resize runs on CMYK too.
    std::vector<uint8_t> small(64 * 64 * 3);
    EXPECT_NO_THROW(dec.decode(jpeg, train(64), 1, small.data(), small.size()));
  }
}

TEST(ImageColor, ProgressiveDecodesLikeBaseline) {
  // Same encoder, same quantised coefficients: identical pixels, also through ROI.
  for (int subsamp : {0, 2}) {
    const auto rgb = textured_rgb(400, 300, 47);
    const auto base = encode_jpeg(rgb, 400, 300, 90, subsamp, false);
    const auto prog = encode_jpeg(rgb, 400, 300, 90, subsamp, true);
    ASSERT_TRUE(jpeg_is_progressive(prog));
    ASSERT_FALSE(jpeg_is_progressive(base));
    ASSERT_EQ(tj_decode(base).px, tj_decode(prog).px);
    ImageDecoder dec;
    std::vector<uint8_t> a(224 * 224 * 3), b(a.size());
    for (uint64_t seed = 0; seed < 10; ++seed) {
      dec.decode(base, train(), seed, a.data(), a.size());
      dec.decode(prog, train(), seed, b.data(), b.size());
      ASSERT_EQ(a, b) << seed;
    }
  }
}

TEST(ImageBaseline, RewriteIsLosslessAndSequential) {
  for (int subsamp : {0, 1, 2, 3}) {
    const auto prog = textured_jpeg(333, 222, 53, subsamp, true);
    ASSERT_TRUE(jpeg_is_progressive(prog));
    const auto base = jpeg_to_baseline(prog);
    EXPECT_FALSE(jpeg_is_progressive(base));
    EXPECT_EQ(base[0], 0xFF);
    EXPECT_EQ(base[1], 0xD8);
    const JpegInfo a = probe_jpeg(prog), b = probe_jpeg(base);
    EXPECT_EQ(a.width, b.width);
    EXPECT_EQ(a.height, b.height);
    EXPECT_EQ(a.components, b.components);
    EXPECT_EQ(tj_decode(prog).px, tj_decode(base).px) << subsamp;
    // Baseline in, baseline out, same pixels.
    const auto again = jpeg_to_baseline(base);
    EXPECT_EQ(tj_decode(again).px, tj_decode(base).px);
  }
  // CMYK keeps its Adobe convention (one Adobe marker, same pixels).
  std::vector<uint8_t> cmyk(64 * 32 * 4);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>(i * 7);
  const auto j = encode_cmyk(cmyk, 64, 32, false);
  const auto b = jpeg_to_baseline(j);
  EXPECT_EQ(tj_decode(j, TJPF_CMYK).px, tj_decode(b, TJPF_CMYK).px);
  const std::string bs(b.begin(), b.end());
  const size_t adobe = bs.find("Adobe");
  ASSERT_NE(adobe, std::string::npos);
  EXPECT_EQ(bs.find("Adobe", adobe + 1), std::string::npos) << "Adobe marker duplicated";
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kNone;
  std::vector<uint8_t> o1(64 * 32 * 3), o2(o1.size());
  dec.decode(j, t, 0, o1.data(), o1.size());
  dec.decode(b, t, 0, o2.data(), o2.size());
  EXPECT_EQ(o1, o2);
}

TEST(ImageProbe, ReportsHeaderFacts) {
  const JpegInfo i = probe_jpeg(textured_jpeg(321, 123, 1, 1, true));
  EXPECT_EQ(i.width, 321);
  EXPECT_EQ(i.height, 123);
  EXPECT_EQ(i.components, 3);
  EXPECT_TRUE(i.progressive);
  EXPECT_EQ(error_code_of([] { probe_jpeg({}); }), ErrorCode::kDataLoss);
}

// ---- convert_pixels -----------------------------------------------------------------------

TEST(ImageConvert, MatchesHandComputation) {
  // 1 x 2 image: pixel 0 = (0, 51, 255), pixel 1 = (255, 102, 0).
  const uint8_t hwc[6] = {0, 51, 255, 255, 102, 0};
  const float mean[3] = {0.5f, 0.0f, 0.0f}, std[3] = {0.5f, 1.0f, 2.0f};
  EXPECT_EQ(pixel_format_bytes(1, 2, PixelFormat::kF32CHW), 24u);
  EXPECT_EQ(pixel_format_bytes(1, 2, PixelFormat::kF16HWC), 12u);

  uint8_t chw8[6];
  convert_pixels(hwc, 1, 2, PixelFormat::kU8CHW, nullptr, nullptr, chw8);
  const uint8_t want8[6] = {0, 255, 51, 102, 255, 0};
  EXPECT_EQ(0, std::memcmp(chw8, want8, 6));

  float f[6];
  convert_pixels(hwc, 1, 2, PixelFormat::kF32CHW, mean, std, f);
  // R: (0 - .5)/.5 = -1, (1 - .5)/.5 = 1; G: 0.2, 0.4; B: 1/2 = 0.5, 0.
  const float want_chw[6] = {-1.f, 1.f, 0.2f, 0.4f, 0.5f, 0.f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(f[i], want_chw[i], 1e-6) << i;
  convert_pixels(hwc, 1, 2, PixelFormat::kF32HWC, mean, std, f);
  const float want_hwc[6] = {-1.f, 0.2f, 0.5f, 1.f, 0.4f, 0.f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(f[i], want_hwc[i], 1e-6) << i;

  uint16_t h[6];
  convert_pixels(hwc, 1, 2, PixelFormat::kF16CHW, mean, std, h);
  // binary16: -1 = 0xBC00, 1 = 0x3C00, 0.2 ~ 0x3266, 0.4 ~ 0x3666, 0.5 = 0x3800, 0 = 0.
  const uint16_t want_h[6] = {0xBC00, 0x3C00, 0x3266, 0x3666, 0x3800, 0x0000};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h[i], want_h[i]) << i;
  convert_pixels(hwc, 1, 2, PixelFormat::kF16HWC, mean, std, h);
  const uint16_t want_hh[6] = {0xBC00, 0x3266, 0x3800, 0x3C00, 0x3666, 0x0000};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h[i], want_hh[i]) << i;

  uint8_t copy[6];
  convert_pixels(hwc, 1, 2, PixelFormat::kU8HWC, nullptr, nullptr, copy);
  EXPECT_EQ(0, std::memcmp(copy, hwc, 6));
}

TEST(ImageConvert, HalfRoundsToNearestEven) {
  // ImageNet normalisation of every byte value, checked against a float->half written
  // here via frexp (value exactly representable after rounding to 11 significant bits).
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  std::vector<uint8_t> hwc(256 * 3);
  for (int v = 0; v < 256; ++v) hwc[3 * v] = hwc[3 * v + 1] = hwc[3 * v + 2] = static_cast<uint8_t>(v);
  std::vector<uint16_t> h(256 * 3);
  std::vector<float> f(256 * 3);
  convert_pixels(hwc.data(), 1, 256, PixelFormat::kF16HWC, mean, std, h.data());
  convert_pixels(hwc.data(), 1, 256, PixelFormat::kF32HWC, mean, std, f.data());
  for (size_t i = 0; i < h.size(); ++i) {
    // decode the half
    const int sign = h[i] >> 15, exp = (h[i] >> 10) & 31, mant = h[i] & 1023;
    ASSERT_GT(exp, 0);  // normal numbers only in this range
    const double hv = (sign ? -1 : 1) * std::ldexp(1.0 + mant / 1024.0, exp - 15);
    const double ulp = std::ldexp(1.0, exp - 15 - 10);
    ASSERT_LE(std::fabs(hv - f[i]), ulp / 2 + 1e-12) << i;
  }
}

}  // namespace
}  // namespace stoker
