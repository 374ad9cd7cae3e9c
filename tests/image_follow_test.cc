// Follow (ImageDecoder::decode_with): a segmentation mask decoded with its image's
// geometry must show, pixel for pixel, the class of the image content it lies on.
//
// The image is a grid of flat colour blocks; the mask stores each block's class id (a
// palette PNG: its indices, not its colours, must come out). Wherever the mask says L in
// a whole neighbourhood (so the image's resize filter read only block L's pixels), the
// decoded image must show L's colour. The same check with the mask given its own random
// draw must find misaligned pixels, which shows the check can fail (so do a mask
// resampler that ignores the flip or samples a little off the filter's centres).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <string>

#include "stoker/image.h"
#include "benchlib/image_encode.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::encode_png;
using testing::PngColor;

constexpr int kClasses = 17;

// Block (bx, by) has class 1 + (bx + 5 * by) % 17: neighbours always differ.
int block_class(int bx, int by) { return 1 + (bx + 5 * by) % kClasses; }

std::array<uint8_t, 3> class_colour(int c) {
  return {static_cast<uint8_t>(c * 37 % 256), static_cast<uint8_t>(255 - c * 13),
          static_cast<uint8_t>(c * 71 % 256)};
}

struct Scene {
  int w, h;
  std::vector<uint8_t> rgb;       // the image
  std::vector<uint8_t> mask_png;  // palette PNG of class ids at mask_scale resolution
};

// w x h image of `block`-pixel blocks; mask at 1 / mask_div resolution.
Scene make_scene(int w, int h, int block, int mask_div) {
  Scene s{w, h, {}, {}};
  s.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const auto c = class_colour(block_class(x / block, y / block));
      std::copy(c.begin(), c.end(), &s.rgb[(static_cast<size_t>(y) * w + x) * 3]);
    }
  }
  const int mw = w / mask_div, mh = h / mask_div, mb = block / mask_div;
  std::vector<uint8_t> idx(static_cast<size_t>(mw) * mh);
  for (int y = 0; y < mh; ++y) {
    for (int x = 0; x < mw; ++x) idx[static_cast<size_t>(y) * mw + x] = block_class(x / mb, y / mb);
  }
  // Palette colours unrelated to the ids: decode_with must return indices.
  std::vector<uint8_t> palette;
  for (int i = 0; i <= kClasses; ++i) {
    palette.insert(palette.end(), {static_cast<uint8_t>(250 - i), 7, static_cast<uint8_t>(3 * i + 100)});
  }
  s.mask_png = encode_png(idx, mw, mh, PngColor::kPalette, 8, palette);
  return s;
}

struct Check {
  long checked = 0;     // pixels whose neighbourhood is one class
  long misaligned = 0;  // of those, pixels whose image colour is not that class's
};

// Compares decoded image `img` (out x out RGB) with decoded mask `mask` (out x out ids).
// rx, ry: how many output pixels the image's filter reaches (enough for its support).
Check compare(const std::vector<uint8_t>& img, const std::vector<uint8_t>& mask, int out, int rx,
              int ry, int tolerance) {
  Check c;
  for (int i = 0; i < out; ++i) {
    for (int j = 0; j < out; ++j) {
      const int l = mask[static_cast<size_t>(i) * out + j];
      bool uniform = true;
      for (int di = -ry; di <= ry && uniform; ++di) {
        for (int dj = -rx; dj <= rx && uniform; ++dj) {
          // Past the output's edge lie source pixels no sample shows (between the
          // crop's edge and the first sample point) that the filter still reads.
          const int ii = i + di, jj = j + dj;
          uniform = ii >= 0 && ii < out && jj >= 0 && jj < out &&
                    mask[static_cast<size_t>(ii) * out + jj] == l;
        }
      }
      if (!uniform) continue;
      ++c.checked;
      const auto want = class_colour(l);
      const uint8_t* p = &img[(static_cast<size_t>(i) * out + j) * 3];
      for (int k = 0; k < 3; ++k) {
        if (std::abs(p[k] - want[k]) > tolerance) {
          ++c.misaligned;
          break;
        }
      }
    }
  }
  return c;
}

// Output pixels the resize filter reaches each side: its support (max(scale, 1) source
// pixels, plus the half pixel of a pixel's extent and one of slack) over the step.
int reach(double window, int out) {
  const double step = window / out;
  return static_cast<int>(std::ceil((std::max(step, 1.0) + 1.5) / step));
}

struct FollowCase {
  const char* name;
  int mask_div;     // mask resolution divisor
  bool jpeg_image;  // image stored as JPEG (lossy: colour tolerance)
};

