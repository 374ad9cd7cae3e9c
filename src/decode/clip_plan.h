// Which frames and which box a video clip takes: drawn from a sample's seed before
// anything is decoded, from the media index alone (stoker/media.h).
//
// Time mode (spec.fps > 0): clip c plays at t0 + k / fps, k = 0..frames-1; the frame
// delivered for a time is the last one whose pts is at or before it, so a variable
// frame rate is sampled by time, not by frame count. t0 is uniform over the starts
// that keep the clip inside the stream (Crop::kRandom), or spread evenly (clip c of n at
// fraction (c + 0.5) / n for one clip, c / (n - 1) otherwise). Stride mode (fps == 0):
// native frames i0 + k * stride, i0 drawn or spread the same way. A stream shorter
// than the clip repeats its last frame.
//
// Crop box (in upright coordinates, after the index's rotation): kRandom draws it as
// RandomResizedCrop does (scale, ratio: plan_train_crop), with the flip; kCenter takes
// the largest centred box of the output's aspect; kNone the whole frame. One box per
// clip, for every frame of it. Covering (aspect-ratio buckets: the output is a bucket's
// size, not the spec's choice): kRandom takes the largest box of the output's aspect
// instead, placed uniformly and flipped with flip_prob — the frame resized to cover the
// output, then cropped at random, as a bucketed image is; kCenter and kNone are as above.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "stoker/media.h"

namespace stoker::internal {

struct ClipPlan {
  bool by_frame = false;      ///< `at` holds frame indices (stride mode), else pts
  std::vector<int64_t> at;    ///< per output frame, non-decreasing
  double x0 = 0, y0 = 0, w = 0, h = 0;  ///< crop box, upright coordinates
  bool flip = false;
};

/// The frame size after rotation.
inline int upright_width(const MediaInfo& m) { return m.rotation % 180 ? m.height : m.width; }
inline int upright_height(const MediaInfo& m) { return m.rotation % 180 ? m.width : m.height; }

/// spec.clips plans for one sample of a video with index `m`, drawn from `seed`; `cover`:
/// kRandom boxes cover the output (header).
std::vector<ClipPlan> plan_video_clips(const MediaInfo& m, const VideoClipSpec& spec, uint64_t seed,
                                       bool cover = false);

}  // namespace stoker::internal
