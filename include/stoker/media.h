// Video and audio fields: the media index stored in front of each file, the pack-time
// probe that builds it, and the clip spec the loader decodes by.
//
// A kVideo or kAudio field's value is [media index][the file's bytes, unchanged]. The
// index (shards/FORMAT.md, "Media fields") is what the probe learnt once, at pack time,
// so that the loader never has to scan a file to find where a clip starts: the codec,
// the frame size and rotation, the stream's time base, first timestamp, duration and
// frame count, the keyframes (pts, byte offset, index of the frame they show) and, for
// audio, the sample rate and channel count. It carries its own CRC32C.
//
// The probe reads a file through libavformat over the bytes in memory (no temporary
// file), opens the stream's decoder and, when asked, decodes every packet: a file that
// cannot be demuxed or decoded, or whose codec this libavcodec cannot decode, is
// refused naming the reason, so that it is never found at train time. A build without
// libav (README "Build") has the parser but no probe: probing is kUnavailable.
//
// Threading: free functions, safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace stoker {

enum class MediaKind : uint8_t { kVideo = 1, kAudio = 2 };

/// A keyframe of the indexed stream, in presentation order.
struct MediaKeyframe {
  int64_t pts = 0;          ///< in the stream's time base
  int64_t pos = -1;         ///< byte offset of its packet in the file (-1: unknown to the demuxer)
  int64_t frame = 0;        ///< index of the frame it shows (0 = first frame presented)
  bool operator==(const MediaKeyframe&) const = default;
};

/// What the pack-time probe learnt about a file's stream (the media index).
struct MediaInfo {
  MediaKind kind = MediaKind::kVideo;
  std::string codec;          ///< libavcodec's name ("h264", "vp9", "flac"), <= 15 bytes
  int32_t stream = 0;         ///< the stream's index in the container
  int32_t width = 0, height = 0;  ///< video: coded frame size (before rotation)
  /// Video: clockwise degrees (0, 90, 180, 270) that turn a decoded frame upright, from
  /// the container's display matrix; the loader applies it.
  int32_t rotation = 0;
  int32_t tb_num = 1, tb_den = 1;  ///< the stream's time base (seconds per pts unit)
  int64_t start_pts = 0;      ///< the first frame's presentation timestamp
  /// From start_pts to the end of the last frame (its pts + duration), in the time base.
  int64_t duration = 0;
  int64_t frames = 0;         ///< video: frames presented; audio: samples per channel
  int32_t sample_rate = 0;    ///< audio
  int32_t channels = 0;       ///< audio
  std::vector<MediaKeyframe> keyframes;  ///< video: at least one, pts ascending
  bool operator==(const MediaInfo&) const = default;

  double seconds(int64_t pts) const noexcept {
    return static_cast<double>(pts) * tb_num / tb_den;
  }
};

/// Largest index a field may carry (its keyframe table included): 1 MiB.
inline constexpr uint32_t kMaxMediaIndexBytes = 1u << 20;

/// A media field's value: the index serialised, then `file` unchanged.
std::vector<uint8_t> make_media_value(const MediaInfo& info, std::span<const uint8_t> file);

/// A media field's value split: its index (into `info`) and the file's bytes (a view
/// into `value`). kDataLoss naming the reason (bad magic, checksum, sizes, a table out
/// of order) when it is not one make_media_value made.
std::span<const uint8_t> parse_media_value(std::span<const uint8_t> value, MediaInfo& info);

struct MediaProbeOptions {
  /// Decode every packet of the stream (the frame count then comes from the decoder);
  /// false: demux only (headers and packets; a corrupt bitstream is not noticed).
  bool decode = true;
  uint64_t max_frames = 1u << 20;  ///< a stream with more is refused (index size bound)
};

/// Probes `file` (its bytes) for its best `kind` stream and returns its index. Throws
/// kDataLoss with the reason ("no video stream", "codec 'hevc' has no decoder in this
/// libavcodec", "decoding frame 12: Invalid data found ...") when the file cannot be
/// used; kUnavailable in a build without libav.
MediaInfo probe_media(std::span<const uint8_t> file, MediaKind kind, const MediaProbeOptions& options = {});

/// probe_media then make_media_value: what packers store for a media field.
std::vector<uint8_t> pack_media_value(std::span<const uint8_t> file, MediaKind kind,
                                      const MediaProbeOptions& options = {});

/// Whether this build can probe and decode media (it was built with libav).
bool media_available() noexcept;

/// A pack-time re-encode of video fields (PackOptions::video_reencode), the video
/// counterpart of --fast-crop: a short, fixed GOP and a constant frame rate, so that a
/// clip starting anywhere decodes at most gop - 1 frames it does not deliver.
///
/// The encoder is libx264 by default (GPL-2+, as Debian's libavcodec is built with it):
/// H.264 is what libavcodec decodes fastest on a CPU, and tune=fastdecode drops CABAC,
/// the deblocking filter and weighted prediction, the costliest decode steps; up to 3
/// B-frames between reference frames and none of them a reference (b-pyramid=none), so a
/// clip's decoder drops the B-frames it does not show undecoded. "mpeg4"
/// (libavcodec's own MPEG-4 Part 2, LGPL) is the fallback for a libavcodec without
/// libx264: larger files at the same quality.
struct VideoReencodeSpec {
  int gop = 0;           ///< a keyframe every `gop` frames, 1..1000; 0: store files as they are
  int max_side = 0;      ///< > 0: scaled so the longer side is at most this; 0: source size
  double fps = 0;        ///< output frame rate (0.1..1000); 0: the source's average rate
  int crf = 23;          ///< libx264 constant rate factor, 0..51 (lower: larger, closer)
  std::string encoder = "libx264";  ///< "libx264" or "mpeg4"
  bool enabled() const noexcept { return gop > 0; }
  /// kInvalidArgument naming the value out of range; kUnavailable when this build
  /// (its libavcodec) has no such encoder.
  void check() const;
  /// "libx264 gop=16 crf=23 max_side=320 fps=source": the manifest's meta "video_reencode".
  std::string describe() const;
};

