// Geometry shared by every format's decode path: turning a drawn CropPlan into the
// public ImageGeometry and back (scaled to another image's size), and applying one to a
// decoded buffer with either the antialiased resize or an exact nearest-neighbour.
//
// Both resamplers agree on where output pixel i of an axis samples: the point
// start + (i + 0.5) * length / n of the window (resize.h states the same for the filter's
// centre); nearest takes the source pixel containing that point, clamped to the clip
// range. That shared sample point is what keeps a Followed mask aligned with its image.
//
// Threading: free functions; a GeometryScratch belongs to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "decode/crop.h"
#include "decode/resize.h"
#include "stoker/image.h"

namespace stoker::internal {

/// The ImageGeometry a plan drawn for a width x height image yields at out_w x out_h.
ImageGeometry geometry_from_plan(const CropPlan& p, int width, int height, int out_w,
                                 int out_h, bool clip_to_window);

/// `g` expressed for a width x height image: window and clip range scaled per axis by
/// width / g.src_width and height / g.src_height. kInvalidArgument when `g` is malformed
/// (non-positive sizes, a window that is empty, not finite or outside its image).
CropPlan plan_from_geometry(const ImageGeometry& g, int width, int height);

/// Source pixels [lo, hi) along one axis that sampling `start`, `length` at `n` outputs
/// may read inside [clip_lo, clip_hi) (with a pixel of slack each side).
void needed_range(double start, double length, int n, int clip_lo, int clip_hi, int* lo,
                  int* hi);

/// A Follow decode's plan (ImageDecoder::decode_with): `g` scaled to a width x height
/// image, the output size (`o`'s, or the geometry's own when `o` gives none) and the
/// source pixels [x0, x1) x [y0, y1) its resample may read.
struct FollowPlan {
  CropPlan crop;
  int out_w = 0, out_h = 0;
  int x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};
FollowPlan plan_follow(const ImageGeometry& g, const FollowOutput& o, int width, int height);

/// Scratch buffers reused across calls.
struct GeometryScratch {
  std::vector<uint8_t> rgb;  // one-channel source widened to RGB for the filter
  std::vector<uint8_t> out3;
  std::vector<int> xs, ys;
};

/// Resamples the window of `src` (src_w x src_h pixels of `channels` (1 or 3) bytes,
/// rows `stride` bytes apart; ax/ay in this buffer's coordinates) to out_w x out_h
/// pixels of `channels` bytes at `dst`, mirrored when `flip`.
void resample(const uint8_t* src, size_t stride, int src_w, int src_h, int channels,
              const ResizeAxis& ax, const ResizeAxis& ay, bool flip, Interpolation interp,
              uint8_t* dst, int out_w, int out_h, Resizer& resizer, ResizeKernel kernel,
              GeometryScratch& scratch);

}  // namespace stoker::internal
