#include "decode/video_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "stoker/error.h"

#ifdef STOKER_HAVE_AV
#include "decode/av_input.h"
extern "C" {
#include <libavutil/pixdesc.h>
}
#endif

namespace stoker::internal {

#ifndef STOKER_HAVE_AV
struct VideoDecoder::Impl {};
VideoDecoder::VideoDecoder() = default;
VideoDecoder::~VideoDecoder() = default;
void VideoDecoder::decode(std::span<const uint8_t>, const MediaInfo&, const ClipPlan&, int, int, uint8_t*, double*) {
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav: video fields cannot be decoded");
}
#else
namespace {

[[noreturn]] void refuse(const std::string& why) { throw_error(ErrorCode::kDataLoss, why); }

// The container's pts when it has one: best_effort_timestamp's guesses depend on the
// frames seen before, so they could differ after a seek from the pack-time scan's.
int64_t pts_of(const AVFrame* f) {
  return f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
}

// The box [x, x + w) x [y, y + h) of an upright frame in the coded frame's coordinates.
struct Box {
  int x = 0, y = 0, w = 0, h = 0;
};
Box coded_box(const ClipPlan& p, const MediaInfo& m) {
  const int W = m.width, H = m.height;
  const int x = static_cast<int>(std::lround(p.x0)), y = static_cast<int>(std::lround(p.y0));
  const int w = std::max(1, static_cast<int>(std::lround(p.w))), h = std::max(1, static_cast<int>(std::lround(p.h)));
  switch (m.rotation) {
    case 90: return {y, H - x - w, h, w};
    case 180: return {W - x - w, H - y - h, w, h};
    case 270: return {W - y - h, x, h, w};
    default: return {x, y, w, h};
  }
}

int sws_colorspace(AVColorSpace cs) {
  switch (cs) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    default: return SWS_CS_DEFAULT;
  }
}

}  // namespace

struct VideoDecoder::Impl {
  AvInput in;
  AvCodecContextPtr dec;
  AVCodecID dec_id = AV_CODEC_ID_NONE;
  std::vector<uint8_t> dec_extradata;
  int dec_w = 0, dec_h = 0;
  AvPacketPtr pkt = make_av_packet();
  AvFramePtr cur = make_av_frame(), prev = make_av_frame();
  SwsContextPtr sws;
  std::vector<uint8_t> turned;  // a frame in coded orientation, before it is turned / mirrored

  // Per call.
  const MediaInfo* info = nullptr;
  const ClipPlan* plan = nullptr;
  int out_w = 0, out_h = 0;
  uint8_t* out = nullptr;
  double* pts_out = nullptr;
  int64_t last_emitted = INT64_MIN;  // pts of the frame in the previous output slot

  void ensure_decoder(const AVCodecParameters* par) {
    const bool same = dec && dec_id == par->codec_id && dec_w == par->width && dec_h == par->height &&
                      dec_extradata.size() == static_cast<size_t>(std::max(par->extradata_size, 0)) &&
                      (dec_extradata.empty() || std::memcmp(dec_extradata.data(), par->extradata, dec_extradata.size()) == 0);
    if (same) {
      avcodec_flush_buffers(dec.get());
      return;
    }
    dec.reset();
    dec = open_decoder(par);
    dec_id = par->codec_id;
    dec_w = par->width;
    dec_h = par->height;
    dec_extradata.assign(par->extradata, par->extradata + std::max(par->extradata_size, 0));
  }

  void emit(const AVFrame* f, size_t k);
  void convert(const AVFrame* f, uint8_t* dst);
  /// Opens `file`, checks the index's stream and readies the decoder for it.
  AVFormatContext* open_video(std::span<const uint8_t> file);
  /// The indexed stream's next packet into `p`; false at the end of the file. A demux
  /// error or a corrupt packet is refused.
  bool read_packet(AVFormatContext* fmt, AVPacket* p);

