// Video fields through the record producer (video_fields.h).
#include "pipeline/video_fields.h"

#include <cmath>
#include <cstring>

#include "decode/clip_plan.h"
#include "decode/crop.h"
#include "decode/video_decode.h"
#include "pipeline/bucket_plan.h"
#include "stoker/media.h"
#include "stoker/order.h"

namespace stoker::internal {
namespace {

[[noreturn]] void bad_spec(const std::string& field, const std::string& why) {
  throw_error(ErrorCode::kInvalidArgument, "fields['" + field + "']: VideoClip: " + why);
}

void check_spec(const std::string& name, const VideoClipSpec& s) {
  auto range = [&](const char* what, int v, int lo, int hi) {
    if (v < lo || v > hi)
      bad_spec(name, std::string(what) + " must be " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                         std::to_string(v));
  };
  range("frames", s.frames, 1, 1024);
  range("stride", s.stride, 1, 1 << 20);
  range("clips", s.clips, 1, 64);
  range("height", s.height, 1, 8192);
  range("width", s.width, 1, 8192);
  if (!(std::isfinite(s.fps) && s.fps >= 0)) bad_spec(name, "fps must be > 0 (or 0: native frames), got " + std::to_string(s.fps));
  if (s.crop == VideoClipSpec::Crop::kRandom) {
    if (!(s.scale_min > 0 && s.scale_min <= s.scale_max && s.scale_max <= 1))
      bad_spec(name, "scale must satisfy 0 < min <= max <= 1, got (" + std::to_string(s.scale_min) + ", " +
                         std::to_string(s.scale_max) + ")");
    if (!(s.ratio_min > 0 && s.ratio_min <= s.ratio_max))
      bad_spec(name, "ratio must satisfy 0 < min <= max, got (" + std::to_string(s.ratio_min) + ", " +
                         std::to_string(s.ratio_max) + ")");
    if (!(s.flip_prob >= 0 && s.flip_prob <= 1)) bad_spec(name, "flip must be in [0, 1], got " + std::to_string(s.flip_prob));
  }
}

// One video field's clips for sample j: drawn, then decoded into place.
void put_video(const Context& ctx, const VideoOut& o, uint64_t epoch, Job& job, uint32_t j,
               std::span<const uint8_t> value, uint64_t sample, MediaDecoders& dec) {
  MediaInfo info;
  const std::span<const uint8_t> file = parse_media_value(value, info);
  if (info.kind != MediaKind::kVideo) throw_error(ErrorCode::kDataLoss, "the field's media index is not a video's");
  const uint64_t seed = sample_seed(ctx.order_opt.seed ^ (0x766964656f000000ull + o.seed_salt * 0x9E3779B97F4A7C15ull),
                                    epoch, sample);
  // Bucketed: the output is the record's bucket, the frames resized to cover it.
  VideoClipSpec spec = o.spec;
  const bool cover = o.bucketed && ctx.buckets;
  if (cover) {
    const BucketSize b = ctx.buckets->sizes.at(ctx.buckets->of.at(sample));
    spec.height = b.height, spec.width = b.width;
  }
  const std::vector<ClipPlan> plans = plan_video_clips(info, spec, seed, cover);
  const Output& pts = ctx.tensors[static_cast<size_t>(o.pts_tensor)];
  const size_t clip_bytes = static_cast<size_t>(spec.frames) * spec.height * spec.width * 3;
  const size_t clip_pts = pts.item_bytes / sizeof(double) / plans.size();
  uint8_t* out = ctx.tensor_ptr(job, o.tensor) + j * clip_bytes * plans.size();
  auto* times = reinterpret_cast<double*>(ctx.tensor_ptr(job, o.pts_tensor) + j * pts.item_bytes);
  for (size_t c = 0; c < plans.size(); ++c)
    dec.video.decode(file, info, plans[c], spec.width, spec.height, out + c * clip_bytes, times + c * clip_pts);
  if (o.audio_tensor < 0) return;
  // Each clip's span [t0, t0 + frames / fps) of the file's audio track (time mode: at[0]
  // is t0 in the video's time base, to one tick).
  const MediaInfo track = dec.audio.track_of(file);
  const Output& audio = ctx.tensors[static_cast<size_t>(o.audio_tensor)];
  const size_t clip_floats = audio.item_bytes / sizeof(float) / plans.size();
  const int channels = o.spec.audio_mono ? 1 : 2;
  const int64_t n = static_cast<int64_t>(clip_floats) / channels;
  auto* samples = reinterpret_cast<float*>(ctx.tensor_ptr(job, o.audio_tensor) + j * audio.item_bytes);
  for (size_t c = 0; c < plans.size(); ++c)
    dec.audio.decode_window(file, track, info.seconds(plans[c].at.front()), o.spec.audio_rate, channels, n,
                            samples + c * clip_floats);
}

// One audio field's window (or whole track) for sample j.
void put_audio(const Context& ctx, const AudioOut& o, uint64_t epoch, Job& job, uint32_t j,
               std::span<const uint8_t> value, uint64_t sample, MediaDecoders& dec) {
  MediaInfo info;
  const std::span<const uint8_t> file = parse_media_value(value, info);
  if (info.kind != MediaKind::kAudio) throw_error(ErrorCode::kDataLoss, "the field's media index is not audio's");
  const int channels = o.spec.mono ? 1 : 2;
  if (o.var >= 0) {
    dec.audio.decode_all(file, info, o.spec.sample_rate, channels, dec.samples);
    const auto* b = reinterpret_cast<const uint8_t*>(dec.samples.data());
    job.var[static_cast<size_t>(o.var)][j].assign(b, b + dec.samples.size() * sizeof(float));
    return;
  }
  SampleRng rng(sample_seed(ctx.order_opt.seed ^ (0x617564696f000000ull + o.seed_salt * 0x9E3779B97F4A7C15ull), epoch,
                            sample));
  const double room = std::max(0.0, info.seconds(info.duration) - o.spec.seconds);
  const double start = rng.uniform() * room;
  const Output& t = ctx.tensors[static_cast<size_t>(o.tensor)];
  const int64_t n = static_cast<int64_t>(std::llround(o.spec.seconds * o.spec.sample_rate));
  dec.audio.decode_window(file, info, start, o.spec.sample_rate, channels, n,
                          reinterpret_cast<float*>(ctx.tensor_ptr(job, o.tensor) + j * t.item_bytes));
  std::memcpy(ctx.tensor_ptr(job, o.start_tensor) + j * sizeof(double), &start, sizeof(double));
}

}  // namespace

void put_video_fields(const Context& ctx, const VideoFacts& f, int key_field, uint64_t epoch, Job& job, uint32_t j,
                      const std::vector<std::span<const uint8_t>>& fields, uint64_t sample, MediaDecoders& dec,
                      const std::string& where) {
  const std::string* name = nullptr;
  try {
    for (const VideoOut& o : f.outs) {
      name = &o.name;
      put_video(ctx, o, epoch, job, j, fields[static_cast<size_t>(o.field)], sample, dec);
    }
    for (const AudioOut& o : f.audio) {
      name = &o.name;
      put_audio(ctx, o, epoch, job, j, fields[static_cast<size_t>(o.field)], sample, dec);
    }
  } catch (const Error& e) {
    std::string key;
    if (key_field >= 0) {
      const auto k = fields[static_cast<size_t>(key_field)];
      key = " (source '" + std::string(k.begin(), k.end()) + "')";
    }
    throw Error(e.code(), where + key + ": field '" + (name ? *name : std::string()) + "': " + e.what());
  }
}

namespace {

// A record per sample, as ImageWork; each worker has a VideoDecoder besides the image one.
class VideoWork final : public RecordWork {
 public:
  VideoWork(const Context& ctx, const ImageFacts& img, const VideoFacts& vid) : ctx_(ctx), img_(img), vid_(vid) {}
  void plan_locked(const Run& run, Job& job, std::vector<Use>& uses) const override {
    plan_record_per_sample(run, job, uses);
  }
  std::unique_ptr<Worker> worker() const override { return std::make_unique<VideoWorker>(*this); }
  uint64_t records_per_batch() const override { return ctx_.opt->batch_size; }

