#ifdef STOKER_HAVE_AV
#include "decode/av_input.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "stoker/error.h"

extern "C" {
#include <libavutil/display.h>
}

namespace stoker::internal {
namespace {
constexpr int kIoBuffer = 64 * 1024;
}  // namespace

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

AvFramePtr make_av_frame() {
  AvFramePtr f(av_frame_alloc());
  if (!f) throw_error(ErrorCode::kResourceExhausted, "av_frame_alloc failed");
  return f;
}

AvPacketPtr make_av_packet() {
  AvPacketPtr p(av_packet_alloc());
  if (!p) throw_error(ErrorCode::kResourceExhausted, "av_packet_alloc failed");
  return p;
}

int AvInput::read(void* opaque, uint8_t* buf, int size) {
  auto* in = static_cast<AvInput*>(opaque);
  const int64_t left = static_cast<int64_t>(in->bytes_.size()) - in->pos_;
  if (left <= 0) return AVERROR_EOF;
  const int n = static_cast<int>(std::min<int64_t>(left, size));
  std::memcpy(buf, in->bytes_.data() + in->pos_, static_cast<size_t>(n));
  in->pos_ += n;
  return n;
}

int64_t AvInput::seek(void* opaque, int64_t offset, int whence) {
  auto* in = static_cast<AvInput*>(opaque);
  const int64_t size = static_cast<int64_t>(in->bytes_.size());
  if (whence & AVSEEK_SIZE) return size;
  int64_t to = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: to = offset; break;
    case SEEK_CUR: to = in->pos_ + offset; break;
    case SEEK_END: to = size + offset; break;
    default: return AVERROR(EINVAL);
  }
  if (to < 0 || to > size) return AVERROR(EINVAL);
  in->pos_ = to;
  return to;
}

void AvInput::open(std::span<const uint8_t> bytes, bool stream_info) {
  // libav's own log would repeat on stderr what the errors thrown here say.
  static std::once_flag quiet;
  std::call_once(quiet, [] { av_log_set_level(AV_LOG_QUIET); });
  close();
  bytes_ = bytes;
  pos_ = 0;
  auto* buf = static_cast<uint8_t*>(av_malloc(kIoBuffer));
  if (!buf) throw_error(ErrorCode::kResourceExhausted, "av_malloc failed");
  io_ = avio_alloc_context(buf, kIoBuffer, 0, this, &AvInput::read, nullptr, &AvInput::seek);
  if (!io_) {
    av_free(buf);
    throw_error(ErrorCode::kResourceExhausted, "avio_alloc_context failed");
  }
  fmt_ = avformat_alloc_context();
  if (!fmt_) {
    close();
    throw_error(ErrorCode::kResourceExhausted, "avformat_alloc_context failed");
  }
  fmt_->pb = io_;  // custom IO: avformat_close_input leaves io_ to us
  // Untrusted bytes: a playlist or concat script inside a record must not open files or
  // URLs of its own. No protocol is named "none", so every nested open is refused.
  fmt_->protocol_whitelist = av_strdup("none");
  if (!fmt_->protocol_whitelist) {
    close();
    throw_error(ErrorCode::kResourceExhausted, "av_strdup failed");
  }
  if (int rc = avformat_open_input(&fmt_, nullptr, nullptr, nullptr); rc < 0) {
    // avformat_open_input frees the context on failure.
    fmt_ = nullptr;
    close();
    throw_error(ErrorCode::kDataLoss, "cannot open the container: " + av_error(rc));
  }
  if (stream_info) {
    if (int rc = avformat_find_stream_info(fmt_, nullptr); rc < 0) {
      close();
      throw_error(ErrorCode::kDataLoss, "cannot read the streams: " + av_error(rc));
    }
  }
}

void AvInput::close() noexcept {
  if (fmt_) avformat_close_input(&fmt_);
  if (io_) {
    av_freep(&io_->buffer);  // libav may have replaced the buffer it was given
    avio_context_free(&io_);
  }
}