  // Read ahead from the keyframe (decode_skipping): the packets, and the pts of the frames
  // they present, in presentation order.
  std::vector<AvPacketPtr> ahead;
  size_t ahead_n = 0;
  std::vector<int64_t> shown, wanted;
  /// The clip with the frames nothing refers to and the clip does not show dropped
  /// undecoded; false when that cannot be decided from the packets (no pts, a seek that
  /// missed, a stream shorter than its index): decode() then decodes every frame.
  bool decode_skipping(std::span<const uint8_t> file, const MediaKeyframe& key, VideoDecoder::Stats& stats);
};

AVFormatContext* VideoDecoder::Impl::open_video(std::span<const uint8_t> file) {
  in.open(file, false);
  AVFormatContext* fmt = in.fmt();
  if (info->stream < 0 || static_cast<unsigned>(info->stream) >= fmt->nb_streams ||
      fmt->streams[info->stream]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO)
    refuse("stream " + std::to_string(info->stream) + " is not the indexed video stream");
  for (unsigned i = 0; i < fmt->nb_streams; ++i)
    fmt->streams[i]->discard = static_cast<int>(i) == info->stream ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
  ensure_decoder(fmt->streams[info->stream]->codecpar);
  return fmt;
}

bool VideoDecoder::Impl::read_packet(AVFormatContext* fmt, AVPacket* p) {
  for (;;) {
    const int rc = av_read_frame(fmt, p);
    if (rc == AVERROR_EOF) return false;
    if (rc < 0) refuse("demuxing: " + av_error(rc));
    if (p->stream_index != info->stream) {
      av_packet_unref(p);
      continue;
    }
    if (p->flags & AV_PKT_FLAG_CORRUPT) {
      av_packet_unref(p);
      refuse("a packet is truncated or corrupt");
    }
    return true;
  }
}

// A frame waits in the decoder for at most this many later ones (H.264's and HEVC's
// reorder limit): once that many frames past the clip's last have been read, no packet
// still to come is shown before it.
constexpr size_t kMaxReorder = 16;