class FollowAlignment : public ::testing::TestWithParam<FollowCase> {};

TEST_P(FollowAlignment, MaskLabelsMatchImageBlocksUnderRandomCrops) {
  const FollowCase fc = GetParam();
  const int out = 48;
  const Scene s = make_scene(256, 192, 32, fc.mask_div);
  const auto image = fc.jpeg_image ? testing::encode_jpeg(s.rgb, s.w, s.h, 95, 0, false)
                                   : testing::encode_png_rgb(s.rgb, s.w, s.h);
  const int tolerance = fc.jpeg_image ? 24 : 0;
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kTrain;
  t.size = out;
  FollowOutput mo;
  mo.channels = 1;
  mo.interpolation = Interpolation::kNearest;
  std::vector<uint8_t> img(out * out * 3), scratch(out * out * 3), mask(out * out),
      own(out * out);
  Check follow, own_draw;
  long flips = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const DecodeResult r = dec.decode(image, t, seed, img.data(), img.size());
    flips += r.flipped;
    const DecodeResult m = dec.decode_with(s.mask_png, r.geometry, mo, mask.data(), mask.size());
    EXPECT_EQ(m.src_width, s.w / fc.mask_div);
    EXPECT_EQ(m.flipped, r.flipped);
    const int rx = reach(r.geometry.w, out), ry = reach(r.geometry.h, out);
    const Check c = compare(img, mask, out, rx, ry, tolerance);
    follow.checked += c.checked;
    follow.misaligned += c.misaligned;
    EXPECT_EQ(c.misaligned, 0) << fc.name << " seed " << seed << ": window " << r.geometry.w
                               << "x" << r.geometry.h << "+" << r.geometry.x << "+"
                               << r.geometry.y << (r.geometry.flip ? " flipped" : "");
    // Nearest introduces no values: only class ids.
    for (uint8_t v : mask) ASSERT_TRUE(v >= 1 && v <= kClasses) << int(v);
    // The mask's own draw (what a loader without Follow would do) must be caught.
    const DecodeResult r2 = dec.decode(image, t, seed + 1000, scratch.data(), scratch.size());
    dec.decode_with(s.mask_png, r2.geometry, mo, own.data(), own.size());
    const Check o = compare(img, own, out, rx, ry, tolerance);
    own_draw.checked += o.checked;
    own_draw.misaligned += o.misaligned;
  }
  EXPECT_GT(flips, 10);
  EXPECT_GT(follow.checked, 60L * out * out / 8) << "too few pixels away from block edges";
  EXPECT_GT(own_draw.misaligned, own_draw.checked / 4)
      << "the check does not notice a mask with its own random draw";
}

