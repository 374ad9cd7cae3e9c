#include "decode/geometry.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "stoker/error.h"

namespace stoker::internal {

ImageGeometry geometry_from_plan(const CropPlan& p, int width, int height, int out_w,
                                 int out_h, bool clip_to_window) {
  ImageGeometry g;
  g.src_width = width;
  g.src_height = height;
  g.x = p.x0;
  g.y = p.y0;
  g.w = p.w;
  g.h = p.h;
  g.clip_to_window = clip_to_window;
  g.flip = p.flip;
  g.out_width = out_w;
  g.out_height = out_h;
  return g;
}

CropPlan plan_from_geometry(const ImageGeometry& g, int width, int height) {
  auto bad = [](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument, "ImageGeometry: " + why);
  };
  if (g.src_width < 1 || g.src_height < 1) bad("src_width and src_height must be >= 1");
  if (g.out_width < 1 || g.out_height < 1 || g.out_width > (1 << 15) ||
      g.out_height > (1 << 15)) {
    bad("out_width and out_height must be in [1, 32768]");
  }
  if (!std::isfinite(g.x) || !std::isfinite(g.y) || !std::isfinite(g.w) || !std::isfinite(g.h) ||
      !(g.w > 0) || !(g.h > 0)) {
    bad("the window needs finite x, y and w, h > 0");
  }
  // A little slack for windows computed in floating point (kEval's are fractional).
  const double eps = 1e-6;
  if (g.x < -eps || g.y < -eps || g.x + g.w > g.src_width + eps ||
      g.y + g.h > g.src_height + eps) {
    bad("window " + std::to_string(g.w) + "x" + std::to_string(g.h) + "+" + std::to_string(g.x) +
        "+" + std::to_string(g.y) + " is outside the " + std::to_string(g.src_width) + "x" +
        std::to_string(g.src_height) + " image");
  }
  const double sx = static_cast<double>(width) / g.src_width;
  const double sy = static_cast<double>(height) / g.src_height;
  CropPlan p;
  // Same-size follow keeps the window bit-identical (no multiply by 1.0 rounding risk).
  p.x0 = width == g.src_width ? g.x : g.x * sx;
  p.w = width == g.src_width ? g.w : g.w * sx;
  p.y0 = height == g.src_height ? g.y : g.y * sy;
  p.h = height == g.src_height ? g.h : g.h * sy;
  p.flip = g.flip;
  if (g.clip_to_window) {
    p.clip_x0 = std::clamp(static_cast<int>(std::floor(p.x0 + eps)), 0, width - 1);
    p.clip_y0 = std::clamp(static_cast<int>(std::floor(p.y0 + eps)), 0, height - 1);
    p.clip_x1 = std::clamp(static_cast<int>(std::ceil(p.x0 + p.w - eps)), p.clip_x0 + 1, width);
    p.clip_y1 = std::clamp(static_cast<int>(std::ceil(p.y0 + p.h - eps)), p.clip_y0 + 1, height);
  } else {
    p.clip_x0 = 0;
    p.clip_y0 = 0;
    p.clip_x1 = width;
    p.clip_y1 = height;
  }
  return p;
}

void needed_range(double start, double length, int n, int clip_lo, int clip_hi, int* lo,
                  int* hi) {
  const double support = std::max(length / n, 1.0);
  *lo = std::max(clip_lo, static_cast<int>(std::floor(start - support)) - 1);
  *hi = std::min(clip_hi, static_cast<int>(std::ceil(start + length + support)) + 1);
  if (*hi <= *lo) {
    *lo = clip_lo;
    *hi = clip_hi;
  }
}

FollowPlan plan_follow(const ImageGeometry& g, const FollowOutput& o, int width, int height) {
  FollowPlan f;
  f.crop = plan_from_geometry(g, width, height);
  f.out_w = o.width > 0 ? o.width : g.out_width;
  f.out_h = o.height > 0 ? o.height : g.out_height;
  needed_range(f.crop.x0, f.crop.w, f.out_w, f.crop.clip_x0, f.crop.clip_x1, &f.x0, &f.x1);
  needed_range(f.crop.y0, f.crop.h, f.out_h, f.crop.clip_y0, f.crop.clip_y1, &f.y0, &f.y1);
  return f;
}

namespace {

// Nearest source index per output index, at the resize's sample points.
void nearest_table(std::vector<int>& t, int n, const ResizeAxis& a) {
  t.resize(n);
  const double scale = a.length / n;
  for (int i = 0; i < n; ++i) {
    const double center = a.start + (i + 0.5) * scale;
    t[i] = std::clamp(static_cast<int>(std::floor(center)), a.clip_lo, a.clip_hi - 1);
  }
}

}  // namespace

void resample(const uint8_t* src, size_t stride, int src_w, int src_h, int channels,
              const ResizeAxis& ax, const ResizeAxis& ay, bool flip, Interpolation interp,
              uint8_t* dst, int out_w, int out_h, Resizer& resizer, ResizeKernel kernel,
              GeometryScratch& s) {
  if (interp == Interpolation::kNearest) {
    nearest_table(s.xs, out_w, ax);
    nearest_table(s.ys, out_h, ay);
    if (flip) std::reverse(s.xs.begin(), s.xs.end());
    for (int i = 0; i < out_h; ++i) {
      const uint8_t* row = src + static_cast<size_t>(s.ys[i]) * stride;
      uint8_t* o = dst + static_cast<size_t>(i) * out_w * channels;
      if (channels == 1) {
        for (int j = 0; j < out_w; ++j) o[j] = row[s.xs[j]];
      } else {
        for (int j = 0; j < out_w; ++j) std::memcpy(o + 3 * j, row + 3 * s.xs[j], 3);
      }
    }
    return;
  }
  if (channels == 3) {
    resizer.resize(src, stride, src_w, src_h, ax, ay, flip, dst, out_w, out_h, kernel);
    return;
  }
  // The filter works on RGB; widen the clip rectangle of the one channel, resize, and
  // keep one channel (the three are identical sums, so this is the one-channel filter).
  const int cw = ax.clip_hi - ax.clip_lo, ch = ay.clip_hi - ay.clip_lo;
  s.rgb.resize(static_cast<size_t>(cw) * ch * 3);
  for (int y = 0; y < ch; ++y) {
    const uint8_t* row = src + static_cast<size_t>(ay.clip_lo + y) * stride + ax.clip_lo;
    uint8_t* o = s.rgb.data() + static_cast<size_t>(y) * cw * 3;
    for (int x = 0; x < cw; ++x) o[3 * x] = o[3 * x + 1] = o[3 * x + 2] = row[x];
  }
  const ResizeAxis rx{ax.start - ax.clip_lo, ax.length, 0, cw};
  const ResizeAxis ry{ay.start - ay.clip_lo, ay.length, 0, ch};
  s.out3.resize(static_cast<size_t>(out_w) * out_h * 3);
  resizer.resize(s.rgb.data(), static_cast<size_t>(cw) * 3, cw, ch, rx, ry, flip, s.out3.data(),
                 out_w, out_h, kernel);
  const size_t n = static_cast<size_t>(out_w) * out_h;
  for (size_t i = 0; i < n; ++i) dst[i] = s.out3[3 * i];
}

}  // namespace stoker::internal