 private:
  class VideoWorker final : public Worker {
   public:
    explicit VideoWorker(const VideoWork& w) : w_(w) {}
    void put(const Run& run, Job& job, const Use& use, const std::vector<std::span<const uint8_t>>& fields,
             const std::string& where) override {
      put_image_fields(w_.ctx_, w_.img_, run.epoch, job, use.j, fields, use.record, image_, pixels_, results_, where);
      put_video_fields(w_.ctx_, w_.vid_, w_.img_.key_field, run.epoch, job, use.j, fields, use.record, video_, where);
    }

   private:
    const VideoWork& w_;
    ImageDecoder image_;
    MediaDecoders video_;
    std::vector<uint8_t> pixels_;
    std::vector<DecodeResult> results_;
  };
  const Context& ctx_;
  const ImageFacts img_;
  const VideoFacts vid_;
};

AudioOut plan_audio(const Field& f, int i, const AudioClipSpec& s, Context& ctx) {
  auto bad = [&](const std::string& why) {
    throw_error(ErrorCode::kInvalidArgument, "fields['" + f.name + "']: AudioClip: " + why);
  };
  if (f.kind != FieldKind::kAudio) bad(std::string("needs an audio field; '") + f.name + "' is " + field_kind_name(f.kind));
  if (!media_available())
    throw_error(ErrorCode::kUnavailable, "fields['" + f.name + "']: this stoker was built without libav: audio fields "
                                         "cannot be decoded");
  if (s.sample_rate < 1000 || s.sample_rate > 384000)
    bad("sample_rate must be 1000..384000, got " + std::to_string(s.sample_rate));
  if (!(std::isfinite(s.seconds) && s.seconds >= 0 && s.seconds * s.sample_rate <= (1 << 28)))
    bad("seconds must be >= 0 (0: whole tracks) and hold at most 2^28 samples, got " + std::to_string(s.seconds));
  AudioOut o;
  o.field = i;
  o.name = f.name;
  o.spec = s;
  const int64_t channels = s.mono ? 1 : 2;
  if (s.seconds > 0) {
    const int64_t n = std::llround(s.seconds * s.sample_rate);
    if (n < 1) bad("seconds * sample_rate is under one sample");
    o.tensor = ctx.add_tensor(f.name, ElemType::kFloat32, {channels, n});
    o.start_tensor = ctx.add_tensor(f.name + ".start", ElemType::kFloat64, {});
  } else {
    o.var = ctx.add_var(Output::variable(f.name, TensorKind::kRagged, ElemType::kFloat32, {channels}));
  }
  return o;
}

}  // namespace

VideoFacts plan_video_fields(const LoaderOptions& opt, const Schema& schema, Context& ctx) {
  VideoFacts facts;
  uint64_t salt = 0;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& f = schema.fields[i];
    const auto it = opt.fields.find(f.name);
    if (it != opt.fields.end() && it->second.kind == FieldTransform::Kind::kAudioClip) {
      facts.audio.push_back(plan_audio(f, static_cast<int>(i), it->second.audio, ctx));
      facts.audio.back().seed_salt = salt++;
      continue;
    }
    if (it == opt.fields.end() || it->second.kind != FieldTransform::Kind::kVideoClip) continue;
    if (f.kind != FieldKind::kVideo)
      bad_spec(f.name, std::string("needs a video field; '") + f.name + "' is " + field_kind_name(f.kind));
    if (!media_available())
      throw_error(ErrorCode::kUnavailable, "fields['" + f.name + "']: this stoker was built without libav: video "
                                           "fields cannot be decoded");
    VideoOut o;
    o.field = static_cast<int>(i);
    o.name = f.name;
    o.spec = it->second.video;
    check_spec(f.name, o.spec);
    std::vector<int64_t> shape{o.spec.frames, o.spec.height, o.spec.width, 3};
    std::vector<int64_t> pts_shape{o.spec.frames};
    if (o.spec.clips > 1) {
      shape.insert(shape.begin(), o.spec.clips);
      pts_shape.insert(pts_shape.begin(), o.spec.clips);
    }
    o.tensor = ctx.add_tensor(f.name, ElemType::kUint8, shape);
    o.pts_tensor = ctx.add_tensor(f.name + ".pts", ElemType::kFloat64, pts_shape);
    if (o.spec.audio_rate != 0) {
      if (o.spec.fps <= 0) bad_spec(f.name, "audio follows a clip's time span: it needs fps > 0");
      if (o.spec.audio_rate < 1000 || o.spec.audio_rate > 384000)
        bad_spec(f.name, "audio sample_rate must be 1000..384000, got " + std::to_string(o.spec.audio_rate));
      const int64_t n = std::llround(o.spec.frames / o.spec.fps * o.spec.audio_rate);
      if (n < 1 || n > (1 << 28)) bad_spec(f.name, "audio: frames / fps * sample_rate must be 1..2^28 samples");
      std::vector<int64_t> audio_shape{o.spec.audio_mono ? 1 : 2, n};
      if (o.spec.clips > 1) audio_shape.insert(audio_shape.begin(), o.spec.clips);
      o.audio_tensor = ctx.add_tensor(f.name + ".audio", ElemType::kFloat32, audio_shape);
    }
    o.seed_salt = salt++;
    facts.outs.push_back(std::move(o));
  }
  return facts;
}

std::unique_ptr<RecordWork> make_video_work(const Context& ctx, const ImageFacts& image, const VideoFacts& video) {
  return std::make_unique<VideoWork>(ctx, image, video);
}

}  // namespace stoker::internal
