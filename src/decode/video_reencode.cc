// reencode_video: a video's bytes -> a short-GOP, constant-frame-rate MP4, in memory.
//
// Demux (AvInput) -> decode -> pick, for each output slot k, the source frame shown at
// t0 + k / fps -> libswscale to the output size in yuv420p -> turn upright -> encode
// (fixed GOP, no B-frames) -> mux (AvOutput) with the audio packets copied. Times are
// compared in the source's time base, in integers, so a source already at the output
// rate maps frame for frame.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "stoker/error.h"
#include "stoker/media.h"

#ifdef STOKER_HAVE_AV
#include "decode/av_input.h"
extern "C" {
#include <libavutil/cpu.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}
#endif

namespace stoker {

namespace {
constexpr int kMaxGop = 1000;
constexpr uint64_t kMaxOutputFrames = 1u << 20;  // the probe's bound on the index
}  // namespace

std::string VideoReencodeSpec::describe() const {
  char fps_text[32];
  std::snprintf(fps_text, sizeof fps_text, "%g", fps);
  return encoder + " gop=" + std::to_string(gop) + (encoder == "libx264" ? " crf=" + std::to_string(crf) : "") +
         " max_side=" + std::to_string(max_side) + " fps=" + (fps > 0 ? fps_text : "source");
}

void VideoReencodeSpec::check() const {
  const VideoReencodeSpec& s = *this;
  auto bad = [](const std::string& why) { throw_error(ErrorCode::kInvalidArgument, "video re-encode: " + why); };
  if (s.gop < 1 || s.gop > kMaxGop) bad("gop must be 1.." + std::to_string(kMaxGop) + ", got " + std::to_string(s.gop));
  if (s.max_side < 0 || s.max_side == 1 || s.max_side > 16384)
    bad("max_side must be 0 (keep) or 2..16384, got " + std::to_string(s.max_side));
  if (!(s.fps == 0 || (s.fps >= 0.1 && s.fps <= 1000))) bad("fps must be 0 (the source's) or 0.1..1000");
  if (s.crf < 0 || s.crf > 51) bad("crf must be 0..51, got " + std::to_string(s.crf));
  if (s.encoder != "libx264" && s.encoder != "mpeg4") bad("encoder must be 'libx264' or 'mpeg4', got '" + s.encoder + "'");
#ifdef STOKER_HAVE_AV
  if (!avcodec_find_encoder_by_name(s.encoder.c_str()))
    throw_error(ErrorCode::kUnavailable, "video re-encode: this libavcodec has no '" + s.encoder +
                                             "' encoder (encoder 'mpeg4' is libavcodec's own)");
#else
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav: videos cannot be re-encoded");
#endif
}

std::vector<uint8_t> pack_reencoded_video_value(std::span<const uint8_t> file, const VideoReencodeSpec& spec,
                                                const MediaProbeOptions& options) {
  const std::vector<uint8_t> bytes = reencode_video(file, spec);
  MediaInfo m = probe_media(bytes, MediaKind::kVideo, options);
  for (size_t k = 0; k < m.keyframes.size(); ++k) {
    const int64_t next = k + 1 < m.keyframes.size() ? m.keyframes[k + 1].frame : m.frames;
    if (next - m.keyframes[k].frame > spec.gop)
      throw_error(ErrorCode::kDataLoss, "re-encoding: the " + spec.encoder + " output has keyframes " +
                                            std::to_string(next - m.keyframes[k].frame) + " frames apart, more than gop " +
                                            std::to_string(spec.gop));
  }
  return make_media_value(m, bytes);
}

#ifndef STOKER_HAVE_AV
std::vector<uint8_t> reencode_video(std::span<const uint8_t>, const VideoReencodeSpec&) {
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav: videos cannot be re-encoded");
}
#else
namespace {
using namespace internal;

[[noreturn]] void refuse(const std::string& why) { throw_error(ErrorCode::kDataLoss, "re-encoding: " + why); }

void check(int rc, const char* what) {
  if (rc < 0) refuse(std::string(what) + ": " + av_error(rc));
}

int even(double v) { return std::max(2, 2 * static_cast<int>(std::lround(v / 2))); }

// Copies a w x h plane turned clockwise by `rotation` degrees: dst is h x w for a quarter turn.
void turn_plane(const uint8_t* src, int src_stride, int w, int h, uint8_t* dst, int dst_stride, int rotation) {
  if (rotation == 180) {
    for (int y = 0; y < h; ++y) {
      const uint8_t* s = src + static_cast<ptrdiff_t>(h - 1 - y) * src_stride;
      uint8_t* d = dst + static_cast<ptrdiff_t>(y) * dst_stride;
      for (int x = 0; x < w; ++x) d[x] = s[w - 1 - x];
    }
    return;
  }
  // Upright (row r, col c) shows coded (H - 1 - c, r) turned 90, (c, W - 1 - r) turned 270.
  for (int r = 0; r < w; ++r) {
    uint8_t* d = dst + static_cast<ptrdiff_t>(r) * dst_stride;
    if (rotation == 90) {
      for (int c = 0; c < h; ++c) d[c] = src[static_cast<ptrdiff_t>(h - 1 - c) * src_stride + r];
    } else {
      for (int c = 0; c < h; ++c) d[c] = src[static_cast<ptrdiff_t>(c) * src_stride + (w - 1 - r)];
    }
  }
}

bool full_range(const AVCodecParameters* par) {
  switch (par->format) {
    case AV_PIX_FMT_YUVJ420P:
    case AV_PIX_FMT_YUVJ422P:
    case AV_PIX_FMT_YUVJ444P:
    case AV_PIX_FMT_YUVJ440P:
    case AV_PIX_FMT_YUVJ411P: return true;
    default: return par->color_range == AVCOL_RANGE_JPEG;
  }
}

class Reencoder {
 public:
  Reencoder(std::span<const uint8_t> file, const VideoReencodeSpec& spec) : spec_(spec) {
    in_.open(file, true);
    AVFormatContext* fmt = in_.fmt();
    vi_ = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (vi_ < 0) refuse("no video stream");
    ai_ = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, vi_, nullptr, 0);
    for (unsigned i = 0; i < fmt->nb_streams; ++i)
      if (static_cast<int>(i) != vi_ && static_cast<int>(i) != ai_) fmt->streams[i]->discard = AVDISCARD_ALL;
    vst_ = fmt->streams[vi_];
    dec_ = open_decoder(vst_->codecpar);
    rotation_ = display_rotation(vst_);
    fps_ = spec.fps > 0 ? av_d2q(spec.fps, 100000) : vst_->avg_frame_rate;
    if (fps_.num <= 0 || fps_.den <= 0) fps_ = vst_->r_frame_rate;
    if (fps_.num <= 0 || fps_.den <= 0 || av_q2d(fps_) > 1000)
      refuse("the source has no usable average frame rate: give one (--fps)");
    open_output();
  }

  std::vector<uint8_t> run() {
    AVFormatContext* fmt = in_.fmt();
    for (uint64_t n = 0;; ++n) {
      const int rc = av_read_frame(fmt, pkt_.get());
      if (rc == AVERROR_EOF) break;
      if (rc < 0) refuse("demuxing packet " + std::to_string(n) + ": " + av_error(rc));
      if (pkt_->stream_index == ai_) {
        copy_audio();
        continue;
      }
      if (pkt_->stream_index != vi_) {
        av_packet_unref(pkt_.get());
        continue;
      }
      if (pkt_->flags & AV_PKT_FLAG_CORRUPT) refuse("packet " + std::to_string(n) + " is truncated or corrupt");
      const int64_t pts = pkt_->pts != AV_NOPTS_VALUE ? pkt_->pts : pkt_->dts;
      if (pts != AV_NOPTS_VALUE) end_ = std::max(end_, pts + std::max<int64_t>(pkt_->duration, 0));
      int sent;
      while ((sent = avcodec_send_packet(dec_.get(), pkt_.get())) == AVERROR(EAGAIN)) receive_frames();
      av_packet_unref(pkt_.get());
      if (sent < 0) refuse("decoding frame " + std::to_string(decoded_) + ": " + av_error(sent));
      receive_frames();
    }
    if (int rc = avcodec_send_packet(dec_.get(), nullptr); rc < 0 && rc != AVERROR_EOF) check(rc, "flushing the decoder");
    receive_frames();
    if (!have_held_) refuse("the video stream has no frames");
    // The last frame lasts until the stream's end (its packet's duration), or as long
    // as the step before it.
    const int64_t end = std::max(end_, held_pts_ + std::max<int64_t>(last_step_, 1));
    while (slot_pts(slot_) < end) emit();
    check(avcodec_send_frame(enc_.get(), nullptr), "flushing the encoder");
    write_encoded();
    check(av_write_trailer(out_->fmt()), "writing the container");
    return out_->take();
  }

 private:
  void open_output() {
    const AVCodecParameters* par = vst_->codecpar;
    const int uw = rotation_ % 180 ? par->height : par->width, uh = rotation_ % 180 ? par->width : par->height;
    if (uw < 1 || uh < 1) refuse("the video stream has no frame size");
    const double scale = spec_.max_side > 0 ? std::min(1.0, spec_.max_side / static_cast<double>(std::max(uw, uh))) : 1.0;
    out_w_ = std::min(even(uw * scale), spec_.max_side > 0 ? spec_.max_side / 2 * 2 : INT32_MAX);
    out_h_ = std::min(even(uh * scale), spec_.max_side > 0 ? spec_.max_side / 2 * 2 : INT32_MAX);
    coded_w_ = rotation_ % 180 ? out_h_ : out_w_;
    coded_h_ = rotation_ % 180 ? out_w_ : out_h_;

    const AVCodec* codec = avcodec_find_encoder_by_name(spec_.encoder.c_str());
    if (!codec)
      throw_error(ErrorCode::kUnavailable, "re-encoding: this libavcodec has no '" + spec_.encoder +
                                               "' encoder (encoder 'mpeg4' is libavcodec's own)");
    const AVOutputFormat* mp4 = av_guess_format("mp4", nullptr, nullptr);
    const char* container = "mp4";
    if (ai_ >= 0) {
      const AVCodecID audio = in_.fmt()->streams[ai_]->codecpar->codec_id;
      if (!mp4 || avformat_query_codec(mp4, audio, FF_COMPLIANCE_NORMAL) != 1) container = "matroska";
    }
    out_ = std::make_unique<AvOutput>(container);
    AVFormatContext* ofmt = out_->fmt();

    enc_.reset(avcodec_alloc_context3(codec));
    if (!enc_) throw_error(ErrorCode::kResourceExhausted, "avcodec_alloc_context3 failed");
    AVCodecContext* e = enc_.get();
    e->width = out_w_;  // the encoder takes the upright frame
    e->height = out_h_;
    e->pix_fmt = AV_PIX_FMT_YUV420P;
    e->time_base = av_inv_q(fps_);
    e->framerate = fps_;
    e->gop_size = spec_.gop;
    e->keyint_min = spec_.gop;
    e->max_b_frames = spec_.encoder == "libx264" ? 3 : 0;  // mpeg4, the fallback, stays I and P
    e->thread_count = 1;  // the packer's pool is the parallelism: one file per thread
    e->sample_aspect_ratio = rotation_ % 180 ? av_inv_q(par->sample_aspect_ratio) : par->sample_aspect_ratio;
    if (e->sample_aspect_ratio.num <= 0 || e->sample_aspect_ratio.den <= 0) e->sample_aspect_ratio = {0, 1};
    e->color_range = AVCOL_RANGE_MPEG;
    // libswscale turns RGB into BT.601 YUV; YUV keeps its matrix (only the range changes).
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(par->format));
    e->colorspace = desc && (desc->flags & AV_PIX_FMT_FLAG_RGB) ? AVCOL_SPC_SMPTE170M : par->color_space;
    e->color_primaries = par->color_primaries;
    e->color_trc = par->color_trc;
    if (ofmt->oformat->flags & AVFMT_GLOBALHEADER) e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* opts = nullptr;
    if (spec_.encoder == "libx264") {
      av_dict_set(&opts, "preset", "veryfast", 0);
      av_dict_set(&opts, "tune", "fastdecode", 0);
      av_dict_set(&opts, "crf", std::to_string(spec_.crf).c_str(), 0);
      // A keyframe exactly every gop frames: no scene-cut keyframes between. B-frames are
      // never references (b-pyramid=none): a clip's decoder drops those it does not show
      // (decode/video_decode.h), so half or more of a GOP's frames cost nothing. No AVX-512
      // (issue #30): with it the same file re-encoded differently from call to call, as
      // what the heap held past x264's lookahead rows changed (mbtree=0 or the AVX2 code
      // end it; x264's AVX-512 mbtree_propagate_list takes 8 macroblocks a step and masks
      // no lane past the row's end). Every x264 code path gives the same bitstream.
      const bool avx512 = av_get_cpu_flags() & AV_CPU_FLAG_AVX512;
      av_dict_set(&opts, "x264-params", avx512 ? "scenecut=0:open-gop=0:b-pyramid=none:asm=AVX2" : "scenecut=0:open-gop=0:b-pyramid=none", 0);
    } else {
      e->flags |= AV_CODEC_FLAG_QSCALE;
      e->global_quality = FF_QP2LAMBDA * 3;
    }
    const int rc = avcodec_open2(e, codec, &opts);
    av_dict_free(&opts);
    if (rc < 0) refuse("opening the " + spec_.encoder + " encoder: " + av_error(rc));

    vout_ = avformat_new_stream(ofmt, nullptr);
    if (!vout_) throw_error(ErrorCode::kResourceExhausted, "avformat_new_stream failed");
    check(avcodec_parameters_from_context(vout_->codecpar, e), "the encoder's parameters");
    vout_->time_base = e->time_base;
    vout_->avg_frame_rate = fps_;
    if (ai_ >= 0) {
      const AVStream* ast = in_.fmt()->streams[ai_];
      aout_ = avformat_new_stream(ofmt, nullptr);
      if (!aout_) throw_error(ErrorCode::kResourceExhausted, "avformat_new_stream failed");
      check(avcodec_parameters_copy(aout_->codecpar, ast->codecpar), "copying the audio parameters");
      aout_->codecpar->codec_tag = 0;
      aout_->time_base = ast->time_base;
    }
    check(avformat_write_header(ofmt, nullptr), "writing the container header");
  }

  int64_t slot_pts(int64_t k) const { return t0_ + av_rescale_q(k, av_inv_q(fps_), vst_->time_base); }

  void receive_frames() {
    for (;;) {
      const int rc = avcodec_receive_frame(dec_.get(), frame_.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      if (rc < 0) refuse("decoding frame " + std::to_string(decoded_) + ": " + av_error(rc));
      if (frame_->decode_error_flags || (frame_->flags & AV_FRAME_FLAG_CORRUPT))
        refuse("frame " + std::to_string(decoded_) + " decodes with errors");
      ++decoded_;
      int64_t pts = frame_->pts != AV_NOPTS_VALUE ? frame_->pts : frame_->best_effort_timestamp;
      if (pts == AV_NOPTS_VALUE) pts = have_held_ ? held_pts_ + std::max<int64_t>(last_step_, 1) : 0;
      if (!have_held_) {
        t0_ = pts;
      } else {
        // Every slot before this frame's time shows the frame held until now.
        while (slot_pts(slot_) < pts) emit();
        if (pts > held_pts_) last_step_ = pts - held_pts_;
      }
      av_frame_unref(held_.get());
      av_frame_move_ref(held_.get(), frame_.get());
      held_pts_ = pts;
      have_held_ = true;
      converted_ = false;
    }
  }

  // Slot slot_ shows the held frame: converted once, however many slots repeat it.
  void emit() {
    if (slot_ >= static_cast<int64_t>(kMaxOutputFrames))
      refuse("more than " + std::to_string(kMaxOutputFrames) + " output frames");
    if (!converted_) convert();
    conv_->pts = slot_++;
    conv_->pict_type = AV_PICTURE_TYPE_NONE;
    check(avcodec_send_frame(enc_.get(), conv_.get()), "encoding");
    write_encoded();
  }

  void convert() {
    const AVFrame* f = held_.get();
    const bool turn = rotation_ != 0;
    SwsContext* s = sws_getCachedContext(sws_.release(), f->width, f->height, static_cast<AVPixelFormat>(f->format),
                                         coded_w_, coded_h_, AV_PIX_FMT_YUV420P, SWS_BICUBIC, nullptr, nullptr, nullptr);
    sws_.reset(s);
    if (!s) {
      const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format));
      refuse(std::string("no scaler from ") + (name ? name : "?") + " " + std::to_string(f->width) + "x" +
             std::to_string(f->height));
    }
    const int* coefs = sws_getCoefficients(SWS_CS_DEFAULT);
    sws_setColorspaceDetails(s, coefs, full_range(vst_->codecpar) || f->color_range == AVCOL_RANGE_JPEG ? 1 : 0, coefs, 0,
                             0, 1 << 16, 1 << 16);
    // A new buffer per source frame: the encoder may still hold the previous one.
    av_frame_unref(conv_.get());
    conv_->format = AV_PIX_FMT_YUV420P;
    conv_->width = out_w_;
    conv_->height = out_h_;
    conv_->color_range = AVCOL_RANGE_MPEG;
    check(av_frame_get_buffer(conv_.get(), 0), "allocating a frame");
    AVFrame* target = conv_.get();
    if (turn) {
      av_frame_unref(scratch_.get());
      scratch_->format = AV_PIX_FMT_YUV420P;
      scratch_->width = coded_w_;
      scratch_->height = coded_h_;
      check(av_frame_get_buffer(scratch_.get(), 0), "allocating a frame");
      target = scratch_.get();
    }
    sws_scale(s, f->data, f->linesize, 0, f->height, target->data, target->linesize);
    if (turn)
      for (int p = 0; p < 3; ++p) {
        const int w = p ? coded_w_ / 2 : coded_w_, h = p ? coded_h_ / 2 : coded_h_;
        turn_plane(scratch_->data[p], scratch_->linesize[p], w, h, conv_->data[p], conv_->linesize[p], rotation_);
      }
    converted_ = true;
  }

  void write_encoded() {
    for (;;) {
      const int rc = avcodec_receive_packet(enc_.get(), out_pkt_.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      check(rc, "encoding");
      out_pkt_->duration = 1;  // one slot, in the encoder's time base (1 / fps)
      av_packet_rescale_ts(out_pkt_.get(), enc_->time_base, vout_->time_base);
      const int64_t shift = av_rescale_q(t0_, vst_->time_base, vout_->time_base);
      out_pkt_->pts += shift;
      out_pkt_->dts += shift;
      out_pkt_->stream_index = vout_->index;
      check(av_interleaved_write_frame(out_->fmt(), out_pkt_.get()), "writing a video packet");
    }
  }

  void copy_audio() {
    av_packet_rescale_ts(pkt_.get(), in_.fmt()->streams[ai_]->time_base, aout_->time_base);
    pkt_->stream_index = aout_->index;
    pkt_->pos = -1;
    check(av_interleaved_write_frame(out_->fmt(), pkt_.get()), "writing an audio packet");
  }

  const VideoReencodeSpec& spec_;
  AvInput in_;
  int vi_ = -1, ai_ = -1;
  AVStream* vst_ = nullptr;
  AvCodecContextPtr dec_, enc_;
  int rotation_ = 0;
  AVRational fps_{0, 1};
  int out_w_ = 0, out_h_ = 0;      // upright, as encoded
  int coded_w_ = 0, coded_h_ = 0;  // the source's orientation, scaled
  std::unique_ptr<AvOutput> out_;
  AVStream* vout_ = nullptr;
  AVStream* aout_ = nullptr;
  AvPacketPtr pkt_ = make_av_packet(), out_pkt_ = make_av_packet();
  AvFramePtr frame_ = make_av_frame(), held_ = make_av_frame(), conv_ = make_av_frame(), scratch_ = make_av_frame();
  SwsContextPtr sws_;
  uint64_t decoded_ = 0;
  bool have_held_ = false, converted_ = false;
  int64_t held_pts_ = 0, last_step_ = 0, t0_ = 0, end_ = INT64_MIN;
  int64_t slot_ = 0;  // the next output frame
};

}  // namespace

std::vector<uint8_t> reencode_video(std::span<const uint8_t> file, const VideoReencodeSpec& spec) {
  spec.check();
  Reencoder r(file, spec);
  return r.run();
}
#endif  // STOKER_HAVE_AV

}  // namespace stoker