bool VideoDecoder::Impl::decode_skipping(std::span<const uint8_t> file, const MediaKeyframe& key,
                                         VideoDecoder::Stats& stats) {
  const size_t T = plan->at.size();
  AVFormatContext* fmt = open_video(file);
  if (key.frame > 0 && av_seek_frame(fmt, info->stream, key.pts, AVSEEK_FLAG_BACKWARD) < 0) return false;
  // Read until the frames the clip shows are known: by index, the first (last index + 1)
  // frames presented from the keyframe on; by time, every frame at or before the last time.
  for (AvPacketPtr& p : ahead) av_packet_unref(p.get());  // a call that gave up left some
  ahead_n = 0;
  shown.clear();
  const size_t frames_needed = plan->by_frame ? static_cast<size_t>(plan->at[T - 1] - key.frame + 1) : 0;
  size_t later = 0;  // frames read that are shown after the clip's last time
  bool eof = false;
  while (plan->by_frame ? shown.size() < frames_needed + kMaxReorder : later < kMaxReorder) {
    if (ahead_n == ahead.size()) ahead.push_back(make_av_packet());
    AVPacket* p = ahead[ahead_n].get();
    if (!read_packet(fmt, p)) {
      eof = true;
      break;
    }
    ++ahead_n;
    if (p->pts == AV_NOPTS_VALUE) return false;
    // The first packet is the keyframe (else the seek missed); an open GOP's leading
    // pictures (shown before it) are decoded as they come, never shown.
    if (ahead_n == 1 && key.frame > 0 && (p->pts != key.pts || !(p->flags & AV_PKT_FLAG_KEY))) return false;
    if (key.frame > 0 && p->pts < key.pts) continue;
    shown.push_back(p->pts);
    if (!plan->by_frame && p->pts > plan->at[T - 1]) ++later;
  }
  std::sort(shown.begin(), shown.end());
  if (shown.empty() || std::adjacent_find(shown.begin(), shown.end()) != shown.end()) return false;
  // A stream that ends before its index's count: decode() names it.
  if (eof && key.frame + static_cast<int64_t>(shown.size()) < info->frames) return false;
  wanted.assign(T, 0);
  for (size_t k = 0; k < T; ++k) {
    if (plan->by_frame) {
      const int64_t r = plan->at[k] - key.frame;
      if (r < 0 || static_cast<size_t>(r) >= shown.size()) return false;
      wanted[k] = shown[static_cast<size_t>(r)];
    } else {
      // A time's frame is the last at or before it (the first before the first, the last
      // past the end).
      auto it = std::upper_bound(shown.begin(), shown.end(), plan->at[k]);
      wanted[k] = it == shown.begin() ? shown.front() : *std::prev(it);
    }
  }
  // Send packets up to the last the clip shows, each the clip does not show marked
  // AVDISCARD_NONREF (libavcodec drops it if no other frame refers to it), then flush.
  auto is_wanted = [&](int64_t pts) { return std::binary_search(wanted.begin(), wanted.end(), pts); };
  size_t last = 0;
  for (size_t i = 0; i < ahead_n; ++i)
    if (is_wanted(ahead[i]->pts)) last = i;
  AVCodecContext* c = dec.get();
  size_t k = 0;
  auto drain = [&] {
    for (;;) {
      const int rc = avcodec_receive_frame(c, cur.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      if (rc < 0) refuse("decoding: " + av_error(rc));
      ++stats.frames_decoded;
      const int64_t pts = pts_of(cur.get());
      if (!(key.frame > 0 && pts < key.pts))
        while (k < T && wanted[k] == pts) emit(cur.get(), k++);
      av_frame_unref(cur.get());
    }
  };
  for (size_t i = 0; i <= last && k < T; ++i) {
    AVPacket* p = ahead[i].get();
    const bool skip = !is_wanted(p->pts);
    c->skip_frame = skip ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
    stats.packets_marked_skippable += skip;
    int sent;
    while ((sent = avcodec_send_packet(c, p)) == AVERROR(EAGAIN)) drain();
    c->skip_frame = AVDISCARD_DEFAULT;
    if (sent < 0) refuse("decoding: " + av_error(sent));
    drain();
  }
  for (size_t i = 0; i < ahead_n; ++i) av_packet_unref(ahead[i].get());
  if (k < T) {
    if (int rc = avcodec_send_packet(c, nullptr); rc < 0 && rc != AVERROR_EOF) refuse("decoding: " + av_error(rc));
    drain();
  }
  return k == T;
}

void VideoDecoder::Impl::convert(const AVFrame* f, uint8_t* dst) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(f->format));
  if (!desc || (desc->flags & (AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_PAL)))
    refuse(std::string("pixel format ") + (desc ? desc->name : "?") + " is not supported");
  if (f->width != info->width || f->height != info->height)
    refuse("a frame is " + std::to_string(f->width) + "x" + std::to_string(f->height) + ", the index says " +
           std::to_string(info->width) + "x" + std::to_string(info->height));
  Box b = coded_box(*plan, *info);
  // Subsampled chroma: the box starts on a chroma sample.
  const int ax = 1 << desc->log2_chroma_w, ay = 1 << desc->log2_chroma_h;
  b.x = std::clamp(b.x - b.x % ax, 0, f->width - 1);
  b.y = std::clamp(b.y - b.y % ay, 0, f->height - 1);
  b.w = std::clamp(b.w, 1, f->width - b.x);
  b.h = std::clamp(b.h, 1, f->height - b.y);
  const bool turn = info->rotation != 0 || plan->flip;
  const int cw = info->rotation % 180 ? out_h : out_w, ch = info->rotation % 180 ? out_w : out_h;
  SwsContext* s = sws_getCachedContext(sws.release(), b.w, b.h, static_cast<AVPixelFormat>(f->format), cw, ch,
                                       AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
  sws.reset(s);
  if (!s) refuse(std::string("libswscale cannot convert ") + desc->name + " to RGB");
  const int cs = sws_colorspace(f->colorspace);
  const int full = f->color_range == AVCOL_RANGE_JPEG;
  if (cs != SWS_CS_DEFAULT || full)
    sws_setColorspaceDetails(s, sws_getCoefficients(cs), full, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
  const uint8_t* src[4] = {};
  for (int p = 0; p < 4 && f->data[p]; ++p) {
    int step = 1;
    bool chroma = false;
    for (int c = 0; c < desc->nb_components; ++c)
      if (desc->comp[c].plane == p) {
        step = desc->comp[c].step;
        chroma = !(desc->flags & AV_PIX_FMT_FLAG_RGB) && (c == 1 || c == 2);
      }
    const int x = chroma ? b.x >> desc->log2_chroma_w : b.x, y = chroma ? b.y >> desc->log2_chroma_h : b.y;
    src[p] = f->data[p] + static_cast<ptrdiff_t>(y) * f->linesize[p] + static_cast<ptrdiff_t>(x) * step;
  }
  if (!turn) {
    uint8_t* d[4] = {dst, nullptr, nullptr, nullptr};
    int dl[4] = {out_w * 3, 0, 0, 0};
    sws_scale(s, src, f->linesize, 0, b.h, d, dl);
    return;
  }
  turned.resize(static_cast<size_t>(cw) * ch * 3);
  uint8_t* d[4] = {turned.data(), nullptr, nullptr, nullptr};
  int dl[4] = {cw * 3, 0, 0, 0};
  sws_scale(s, src, f->linesize, 0, b.h, d, dl);
  // Output pixel (x, y) of the upright, mirrored frame from the coded-orientation one.
  for (int y = 0; y < out_h; ++y) {
    uint8_t* row = dst + static_cast<size_t>(y) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      const int ux = plan->flip ? out_w - 1 - x : x;
      int sx = ux, sy = y;
      switch (info->rotation) {
        case 90: sx = y, sy = ch - 1 - ux; break;
        case 180: sx = cw - 1 - ux, sy = ch - 1 - y; break;
        case 270: sx = cw - 1 - y, sy = ux; break;
        default: break;
      }
      std::memcpy(row + x * 3, turned.data() + (static_cast<size_t>(sy) * cw + sx) * 3, 3);
    }
  }
}

