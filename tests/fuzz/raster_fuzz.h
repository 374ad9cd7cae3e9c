// The body the raster-format fuzz targets share (png_fuzz, webp_fuzz): one input through
// every ImageDecoder path that accepts a non-JPEG image. Header-only, as each fuzz
// target is one translation unit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/error.h"
#include "stoker/image.h"

namespace stoker::fuzz {

/// Exercises, on `in` (already carrying its format's signature): the train transform
/// (crop, resize) with a seed drawn from the input, decode_with of that train geometry
/// into `follow`, the eval transform, the header probe, and decode_region of the 3x3
/// block at (`region_x`, `region_y`) when the probed image is small enough and holds it.
/// max_pixels is lowered throughout so that declared sizes cannot make one input take
/// seconds. Every failure must surface as a stoker::Error; anything else is a finding.
inline void exercise_raster_decoder(std::span<const uint8_t> in, const uint8_t* data, size_t size,
                                    const FollowOutput& follow, int region_x, int region_y) {
  static ImageDecoder decoder;
  static std::vector<uint8_t> out(64 * 64 * 3);
  constexpr uint64_t kMaxPixels = 1u << 20;
  uint64_t seed = size;
  for (size_t i = 0; i < size && i < 8; ++i) seed = seed * 131 + data[i];

  ImageTransform t;
  t.kind = ImageTransform::Kind::kTrain;
  t.size = 64;
  t.max_pixels = kMaxPixels;
  try {
    const DecodeResult r = decoder.decode(in, t, seed, out.data(), out.size());
    FollowOutput fo = follow;
    fo.max_pixels = kMaxPixels;
    decoder.decode_with(in, r.geometry, fo, out.data(), out.size());
  } catch (const Error&) {
  }
  t.kind = ImageTransform::Kind::kEval;
  t.size = 32;
  try {
    decoder.decode(in, t, 0, out.data(), out.size());
  } catch (const Error&) {
  }
  try {
    const ImageInfo info = probe_image(in);
    if (static_cast<uint64_t>(info.width) * info.height <= kMaxPixels && info.width >= region_x + 3 &&
        info.height >= region_y + 3) {
      decoder.decode_region(in, region_x, region_y, 3, 3, out.data(), out.size(), kMaxPixels);
    }
  } catch (const Error&) {
  }
}

}  // namespace stoker::fuzz