AvOutput::AvOutput(const char* format) {
  if (int rc = avformat_alloc_output_context2(&fmt_, nullptr, format, nullptr); rc < 0 || !fmt_)
    throw_error(ErrorCode::kUnavailable, std::string("no '") + format + "' muxer in this libavformat: " + av_error(rc));
  auto* buf = static_cast<uint8_t*>(av_malloc(kIoBuffer));
  if (buf) io_ = avio_alloc_context(buf, kIoBuffer, 1, this, nullptr, &AvOutput::write, &AvOutput::seek);
  if (!io_) {
    av_free(buf);
    release();  // a constructor that throws runs no destructor
    throw_error(ErrorCode::kResourceExhausted, "avio_alloc_context failed");
  }
  fmt_->pb = io_;
  fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
}

AvOutput::~AvOutput() { release(); }

void AvOutput::release() noexcept {
  if (fmt_) avformat_free_context(fmt_);  // leaves pb (custom IO) to us
  fmt_ = nullptr;
  if (io_) {
    av_freep(&io_->buffer);
    avio_context_free(&io_);
  }
}

int AvOutput::write(void* opaque, WriteBuffer buf, int size) {
  auto* out = static_cast<AvOutput*>(opaque);
  const size_t end = static_cast<size_t>(out->pos_) + static_cast<size_t>(size);
  if (end > out->bytes_.size()) out->bytes_.resize(end);
  std::memcpy(out->bytes_.data() + out->pos_, buf, static_cast<size_t>(size));
  out->pos_ = static_cast<int64_t>(end);
  return size;
}

int64_t AvOutput::seek(void* opaque, int64_t offset, int whence) {
  auto* out = static_cast<AvOutput*>(opaque);
  const int64_t size = static_cast<int64_t>(out->bytes_.size());
  if (whence & AVSEEK_SIZE) return size;
  int64_t to = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET: to = offset; break;
    case SEEK_CUR: to = out->pos_ + offset; break;
    case SEEK_END: to = size + offset; break;
    default: return AVERROR(EINVAL);
  }
  if (to < 0) return AVERROR(EINVAL);
  out->pos_ = to;  // past the end: the next write fills the gap with zeros (resize)
  return to;
}

int32_t display_rotation(const AVStream* st) {
  size_t size = 0;
  const uint8_t* m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (!m || size < 9 * sizeof(int32_t)) return 0;
  const double ccw = av_display_rotation_get(reinterpret_cast<const int32_t*>(m));
  if (std::isnan(ccw)) return 0;
  long q = std::lround(-ccw / 90.0);
  q = ((q % 4) + 4) % 4;
  return static_cast<int32_t>(q * 90);
}

AvCodecContextPtr open_decoder(const AVCodecParameters* par) {
  const AVCodec* codec = avcodec_find_decoder(par->codec_id);
  if (!codec && par->codec_id == AV_CODEC_ID_NONE) {
    char tag[AV_FOURCC_MAX_STRING_SIZE] = {};
    av_fourcc_make_string(tag, par->codec_tag);
    throw_error(ErrorCode::kDataLoss, std::string("codec '") + tag + "' (its tag) is unknown to this libavcodec: no decoder");
  }
  if (!codec)
    throw_error(ErrorCode::kDataLoss,
                std::string("codec '") + avcodec_get_name(par->codec_id) + "' has no decoder in this libavcodec");
  AvCodecContextPtr c(avcodec_alloc_context3(codec));
  if (!c) throw_error(ErrorCode::kResourceExhausted, "avcodec_alloc_context3 failed");
  if (int rc = avcodec_parameters_to_context(c.get(), par); rc < 0)
    throw_error(ErrorCode::kDataLoss, std::string("codec '") + codec->name + "': " + av_error(rc));
  c->thread_count = 1;  // the pool is the parallelism: one decoder per thread
  c->err_recognition |= AV_EF_EXPLODE | AV_EF_CRCCHECK;
  if (int rc = avcodec_open2(c.get(), codec, nullptr); rc < 0)
    throw_error(ErrorCode::kDataLoss, std::string("cannot open the '") + codec->name + "' decoder: " + av_error(rc));
  return c;
}

}  // namespace stoker::internal
#endif  // STOKER_HAVE_AV
