#include "decode/audio_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "stoker/error.h"

#ifdef STOKER_HAVE_AV
#include "decode/av_input.h"
extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
}
#endif

namespace stoker::internal {

#ifndef STOKER_HAVE_AV
struct AudioDecoder::Impl {};
AudioDecoder::AudioDecoder() = default;
AudioDecoder::~AudioDecoder() = default;
void AudioDecoder::decode_window(std::span<const uint8_t>, const MediaInfo&, double, int, int, int64_t, float*) {
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav: audio fields cannot be decoded");
}
void AudioDecoder::decode_all(std::span<const uint8_t>, const MediaInfo&, int, int, std::vector<float>&) {
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav: audio fields cannot be decoded");
}
MediaInfo AudioDecoder::track_of(std::span<const uint8_t>) {
  throw_error(ErrorCode::kUnavailable, "this stoker was built without libav: audio fields cannot be decoded");
}
#else
namespace {

[[noreturn]] void refuse(const std::string& why) { throw_error(ErrorCode::kDataLoss, why); }

struct SwrFree {
  void operator()(SwrContext* s) const noexcept { swr_free(&s); }
};

}  // namespace

struct AudioDecoder::Impl {
  AvInput in;
  AvCodecContextPtr dec;
  std::unique_ptr<SwrContext, SwrFree> swr;
  AvPacketPtr pkt = make_av_packet();
  AvFramePtr frame = make_av_frame();
  std::vector<float> planes[2];  // resampled output so far, per channel

