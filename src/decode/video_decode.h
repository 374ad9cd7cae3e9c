// VideoDecoder: the frames a ClipPlan names, decoded from a video file's bytes in
// memory, turned upright, cropped, resized and converted to RGB.
//
// The file is demuxed through AvInput (no temporary file). The decoder seeks to the
// keyframe at or before the clip's first frame (from the media index: no scan) and reads
// the packets ahead until the frames the clip shows are known from their pts (a frame's
// index counted in presentation order from the keyframe's). Packets of frames the clip
// does not show go to libavcodec marked AVDISCARD_NONREF, so a frame no other frame
// refers to (most B-frames) is dropped undecoded; decoding stops at the packet of the
// clip's last frame. When the packets cannot decide (no pts, a seek that missed, a
// stream shorter than its index) every frame is decoded, counted as it comes out. Each frame
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
    /// packets of frames the clip does not show, sent marked AVDISCARD_NONREF (dropped
    /// undecoded unless another frame refers to them)
    uint64_t packets_marked_skippable = 0;
    uint64_t every_frame = 0;  ///< clips decoded frame by frame (the packets could not decide what to drop)
  };
  const Stats& stats() const noexcept { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Stats stats_;
};

}  // namespace stoker::internal
