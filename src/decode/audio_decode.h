// AudioDecoder: a window (or the whole) of an audio file's indexed stream, decoded from
// its bytes in memory and resampled to float32 at a chosen rate and channel count.
//
// The file is demuxed through AvInput; for a window the demuxer seeks to the packet at
// or before its start, and decoding stops once the window is full. libswresample
// converts each decoded frame (any sample format and layout) to planar float32 at the
// output rate, mono or stereo; the output's first sample is the first decoded frame's
// time, so the window is cut from the resampled stream by time (to within the
// resampler's filter delay, a few samples). Past the stream's end the window is zeros.
//
// One per thread: codec context, resampler, packet, frame and scratch are kept and
// reused between calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "stoker/media.h"

namespace stoker::internal {

class AudioDecoder {
 public:
  AudioDecoder();
  ~AudioDecoder();
  AudioDecoder(const AudioDecoder&) = delete;
  AudioDecoder& operator=(const AudioDecoder&) = delete;

  /// `samples` samples per channel from `start_s` seconds after the stream's start, at
  /// `rate` Hz and `channels` (1 or 2) channels, planar ([channels][samples]) at `out`.
  /// Throws kDataLoss naming the reason, kUnavailable without libav.
  void decode_window(std::span<const uint8_t> file, const MediaInfo& info, double start_s, int rate, int channels,
                     int64_t samples, float* out);

  /// The index decode_window needs (stream, time base) of the best audio track in
  /// `file` (a video's, say), from the container's headers alone, with start_pts 0: a
  /// window's start_s is then a time on the container's clock, as a frame's pts is.
  /// kDataLoss when it has none.
  MediaInfo track_of(std::span<const uint8_t> file);

  /// The whole track at `rate` and `channels`, interleaved ([n][channels]) into `out`
  /// (replaced). Throws as decode_window.
  void decode_all(std::span<const uint8_t> file, const MediaInfo& info, int rate, int channels, std::vector<float>& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::internal
