// probe_media: a file's stream → its media index (stoker/media.h), at pack time.
//
// Every packet of the chosen stream is read (the keyframes: their pts and byte offset);
// with options.decode every packet is decoded too, errors exploding, so a file that
// would fail at train time fails here. A keyframe's frame index is its place among the
// presented frames (sorted pts): the loader counts frames from it after a seek.
#include <algorithm>
#include <cmath>

#include "stoker/error.h"
#include "stoker/media.h"

#ifdef STOKER_HAVE_AV
#include "decode/av_input.h"
#endif

namespace stoker {

bool media_available() noexcept {
#ifdef STOKER_HAVE_AV
  return true;
#else
  return false;
#endif
}

std::vector<uint8_t> pack_media_value(std::span<const uint8_t> file, MediaKind kind, const MediaProbeOptions& options) {
  return make_media_value(probe_media(file, kind, options), file);
}

#ifndef STOKER_HAVE_AV
MediaInfo probe_media(std::span<const uint8_t>, MediaKind, const MediaProbeOptions&) {
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav (libavformat, libavcodec): video and "
                                       "audio fields cannot be packed or decoded");
}
#else
namespace {
using namespace internal;

[[noreturn]] void refuse(const std::string& why) { throw_error(ErrorCode::kDataLoss, why); }

struct Scan {
  std::vector<int64_t> frame_pts;  // presented frames (decoded, or packets when not decoding)
  std::vector<std::pair<int64_t, int64_t>> keys;  // (pts, pos) of keyframe packets
  int64_t end = INT64_MIN;          // max pts + duration over packets
  int64_t samples = 0;              // audio: decoded samples per channel
};

void drain(AVCodecContext* dec, AVFrame* frame, Scan& s, bool audio, uint64_t max_frames) {
  for (;;) {
    const int rc = avcodec_receive_frame(dec, frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
    if (rc < 0) refuse("decoding frame " + std::to_string(s.frame_pts.size()) + ": " + av_error(rc));
    if (frame->decode_error_flags || (frame->flags & AV_FRAME_FLAG_CORRUPT))
      refuse("frame " + std::to_string(s.frame_pts.size()) + " decodes with errors");
    // As the loader reads it (video_decode.cc pts_of).
    const int64_t pts = frame->pts != AV_NOPTS_VALUE ? frame->pts : frame->best_effort_timestamp;
    if (audio) s.samples += frame->nb_samples;
    s.frame_pts.push_back(pts == AV_NOPTS_VALUE ? (s.frame_pts.empty() ? 0 : s.frame_pts.back() + 1) : pts);
    if (s.frame_pts.size() > max_frames) refuse("more than " + std::to_string(max_frames) + " frames");
    av_frame_unref(frame);
  }
}

}  // namespace

MediaInfo probe_media(std::span<const uint8_t> file, MediaKind kind, const MediaProbeOptions& options) {
  const bool audio = kind == MediaKind::kAudio;
  AvInput in;
  in.open(file, true);
  AVFormatContext* fmt = in.fmt();
  const AVMediaType type = audio ? AVMEDIA_TYPE_AUDIO : AVMEDIA_TYPE_VIDEO;
  const int si = av_find_best_stream(fmt, type, -1, -1, nullptr, 0);
  if (si < 0) {
    // The decoder-less case is named by open_decoder below, with the codec.
    for (unsigned i = 0; i < fmt->nb_streams; ++i)
      if (fmt->streams[i]->codecpar->codec_type == type) open_decoder(fmt->streams[i]->codecpar);
    refuse(std::string("no ") + (audio ? "audio" : "video") + " stream");
  }
  AVStream* st = fmt->streams[si];
  for (unsigned i = 0; i < fmt->nb_streams; ++i)
    if (static_cast<int>(i) != si) fmt->streams[i]->discard = AVDISCARD_ALL;
  AvCodecContextPtr dec = open_decoder(st->codecpar);
  if (!audio && (st->codecpar->width < 1 || st->codecpar->height < 1)) refuse("the video stream has no frame size");

  Scan s;
  AvPacketPtr pkt = make_av_packet();
  AvFramePtr frame = make_av_frame();
  for (uint64_t n = 0;; ++n) {
    const int rc = av_read_frame(fmt, pkt.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) refuse("demuxing packet " + std::to_string(n) + ": " + av_error(rc));
    if (pkt->stream_index != si) {
      av_packet_unref(pkt.get());
      continue;
    }
    if (pkt->flags & AV_PKT_FLAG_CORRUPT) refuse("packet " + std::to_string(n) + " is truncated or corrupt");
    const int64_t pts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
    if (pts != AV_NOPTS_VALUE) {
      s.end = std::max(s.end, pts + std::max<int64_t>(pkt->duration, 0));
      if (!audio && (pkt->flags & AV_PKT_FLAG_KEY)) s.keys.emplace_back(pts, pkt->pos);
      if (!options.decode) s.frame_pts.push_back(pts);
    }
    if (options.decode) {
      int sent;
      while ((sent = avcodec_send_packet(dec.get(), pkt.get())) == AVERROR(EAGAIN))
        drain(dec.get(), frame.get(), s, audio, options.max_frames);
      av_packet_unref(pkt.get());
      if (sent < 0)
        refuse("decoding frame " + std::to_string(s.frame_pts.size()) + ": " + av_error(sent));
      drain(dec.get(), frame.get(), s, audio, options.max_frames);
    } else {
      av_packet_unref(pkt.get());
      if (s.frame_pts.size() > options.max_frames) refuse("more than " + std::to_string(options.max_frames) + " frames");
    }
  }
  if (options.decode) {
    if (int rc = avcodec_send_packet(dec.get(), nullptr); rc < 0 && rc != AVERROR_EOF)
      refuse("flushing the decoder: " + av_error(rc));
    drain(dec.get(), frame.get(), s, audio, options.max_frames);
  }
  if (s.frame_pts.empty()) refuse(std::string("the ") + (audio ? "audio" : "video") + " stream has no frames");

  MediaInfo m;
  m.kind = kind;
  m.codec = avcodec_get_name(st->codecpar->codec_id);
  if (m.codec.size() > 15) m.codec.resize(15);
  m.stream = si;
  m.tb_num = st->time_base.num;
  m.tb_den = st->time_base.den;
  if (m.tb_num <= 0 || m.tb_den <= 0) refuse("the stream has no time base");
  std::sort(s.frame_pts.begin(), s.frame_pts.end());
  m.start_pts = s.frame_pts.front();
  // A last frame without a packet duration lasts as long as the one before it.
  const int64_t last = s.frame_pts.back();
  const int64_t step = s.frame_pts.size() > 1 ? last - s.frame_pts[s.frame_pts.size() - 2] : 1;
  m.duration = std::max(s.end, last + std::max<int64_t>(step, 1)) - m.start_pts;
  if (audio) {
    m.sample_rate = dec->sample_rate;
    m.channels = dec->ch_layout.nb_channels;
    m.frames = options.decode ? s.samples
                              : static_cast<int64_t>(static_cast<double>(m.duration) * m.tb_num / m.tb_den * m.sample_rate);
    if (m.sample_rate < 1 || m.channels < 1) refuse("the audio stream has no sample rate or channels");
    // The samples decoded, not the last packet's nominal length (a short final block).
    if (options.decode)
      m.duration = static_cast<int64_t>(std::llround(static_cast<double>(m.frames) * m.tb_den / (static_cast<double>(m.tb_num) * m.sample_rate)));
    return m;
  }
  m.width = st->codecpar->width;
  m.height = st->codecpar->height;
  m.rotation = display_rotation(st);
  m.frames = static_cast<int64_t>(s.frame_pts.size());
  std::sort(s.keys.begin(), s.keys.end());
  for (const auto& [pts, pos] : s.keys) {
    if (pts < m.start_pts || (!m.keyframes.empty() && pts == m.keyframes.back().pts)) continue;
    const auto at = std::lower_bound(s.frame_pts.begin(), s.frame_pts.end(), pts);
    if (at == s.frame_pts.end()) continue;
    m.keyframes.push_back({pts, pos, static_cast<int64_t>(at - s.frame_pts.begin())});
  }
  if (m.keyframes.empty()) refuse("the video stream has no keyframe");
  return m;
}
#endif  // STOKER_HAVE_AV

}  // namespace stoker