INSTANTIATE_TEST_SUITE_P(Cases, FollowAlignment,
                         ::testing::Values(FollowCase{"png_same_size", 1, false},
                                           FollowCase{"png_half_size_mask", 2, false},
                                           FollowCase{"jpeg_image", 1, true},
                                           FollowCase{"jpeg_image_half_size_mask", 2, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FollowAlignment, EvalGeometryIsFollowedToo) {
  const int out = 56;
  for (int div : {1, 2}) {
    const Scene s = make_scene(288, 224, 32, div);
    const auto image = testing::encode_png_rgb(s.rgb, s.w, s.h);
    ImageDecoder dec;
    ImageTransform t;
    t.kind = ImageTransform::Kind::kEval;
    t.size = out;
    std::vector<uint8_t> img(out * out * 3), mask(out * out);
    const DecodeResult r = dec.decode(image, t, 0, img.data(), img.size());
    EXPECT_FALSE(r.geometry.clip_to_window);  // resize first, then crop
    FollowOutput mo{0, 0, 1, Interpolation::kNearest};
    dec.decode_with(s.mask_png, r.geometry, mo, mask.data(), mask.size());
    const int rx = reach(r.geometry.w, out), ry = reach(r.geometry.h, out);
    const Check c = compare(img, mask, out, rx, ry, 0);
    EXPECT_EQ(c.misaligned, 0) << div;
    EXPECT_GT(c.checked, out * out / 8);
    // Mirrored geometry: misaligned, and the check sees it.
    ImageGeometry g = r.geometry;
    g.flip = true;
    dec.decode_with(s.mask_png, g, mo, mask.data(), mask.size());
    EXPECT_GT(compare(img, mask, out, rx, ry, 0).misaligned, 0) << div;
  }
}

TEST(FollowAlignment, AntialiasedFollowOfTheSameImageReproducesItsDecode) {
  // decode_with with the image's own geometry and the antialiased filter gives the same
  // bytes as the decode that drew it (JPEG without DCT scaling, PNG, WebP).
  const auto rgb = testing::make_rgb_image(140, 100, 4);
  std::vector<std::vector<uint8_t>> images = {
      testing::encode_png_rgb(rgb, 140, 100), testing::encode_webp_rgb(rgb, 140, 100, false),
      testing::encode_jpeg(rgb, 140, 100, 90, 2, false)};
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kTrain;
  t.size = 40;
  t.allow_dct_scaling = false;
  for (size_t k = 0; k < images.size(); ++k) {
    for (uint64_t seed = 0; seed < 8; ++seed) {
      std::vector<uint8_t> a(40 * 40 * 3), b(40 * 40 * 3);
      const DecodeResult r = dec.decode(images[k], t, seed, a.data(), a.size());
      dec.decode_with(images[k], r.geometry, {}, b.data(), b.size());
      EXPECT_EQ(a, b) << k << " seed " << seed;
    }
    ImageTransform ev = t;
    ev.kind = ImageTransform::Kind::kEval;
    std::vector<uint8_t> a(40 * 40 * 3), b(40 * 40 * 3);
    const DecodeResult r = dec.decode(images[k], ev, 0, a.data(), a.size());
    dec.decode_with(images[k], r.geometry, {}, b.data(), b.size());
    EXPECT_EQ(a, b) << k << " eval";
  }
}

TEST(FollowNearest, IdentityAndFlipAreExactAndOutputSizeCanDiffer) {
  const int w = 30, h = 20;
  std::vector<uint8_t> gray(w * h);
  for (int i = 0; i < w * h; ++i) gray[i] = static_cast<uint8_t>(i * 13);
  const auto png = encode_png(gray, w, h, PngColor::kGray, 8);
  ImageDecoder dec;
  FollowOutput mo{0, 0, 1, Interpolation::kNearest};
  ImageGeometry g{w, h, 0, 0, w, h, true, true, w, h};
  std::vector<uint8_t> out(w * h * 4);
  dec.decode_with(png, g, mo, out.data(), out.size());
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) ASSERT_EQ(out[y * w + x], gray[y * w + (w - 1 - x)]);
  }
  // 2x upscale: every source pixel becomes a 2x2 block.
  mo.width = 2 * w;
  mo.height = 2 * h;
  g.flip = false;
  dec.decode_with(png, g, mo, out.data(), out.size());
  for (int y = 0; y < 2 * h; ++y) {
    for (int x = 0; x < 2 * w; ++x) ASSERT_EQ(out[y * 2 * w + x], gray[(y / 2) * w + x / 2]);
  }
}
// decode_with at 1/2 or 1/4 scale (FollowOutput::allow_dct_scaling): chosen when the
// window so scaled still covers the output, and close to the full-resolution result.
TEST(DecodeWith, DctScalingWhenTheWindowAllowsIt) {
  const auto jpeg = testing::make_jpeg(512, 256, 3);
  ImageDecoder dec;
  ImageGeometry g;
  g.src_width = 512;
  g.src_height = 256;
  g.w = 512;
  g.h = 256;
  g.clip_to_window = false;
  g.out_width = 128;
  g.out_height = 64;
  FollowOutput o;
  std::vector<uint8_t> full(128 * 64 * 3), scaled(full.size());
  const DecodeResult a = dec.decode_with(jpeg, g, o, full.data(), full.size());
  EXPECT_EQ(a.scale_denom, 1);
  o.allow_dct_scaling = true;
  const DecodeResult b = dec.decode_with(jpeg, g, o, scaled.data(), scaled.size());
  EXPECT_EQ(b.scale_denom, 4);
  double diff = 0;
  for (size_t i = 0; i < full.size(); ++i) diff += std::abs(int(full[i]) - int(scaled[i]));
  EXPECT_LT(diff / full.size(), 4.0);
  EXPECT_EQ(b.geometry.w, a.geometry.w);  // the geometry stays in full-resolution pixels
  // A window of 300 x 150 into 128 x 64: 1/2 (150 x 75) covers it, 1/4 does not.
  g.w = 300;
  g.h = 150;
  g.x = 100;
  g.y = 50;
  EXPECT_EQ(dec.decode_with(jpeg, g, o, scaled.data(), scaled.size()).scale_denom, 2);
  g.flip = true;
  const DecodeResult c = dec.decode_with(jpeg, g, o, scaled.data(), scaled.size());
  EXPECT_TRUE(c.flipped);
}

}  // namespace
}  // namespace stoker
