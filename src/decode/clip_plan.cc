#include "decode/clip_plan.h"

#include <algorithm>
#include <cmath>

#include "decode/crop.h"

namespace stoker::internal {
namespace {

// Where clip c of n starts, as a fraction of the room for starts.
double spread(int c, int n) { return n == 1 ? 0.5 : static_cast<double>(c) / (n - 1); }

// The largest box of the output's aspect inside a uw x uh frame.
void largest_box(const VideoClipSpec& s, int uw, int uh, ClipPlan& p) {
  const double want = static_cast<double>(s.width) / s.height;
  p.w = uw, p.h = uh;
  if (static_cast<double>(uw) / uh > want) p.w = std::max(1.0, std::round(uh * want));
  else p.h = std::max(1.0, std::round(uw / want));
}

void plan_box(const MediaInfo& m, const VideoClipSpec& s, bool cover, SampleRng& rng, ClipPlan& p) {
  const int uw = upright_width(m), uh = upright_height(m);
  switch (s.crop) {
    case VideoClipSpec::Crop::kRandom: {
      if (cover) {
        largest_box(s, uw, uh, p);
        p.x0 = std::floor(rng.uniform() * (uw - p.w + 1));
        p.y0 = std::floor(rng.uniform() * (uh - p.h + 1));
        p.flip = rng.uniform() < s.flip_prob;
        return;
      }
      ImageTransform t;
      t.kind = ImageTransform::Kind::kTrain;
      t.scale_min = s.scale_min;
      t.scale_max = s.scale_max;
      t.ratio_min = s.ratio_min;
      t.ratio_max = s.ratio_max;
      t.flip_prob = s.flip_prob;
      const CropPlan c = plan_train_crop(uw, uh, t, rng.next());
      p.x0 = c.x0, p.y0 = c.y0, p.w = c.w, p.h = c.h, p.flip = c.flip;
      return;
    }
    case VideoClipSpec::Crop::kCenter: {
      largest_box(s, uw, uh, p);
      p.x0 = std::floor((uw - p.w) / 2), p.y0 = std::floor((uh - p.h) / 2);
      return;
    }
    case VideoClipSpec::Crop::kNone:
      p.x0 = 0, p.y0 = 0, p.w = uw, p.h = uh;
      return;
  }
}

}  // namespace

std::vector<ClipPlan> plan_video_clips(const MediaInfo& m, const VideoClipSpec& s, uint64_t seed, bool cover) {
  SampleRng rng(seed);
  const bool random = s.crop == VideoClipSpec::Crop::kRandom;
  std::vector<ClipPlan> plans(static_cast<size_t>(s.clips));
  for (int c = 0; c < s.clips; ++c) {
    ClipPlan& p = plans[static_cast<size_t>(c)];
    p.at.resize(static_cast<size_t>(s.frames));
    if (s.fps > 0) {
      // Pts units per second, and the clip's span from its first time to its last.
      const double per_s = static_cast<double>(m.tb_den) / m.tb_num;
      const double span = (s.frames - 1) / s.fps * per_s;
      const double room = std::max(0.0, static_cast<double>(m.duration) - 1 - span);
      const double t0 = static_cast<double>(m.start_pts) + (random ? rng.uniform() : spread(c, s.clips)) * room;
      for (int k = 0; k < s.frames; ++k)
        p.at[static_cast<size_t>(k)] = static_cast<int64_t>(std::floor(t0 + k / s.fps * per_s + 1e-6));
    } else {
      const int64_t span = static_cast<int64_t>(s.frames - 1) * s.stride;
      const int64_t room = std::max<int64_t>(0, m.frames - 1 - span);
      const int64_t i0 = random ? static_cast<int64_t>(rng.below(static_cast<uint64_t>(room) + 1))
                                : static_cast<int64_t>(std::llround(spread(c, s.clips) * static_cast<double>(room)));
      p.by_frame = true;
      for (int k = 0; k < s.frames; ++k)
        p.at[static_cast<size_t>(k)] = std::min<int64_t>(m.frames - 1, i0 + static_cast<int64_t>(k) * s.stride);
    }
    plan_box(m, s, cover, rng, p);
  }
  return plans;
}

}  // namespace stoker::internal
