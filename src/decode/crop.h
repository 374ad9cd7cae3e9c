// Crop geometry of the image transforms, computed from the header's dimensions before
// any pixel is decoded, and the small PRNG that draws it.
//
// SampleRng: xoshiro256** seeded by four outputs of splitmix64(seed). Pure function of
// the seed; no global state; thread-safe by value.
#pragma once

#include <cstdint>

#include "stoker/image.h"

namespace stoker::internal {

class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) noexcept;
  uint64_t next() noexcept;
  /// Uniform in [0, 1): the top 53 bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Integer in [0, n), n >= 1: (next * n) >> 64 (bias < n / 2^64).
  uint64_t below(uint64_t n) noexcept {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t s_[4];
};

/// Where the output comes from, in full-resolution source coordinates. The output pixel
/// (i, j) samples the window [x0, x0 + w) x [y0, y0 + h) at ((j + 0.5) * w / size, ...).
/// `clip_*` bound the pixels the filter may read: the crop itself for kTrain
/// (torchvision crops first, then resizes), the whole image for kEval (it resizes first,
/// then crops).
struct CropPlan {
  double x0 = 0, y0 = 0, w = 0, h = 0;
  int clip_x0 = 0, clip_y0 = 0, clip_x1 = 0, clip_y1 = 0;
  bool flip = false;
};

/// torchvision RandomResizedCrop.get_params (10 attempts, then the center-crop fallback)
/// followed by the flip draw. Integer crop: x0, y0, w, h are whole numbers.
CropPlan plan_train_crop(int width, int height, const ImageTransform& t, uint64_t seed);

/// Resize(short side -> round(size / eval_crop_fraction), long side truncated) +
/// CenterCrop(size) (offsets rounded half-to-even, like Python's round), expressed in
/// source coordinates.
CropPlan plan_eval_crop(int width, int height, const ImageTransform& t);

}  // namespace stoker::internal