void VideoDecoder::Impl::emit(const AVFrame* f, size_t k) {
  const size_t bytes = static_cast<size_t>(out_w) * out_h * 3;
  const int64_t pts = pts_of(f);
  if (k > 0 && pts == last_emitted) std::memcpy(out + k * bytes, out + (k - 1) * bytes, bytes);
  else convert(f, out + k * bytes);
  last_emitted = pts;
  pts_out[k] = info->seconds(pts);
}

VideoDecoder::VideoDecoder() : impl_(std::make_unique<Impl>()) {}
VideoDecoder::~VideoDecoder() = default;

void VideoDecoder::decode(std::span<const uint8_t> file, const MediaInfo& info, const ClipPlan& plan, int out_w,
                          int out_h, uint8_t* out, double* pts_out) {
  Impl& m = *impl_;
  m.info = &info;
  m.plan = &plan;
  m.out_w = out_w;
  m.out_h = out_h;
  m.out = out;
  m.pts_out = pts_out;
  m.last_emitted = INT64_MIN;
  if (plan.at.empty()) return;
  const size_t T = plan.at.size();

  // The keyframe at or before the first frame wanted.
  MediaKeyframe key{info.start_pts, -1, 0};
  for (const MediaKeyframe& kf : info.keyframes)
    if (plan.by_frame ? kf.frame <= plan.at[0] : kf.pts <= plan.at[0]) key = kf;

  if (key.frame > 0) ++stats_.seeks;
  if (m.decode_skipping(file, key, stats_)) return;
  m.last_emitted = INT64_MIN;
  ++stats_.every_frame;
  for (int attempt = 0;; ++attempt) {
    AVFormatContext* fmt = m.open_video(file);
    if (attempt > 0) key = MediaKeyframe{info.start_pts, -1, 0};
    if (key.frame > 0) {
      if (int rc = av_seek_frame(fmt, info.stream, key.pts, AVSEEK_FLAG_BACKWARD); rc < 0) {
        if (attempt > 0) refuse("seeking: " + av_error(rc));
        ++stats_.restarts;
        continue;
      }
    }
    // Frames before the keyframe (a seek that landed early, or an open GOP's leading
    // pictures) are not counted; the first one counted must be the keyframe itself.
    int64_t index = key.frame - 1;
    bool started = false, missed = false, have_prev = false;
    size_t k = 0;
    auto take = [&](AVFrame* f) {
      ++stats_.frames_decoded;
      const int64_t pts = pts_of(f);
      if (pts < key.pts && key.frame > 0) return;
      if (!started) {
        started = true;
        if (key.frame > 0 && pts != key.pts) {
          missed = true;
          return;
        }
      }
      ++index;
      if (plan.by_frame) {
        while (k < T && plan.at[k] == index) m.emit(f, k++);
      } else {
        // A time's frame is the last at or before it: known once a later one arrives.
        while (k < T && pts > plan.at[k]) m.emit(have_prev ? m.prev.get() : f, k++);
        av_frame_unref(m.prev.get());
        av_frame_ref(m.prev.get(), f);
        have_prev = true;
      }
    };
    bool drained = false;  // every frame of the stream came out of the decoder
    auto drain = [&]() {
      for (;;) {
        const int rc = avcodec_receive_frame(m.dec.get(), m.cur.get());
        drained = rc == AVERROR_EOF;
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
        if (rc < 0) refuse("decoding: " + av_error(rc));
        take(m.cur.get());
        av_frame_unref(m.cur.get());
        if (missed || k == T) return;
      }
    };
    bool eof = false;
    while (!missed && k < T && !eof) {
      if (!m.read_packet(fmt, m.pkt.get())) {
        eof = true;
        break;
      }
      int sent;
      while ((sent = avcodec_send_packet(m.dec.get(), m.pkt.get())) == AVERROR(EAGAIN) && !missed && k < T) drain();
      av_packet_unref(m.pkt.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) refuse("decoding: " + av_error(sent));
      drain();
    }
    if (eof && !missed && k < T) {
      if (int rc = avcodec_send_packet(m.dec.get(), nullptr); rc < 0 && rc != AVERROR_EOF)
        refuse("decoding: " + av_error(rc));
      drain();
    }
    if (missed) {
      av_frame_unref(m.prev.get());
      if (attempt > 0) refuse("the stream does not start at its first keyframe");
      ++stats_.restarts;
      continue;
    }
    // A file cut short ends before the frames its index counted.
    if (drained && index + 1 < info.frames)
      refuse("the video ends after " + std::to_string(index + 1) + " frames, its index says " + std::to_string(info.frames) +
             " (truncated?)");
    // Past the stream's end every time is the last frame's.
    if (k < T) {
      if (!have_prev && plan.by_frame) {
        // by_frame keeps no previous frame: the index promised frames that never came.
        refuse("the video has " + std::to_string(index + 1) + " frames, its index says " + std::to_string(info.frames));
      }
      if (!have_prev) refuse("no frame decoded");
      while (k < T) m.emit(m.prev.get(), k++);
    }
    av_frame_unref(m.prev.get());
    return;
  }
}
#endif  // STOKER_HAVE_AV

}  // namespace stoker::internal
