// Video and audio fields into batches: plan_video_fields plans the outputs of the fields
// that LoaderOptions::fields gives a VideoClip or an AudioClip (kVideoClip, kAudioClip), and
// make_video_work is the RecordWork of a dataset that has one: a record per sample, its
// other fields written as put_image_fields writes them, then each video field's clips
// drawn (clip_plan.h, from seed, epoch and sample, like every other draw) and decoded
// by the worker thread's own VideoDecoder straight into the batch.
#pragma once

#include <memory>
#include <vector>

#include "decode/audio_decode.h"
#include "decode/video_decode.h"
#include "pipeline/producer.h"

namespace stoker::internal {

struct VideoOut {
  int field = -1;       ///< in the schema
  std::string name;     ///< the field's, for errors
  int tensor = -1;      ///< frames: uint8 [T, H, W, 3] or [clips, T, H, W, 3]
  int pts_tensor = -1;  ///< NAME.pts: float64 [T] or [clips, T]
  int audio_tensor = -1;  ///< NAME.audio (spec.audio_rate > 0): float32 [C, n] or [clips, C, n]
  /// LoaderOptions::buckets: the frames are written at the record's bucket size, the
  /// tensor laid out for the largest (bucket_plan.h).
  bool bucketed = false;
  VideoClipSpec spec;
  uint64_t seed_salt = 0;  ///< distinct per video field
};

struct AudioOut {
  int field = -1;
  std::string name;
  int tensor = -1;        ///< seconds > 0: float32 [C, seconds * rate]
  int start_tensor = -1;  ///< seconds > 0: NAME.start float64 []
  int var = -1;           ///< seconds == 0: the whole track, float32 [n, C] values + offsets
  AudioClipSpec spec;
  uint64_t seed_salt = 0;
};

struct VideoFacts {
  std::vector<VideoOut> outs;
  std::vector<AudioOut> audio;
  bool empty() const noexcept { return outs.empty() && audio.empty(); }
};

/// A decode thread's media decoders and scratch.
struct MediaDecoders {
  VideoDecoder video;
  AudioDecoder audio;
  std::vector<float> samples;
};

/// The outputs of every VideoClip field under `opt`, added to `ctx`. kInvalidArgument
/// names the field and parameter of a spec that cannot be used (a field that is not
/// video, frames, fps, stride, clips, size, scale, ratio or flip out of range);
/// kUnavailable in a build without libav.
VideoFacts plan_video_fields(const LoaderOptions& opt, const Schema& schema, Context& ctx);

/// Writes every video and audio field of `fields` (a record's payloads) into sample j of `job` as
/// `f` plans: clips drawn from ctx.order_opt.seed, `epoch` and `sample`, decoded by
/// `dec`. An error is rethrown naming `where`, the record's source (`key_field`'s text,
/// -1: none) and the field.
void put_video_fields(const Context& ctx, const VideoFacts& f, int key_field, uint64_t epoch, Job& job, uint32_t j,
                      const std::vector<std::span<const uint8_t>>& fields, uint64_t sample, MediaDecoders& dec,
                      const std::string& where);

std::unique_ptr<RecordWork> make_video_work(const Context& ctx, const ImageFacts& image, const VideoFacts& video);

}  // namespace stoker::internal
