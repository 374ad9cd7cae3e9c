#include "decode/crop.h"

#include <algorithm>
#include <cmath>

namespace stoker::internal {

namespace {
uint64_t splitmix64(uint64_t& x) noexcept {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
}  // namespace

SampleRng::SampleRng(uint64_t seed) noexcept {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t SampleRng::next() noexcept {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

CropPlan plan_train_crop(int width, int height, const ImageTransform& t, uint64_t seed) {
  SampleRng rng(seed);
  const double area = static_cast<double>(width) * height;
  const double log_rmin = std::log(static_cast<double>(t.ratio_min));
  const double log_rmax = std::log(static_cast<double>(t.ratio_max));
  CropPlan p;
  bool found = false;
  int cw = 0, ch = 0, cx = 0, cy = 0;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target = area * rng.uniform(t.scale_min, t.scale_max);
    const double ratio = std::exp(rng.uniform(log_rmin, log_rmax));
    const double wf = std::nearbyint(std::sqrt(target * ratio));
    const double hf = std::nearbyint(std::sqrt(target / ratio));
    if (wf > 0 && wf <= width && hf > 0 && hf <= height) {
      cw = static_cast<int>(wf);
      ch = static_cast<int>(hf);
      cy = static_cast<int>(rng.below(static_cast<uint64_t>(height - ch + 1)));
      cx = static_cast<int>(rng.below(static_cast<uint64_t>(width - cw + 1)));
      found = true;
    }
  }
  if (!found) {
    const double in_ratio = static_cast<double>(width) / height;
    if (in_ratio < t.ratio_min) {
      cw = width;
      ch = static_cast<int>(std::nearbyint(cw / static_cast<double>(t.ratio_min)));
    } else if (in_ratio > t.ratio_max) {
      ch = height;
      cw = static_cast<int>(std::nearbyint(ch * static_cast<double>(t.ratio_max)));
    } else {
      cw = width;
      ch = height;
    }
    cw = std::clamp(cw, 1, width);
    ch = std::clamp(ch, 1, height);
    cy = (height - ch) / 2;
    cx = (width - cw) / 2;
  }
  p.flip = rng.uniform() < t.flip_prob;
  p.x0 = cx;
  p.y0 = cy;
  p.w = cw;
  p.h = ch;
  p.clip_x0 = cx;
  p.clip_y0 = cy;
  p.clip_x1 = cx + cw;
  p.clip_y1 = cy + ch;
  return p;
}

CropPlan plan_eval_crop(int width, int height, const ImageTransform& t) {
  const int target_short =
      static_cast<int>(std::nearbyint(t.size / static_cast<double>(t.eval_crop_fraction)));
  // torchvision _compute_resized_output_size: short side -> target, long side truncated.
  int new_w, new_h;
  if (width <= height) {
    new_w = target_short;
    new_h = static_cast<int>(static_cast<int64_t>(target_short) * height / width);
  } else {
    new_h = target_short;
    new_w = static_cast<int>(static_cast<int64_t>(target_short) * width / height);
  }
  new_w = std::max(new_w, 1);
  new_h = std::max(new_h, 1);
  // CenterCrop: int(round((image - crop) / 2.0)), Python rounding (half to even).
  const double left = std::nearbyint((new_w - t.size) / 2.0);
  const double top = std::nearbyint((new_h - t.size) / 2.0);
  const double sx = static_cast<double>(width) / new_w;
  const double sy = static_cast<double>(height) / new_h;
  CropPlan p;
  p.x0 = left * sx;
  p.y0 = top * sy;
  p.w = t.size * sx;
  p.h = t.size * sy;
  p.clip_x0 = 0;
  p.clip_y0 = 0;
  p.clip_x1 = width;
  p.clip_y1 = height;
  p.flip = false;
  return p;
}

}  // namespace stoker::internal