  // Decodes from `start_pts` (after a seek there when > the stream's start) until `want`
  // output samples past `skip_s` seconds after the first frame are in `planes`, or the end.
  // Returns the time (seconds from the stream's start) of planes' first sample.
  double run(std::span<const uint8_t> file, const MediaInfo& info, int64_t start_pts, int rate, int channels,
             const std::function<int64_t(double)>& want_end) {
    in.open(file, false);
    AVFormatContext* fmt = in.fmt();
    if (info.stream < 0 || static_cast<unsigned>(info.stream) >= fmt->nb_streams ||
        fmt->streams[info.stream]->codecpar->codec_type != AVMEDIA_TYPE_AUDIO)
      refuse("stream " + std::to_string(info.stream) + " is not the indexed audio stream");
    for (unsigned i = 0; i < fmt->nb_streams; ++i)
      fmt->streams[i]->discard = static_cast<int>(i) == info.stream ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    dec.reset();
    dec = open_decoder(fmt->streams[info.stream]->codecpar);
    swr.reset();
    for (auto& p : planes) p.clear();
    if (start_pts > info.start_pts) {
      if (int rc = av_seek_frame(fmt, info.stream, start_pts, AVSEEK_FLAG_BACKWARD); rc < 0) {
        in.open(file, false);  // not seekable: from the start
        fmt = in.fmt();
      }
    }
    double first = -1;
    auto convert = [&](const AVFrame* f) {
      if (!swr) {
        if (!f) return;
        SwrContext* s = nullptr;
        // Zeroed: av_channel_layout_copy uninits its destination first (a custom layout's map is freed).
        AVChannelLayout out_layout{}, in_layout{};
        av_channel_layout_default(&out_layout, channels);
        // libswresample 4 takes the layouts by non-const pointer.
        if (av_channel_layout_copy(&in_layout, &f->ch_layout) < 0) refuse("the frame's channel layout cannot be read");
        const int rc = swr_alloc_set_opts2(&s, &out_layout, AV_SAMPLE_FMT_FLTP, rate, &in_layout,
                                           static_cast<AVSampleFormat>(f->format), f->sample_rate, 0, nullptr);
        av_channel_layout_uninit(&out_layout);
        av_channel_layout_uninit(&in_layout);
        swr.reset(s);
        if (rc < 0 || swr_init(s) < 0) refuse("libswresample cannot convert this stream: " + av_error(rc));
      }
      const int cap = static_cast<int>(swr_get_out_samples(swr.get(), f ? f->nb_samples : 0));
      if (cap <= 0) return;
      const size_t at = planes[0].size();
      uint8_t* outp[2] = {};
      for (int c = 0; c < channels; ++c) {
        planes[c].resize(at + static_cast<size_t>(cap));
        outp[c] = reinterpret_cast<uint8_t*>(planes[c].data() + at);
      }
      const int n = swr_convert(swr.get(), outp, cap, f ? const_cast<const uint8_t**>(f->extended_data) : nullptr,
                                f ? f->nb_samples : 0);
      if (n < 0) refuse("resampling: " + av_error(n));
      for (int c = 0; c < channels; ++c) planes[c].resize(at + static_cast<size_t>(n));
    };
    auto drain = [&]() {
      for (;;) {
        const int rc = avcodec_receive_frame(dec.get(), frame.get());
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
        if (rc < 0) refuse("decoding: " + av_error(rc));
        if (first < 0) {
          const int64_t pts = frame->pts != AV_NOPTS_VALUE ? frame->pts : frame->best_effort_timestamp;
          first = pts == AV_NOPTS_VALUE ? 0 : info.seconds(pts - info.start_pts);
        }
        convert(frame.get());
        av_frame_unref(frame.get());
      }
    };
    const auto enough = [&] { return first >= 0 && static_cast<int64_t>(planes[0].size()) >= want_end(first); };
    while (!enough()) {
      const int rc = av_read_frame(fmt, pkt.get());
      if (rc == AVERROR_EOF) break;
      if (rc < 0) refuse("demuxing: " + av_error(rc));
      if (pkt->stream_index != info.stream) {
        av_packet_unref(pkt.get());
        continue;
      }
      if (pkt->flags & AV_PKT_FLAG_CORRUPT) {
        av_packet_unref(pkt.get());
        refuse("a packet is truncated or corrupt");
      }
      int sent;
      while ((sent = avcodec_send_packet(dec.get(), pkt.get())) == AVERROR(EAGAIN)) drain();
      av_packet_unref(pkt.get());
      if (sent < 0) refuse("decoding: " + av_error(sent));
      drain();
    }
    if (!enough()) {
      avcodec_send_packet(dec.get(), nullptr);
      drain();
      if (swr) convert(nullptr);  // the resampler's tail
    }
    return std::max(first, 0.0);
  }
};

AudioDecoder::AudioDecoder() : impl_(std::make_unique<Impl>()) {}
AudioDecoder::~AudioDecoder() = default;

void AudioDecoder::decode_window(std::span<const uint8_t> file, const MediaInfo& info, double start_s, int rate,
                                 int channels, int64_t samples, float* out) {
  Impl& m = *impl_;
  const int64_t start_pts = info.start_pts + static_cast<int64_t>(std::floor(start_s * info.tb_den / info.tb_num));
  auto offset = [&](double first) { return static_cast<int64_t>(std::llround((start_s - first) * rate)); };
  const double first = m.run(file, info, start_pts, rate, channels, [&](double f) { return std::max<int64_t>(0, offset(f)) + samples; });
  const int64_t skip = offset(first);
  for (int c = 0; c < channels; ++c) {
    float* dst = out + static_cast<size_t>(c) * static_cast<size_t>(samples);
    const std::vector<float>& p = m.planes[c];
    for (int64_t i = 0; i < samples; ++i) {
      const int64_t at = skip + i;
      dst[i] = at >= 0 && at < static_cast<int64_t>(p.size()) ? p[static_cast<size_t>(at)] : 0.f;
    }
  }
}

MediaInfo AudioDecoder::track_of(std::span<const uint8_t> file) {
  Impl& m = *impl_;
  m.in.open(file, false);
  AVFormatContext* fmt = m.in.fmt();
  const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0);
  if (si < 0) refuse("the video has no audio track");
  const AVStream* st = fmt->streams[si];
  MediaInfo info;
  info.kind = MediaKind::kAudio;
  info.stream = si;
  info.tb_num = st->time_base.num;
  info.tb_den = st->time_base.den;
  if (info.tb_num <= 0 || info.tb_den <= 0) refuse("the audio track has no time base");
  // decode_window's times count from start_pts: 0 makes them the container's own, those
  // of the video's frames.
  info.start_pts = 0;
  info.sample_rate = st->codecpar->sample_rate;
  info.channels = st->codecpar->ch_layout.nb_channels;
  return info;
}

void AudioDecoder::decode_all(std::span<const uint8_t> file, const MediaInfo& info, int rate, int channels,
                              std::vector<float>& out) {
  Impl& m = *impl_;
  m.run(file, info, info.start_pts, rate, channels, [](double) { return INT64_MAX; });
  const size_t n = m.planes[0].size();
  out.resize(n * static_cast<size_t>(channels));
  for (size_t i = 0; i < n; ++i)
    for (int c = 0; c < channels; ++c) out[i * static_cast<size_t>(channels) + static_cast<size_t>(c)] = m.planes[c][i];
}
#endif  // STOKER_HAVE_AV

}  // namespace stoker::internal