/// Re-encodes `file` (its bytes) in memory to an MP4 (Matroska when its audio codec
/// has no MP4 mapping) holding:
/// - the best video stream, decoded and encoded again at a constant frame rate: output
///   frame k shows the source frame presented at t0 + k / fps (the last whose pts is at
///   or before it; t0 the first frame's time, kept, so the timeline and the audio stay
///   in sync), up to the source's end, so a variable frame rate comes out constant;
/// - turned upright (the source's rotation applied; the output has none), scaled so its
///   longer side is at most max_side (both sizes rounded to even: 4:2:0 chroma),
///   limited-range yuv420p with the source's colour matrix tags;
/// - the best audio stream copied packet for packet (not re-encoded); other streams dropped.
/// Throws kDataLoss naming the reason when the source cannot be demuxed or decoded, or
/// the encoder fails; kUnavailable when this libavcodec lacks the encoder (or libav);
/// kInvalidArgument for a spec out of range.
std::vector<uint8_t> reencode_video(std::span<const uint8_t> file, const VideoReencodeSpec& spec);

/// reencode_video, then probe_media of the result (the index describes the bytes
/// stored), checked to keep its promise: keyframes at most spec.gop frames apart.
std::vector<uint8_t> pack_reencoded_video_value(std::span<const uint8_t> file, const VideoReencodeSpec& spec,
                                                const MediaProbeOptions& options = {});

/// How the loader cuts clips from a video field (FieldTransform::Kind::kVideoClip).
///
/// A sample's `clips` clips of `frames` frames each, decoded (from the keyframe at or
/// before each clip's first frame, up to its last), turned upright, cropped and resized
/// to height x width in one libswscale pass, mirrored with flip_prob: uint8
/// [B, frames, H, W, 3] (clips == 1) or [B, clips, frames, H, W, 3], and NAME.pts
/// float64 [B, frames] / [B, clips, frames]: each frame's presentation time in seconds.
/// With LoaderOptions::buckets (loader.h) the output is each batch's bucket instead of
/// height x width, and the box covers it.
struct VideoClipSpec {
  int frames = 16;      ///< frames per clip, 1..1024
  /// > 0: the frames played at t0 + k / fps (the last frame whose pts is <= that time),
  /// so variable frame rates come out right. 0: every `stride`-th presented frame.
  double fps = 0;
  int stride = 1;       ///< fps == 0: frames k * stride after the first, >= 1
  int clips = 1;        ///< clips per sample, 1..64
  int height = 224, width = 224;  ///< output size, 1..8192
  enum class Crop {
    kRandom,  ///< a RandomResizedCrop-style box (scale, ratio) and random clip starts
    kCenter,  ///< the largest centred box of the output's aspect; clips spread evenly
    kNone,    ///< the whole frame, stretched to height x width; clips spread evenly
  };
  Crop crop = Crop::kRandom;
  float scale_min = 0.08f, scale_max = 1.0f;        ///< kRandom: area fraction bounds
  float ratio_min = 3.f / 4, ratio_max = 4.f / 3;   ///< kRandom: aspect bounds
  float flip_prob = 0.5f;  ///< kRandom: horizontal flip probability (one per clip)
  /// > 0 (fps mode only): NAME.audio, the file's audio track over each clip's span
  /// [t0, t0 + frames / fps), resampled by libswresample to this rate: float32
  /// [B, C, n] ([B, clips, C, n]), n = round(frames / fps * audio_rate), zeros where the
  /// track has no samples. A video without an audio track is a kDataLoss error. 0: none.
  int audio_rate = 0;
  bool audio_mono = true;  ///< audio_rate > 0: 1 channel; false: 2
};

/// How the loader cuts audio from an audio field (FieldTransform::Kind::kAudioClip):
/// decoded from the keyframe-free stream (seeking to the clip's start), resampled by
/// libswresample to `sample_rate`, mixed to 1 channel (mono) or 2.
///
/// seconds > 0: a window of that length, its start drawn uniformly (from seed, epoch and
/// sample) over the track, zero-padded past its end: float32 [B, C, seconds * rate] and
/// NAME.start float64 [B] (the window's start, seconds). seconds == 0: every track
/// whole, as values float32 [sum n_i, C] + NAME.offsets [B + 1] (sample i is
/// values[offsets[i]:offsets[i+1]]).
struct AudioClipSpec {
  int sample_rate = 16000;  ///< output rate, 1000..384000
  bool mono = true;         ///< 1 channel; false: 2
  double seconds = 0;       ///< window length (> 0), or 0: whole tracks
};

}  // namespace stoker
