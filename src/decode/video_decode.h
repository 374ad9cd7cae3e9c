// VideoDecoder: the frames a ClipPlan names, decoded from a video file's bytes in
// memory, turned upright, cropped, resized and converted to RGB.
//
// The file is demuxed through AvInput (no temporary file). The decoder seeks to the
// keyframe at or before the clip's first frame (from the media index: no scan) and
// decodes only until its last frame is known; frames come out of libavcodec in
// presentation order, so a frame's index is counted from the keyframe's. Each frame
// delivered is cropped and scaled by libswscale in one pass (its crop box mapped from
// upright to coded coordinates), then turned and mirrored while it is copied into
// place (a plain clip is written by libswscale straight into the output). Colour: the
// frame's matrix (BT.601 unless it says BT.709 or BT.2020) and range.
//
// One per thread: it keeps its codec context (reused, flushed, while the codec and its
// extradata stay the same), packet, frames, scaler and scratch between calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "decode/clip_plan.h"
#include "stoker/media.h"

namespace stoker::internal {

class VideoDecoder {
 public:
  VideoDecoder();
  ~VideoDecoder();
  VideoDecoder(const VideoDecoder&) = delete;
  VideoDecoder& operator=(const VideoDecoder&) = delete;

  /// Writes plan.at.size() frames of out_h x out_w x 3 uint8 to `out` (contiguous) and
  /// each frame's presentation time in seconds to `pts_out`. `file` is the video's bytes,
  /// `info` its index. Throws kDataLoss naming the reason (a file that does not demux or
  /// decode, a stream that is not the index's), kUnavailable without libav.
  void decode(std::span<const uint8_t> file, const MediaInfo& info, const ClipPlan& plan, int out_w, int out_h,
              uint8_t* out, double* pts_out);

  struct Stats {
    uint64_t frames_decoded = 0;  ///< frames out of libavcodec, delivered or not
    uint64_t seeks = 0;           ///< seeks to a keyframe past the first
    uint64_t restarts = 0;        ///< seeks that missed, decoded again from the start
  };
  const Stats& stats() const noexcept { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Stats stats_;
};

}  // namespace stoker::internal
