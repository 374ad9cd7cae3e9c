// libav handles owned RAII-style, and a demuxer over bytes in memory.
//
// AvInput opens a container from a span through a custom AVIOContext (read and seek
// callbacks over the span: no temporary file, no copy). It owns the AVIOContext, its
// buffer and the AVFormatContext, and frees them in the right order (the format context
// first: it reads through the IO context until closed). The span must outlive the input.
//
// av_error() is the one place an AVERROR code becomes text.
//
// Only compiled with libav (STOKER_HAVE_AV). Threading: a handle belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace stoker::internal {

/// "Invalid data found when processing input" for AVERROR_INVALIDDATA, etc.
std::string av_error(int code);

struct AvCodecContextFree {
  void operator()(AVCodecContext* c) const noexcept { avcodec_free_context(&c); }
};
struct AvFrameFree {
  void operator()(AVFrame* f) const noexcept { av_frame_free(&f); }
};
struct AvPacketFree {
  void operator()(AVPacket* p) const noexcept { av_packet_free(&p); }
};
struct SwsContextFree {
  void operator()(SwsContext* s) const noexcept { sws_freeContext(s); }
};
using AvCodecContextPtr = std::unique_ptr<AVCodecContext, AvCodecContextFree>;
using AvFramePtr = std::unique_ptr<AVFrame, AvFrameFree>;
using AvPacketPtr = std::unique_ptr<AVPacket, AvPacketFree>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextFree>;

/// av_frame_alloc / av_packet_alloc, throwing kResourceExhausted on failure.
AvFramePtr make_av_frame();
AvPacketPtr make_av_packet();

class AvInput {
 public:
  AvInput() = default;
  ~AvInput() { close(); }
  AvInput(const AvInput&) = delete;
  AvInput& operator=(const AvInput&) = delete;

  /// Opens `bytes` as a container (closing what was open). `stream_info`: also run
  /// avformat_find_stream_info (reads, and may decode, the first packets). Throws
  /// kDataLoss with libav's reason when the bytes are not a container it can read.
  void open(std::span<const uint8_t> bytes, bool stream_info);
  void close() noexcept;
  AVFormatContext* fmt() const noexcept { return fmt_; }

 private:
  static int read(void* opaque, uint8_t* buf, int size);
  static int64_t seek(void* opaque, int64_t offset, int whence);

  std::span<const uint8_t> bytes_;
  int64_t pos_ = 0;
  AVIOContext* io_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
};

/// A container written to memory through a custom AVIOContext (write and seek
/// callbacks over a growing buffer: muxers that seek back, as MP4's does, work; no
/// temporary file). `format` names the muxer ("mp4", "matroska"). Owns the format
/// context (streams are added to fmt()) and the IO context; take() after
/// av_write_trailer gives the bytes.
class AvOutput {
 public:
  explicit AvOutput(const char* format);
  ~AvOutput();
  AvOutput(const AvOutput&) = delete;
  AvOutput& operator=(const AvOutput&) = delete;
  AVFormatContext* fmt() const noexcept { return fmt_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  void release() noexcept;
  // The buffer avio hands its write callback became const in FFmpeg 7 (libavformat 61).
#if LIBAVFORMAT_VERSION_MAJOR >= 61
  using WriteBuffer = const uint8_t*;
#else
  using WriteBuffer = uint8_t*;
#endif
  static int write(void* opaque, WriteBuffer buf, int size);
  static int64_t seek(void* opaque, int64_t offset, int whence);

  std::vector<uint8_t> bytes_;
  int64_t pos_ = 0;
  AVIOContext* io_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
};

/// Clockwise degrees (0, 90, 180, 270) that turn a decoded frame of `st` upright, from
/// its display matrix (ffmpeg's autorotate reading); 0 when it has none or it is not a
/// quarter turn.
int32_t display_rotation(const AVStream* st);

/// A decoder opened for `par` (its codec found by id), one thread, errors explode
/// (a damaged bitstream is an error, not a concealed frame). kDataLoss naming the codec
/// when this libavcodec has no decoder for it.
AvCodecContextPtr open_decoder(const AVCodecParameters* par);

}  // namespace stoker::internal
