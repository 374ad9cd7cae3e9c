// Aspect-ratio buckets in the Loader (bucket_plan.h).
#include "pipeline/bucket_plan.h"

#include <algorithm>
#include <chrono>

#include "decode/clip_plan.h"
#include "decode/media_index.h"
#include "pipeline/producer.h"
#include "pipeline/video_fields.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/log.h"
#include "util/parallel_units.h"

namespace stoker::internal {
namespace {

// Most headers (JPEG's SOF after its APPn segments, PNG's IHDR, WebP's first chunk) lie
// in a record's first page; a large EXIF or ICC segment moves a JPEG's further. A media
// index fits in it up to 165 keyframes (108 bytes and 24 a keyframe).
constexpr size_t kHeaderProbe = 4096;
constexpr uint64_t kRecordsPerUnit = 256;  // records a header-reading thread takes at a time
constexpr unsigned kMinHeaderThreads = 8;

[[noreturn]] void refuse(const std::string& why) { throw_error(ErrorCode::kInvalidArgument, "buckets: " + why); }

// Where field `field` of an uncompressed record starts in the shard file.
uint64_t field_offset(const RecordLocation& loc, int field) {
  uint64_t at = loc.offset;
  for (int f = 0; f < field; ++f) at += loc.field_sizes[static_cast<size_t>(f)];
  return at;
}

// The record's `__key__` (" (source 'KEY')"), for an error about it: read on its own,
// unchecked, as the record's CRC may be what is wrong; "" when there is none to read.
std::string source_of(const ShardReader& shard, uint64_t i, int key_field) {
  const RecordLocation& loc = shard.location(i);
  if (key_field < 0 || (loc.flags & kRecordZstd)) return "";
  std::string key(std::min<size_t>(loc.field_sizes[static_cast<size_t>(key_field)], 256), '\0');
  try {
    if (pread_full(shard.fd(), key.data(), key.size(), field_offset(loc, key_field), shard.path()) != key.size()) return "";
  } catch (const Error&) {
    return "";
  }
  return " (source '" + key + "')";
}

StoredSize image_size(std::span<const uint8_t> head, bool whole) {
  try {
    const ImageInfo info = probe_image(head);
    return StoredSize{info.width, info.height, 0};
  } catch (const Error&) {
    if (whole) throw;
    return StoredSize{0, 0, SIZE_MAX};
  }
}

// The media index's frame size, turned upright by its rotation.
StoredSize video_size(std::span<const uint8_t> head, bool whole) {
  const uint32_t need = media_index_bytes(head);
  if (head.size() < need && !whole) return StoredSize{0, 0, need};
  const MediaInfo m = parse_media_index(head);
  if (m.kind != MediaKind::kVideo) throw_error(ErrorCode::kDataLoss, "the field's media index is not a video's");
  return StoredSize{upright_width(m), upright_height(m), 0};
}

// The kinds of field whose stored size picks a bucket: a new kind is a row here.
struct SourceRow {
  FieldKind kind;
  BucketSource source;
};
constexpr SourceRow kSources[] = {
    {FieldKind::kImage, {"image", image_size}},
    {FieldKind::kVideo, {"video", video_size}},
};

const BucketSource* source_of_kind(FieldKind kind) {
  for (const SourceRow& row : kSources)
    if (row.kind == kind) return &row.source;
  return nullptr;
}

StoredSize probe_field(const ShardReader& shard, uint64_t i, int field, int key_field, const BucketSource& source,
                       std::vector<uint8_t>& buf) {
  const RecordLocation& loc = shard.location(i);
  try {
    if (loc.flags & kRecordZstd) {
      const Record r = shard.read_record(i);
      return source.read(r.fields.at(static_cast<size_t>(field)), true);
    }
    const uint64_t at = field_offset(loc, field);
    const size_t size = loc.field_sizes[static_cast<size_t>(field)];
    for (size_t head = std::min(size, kHeaderProbe);;) {
      buf.resize(head);
      if (pread_full(shard.fd(), buf.data(), head, at, shard.path()) != head) throw_error(ErrorCode::kDataLoss, "short read");
      const StoredSize got = source.read(buf, head == size);
      if (got.need == 0) return got;
      // A reader that asks for no more than it had would loop: the whole field then.
      head = got.need > head ? std::min(size, got.need) : size;
    }
  } catch (const Error& e) {
    throw Error(ErrorCode::kDataLoss, shard.path() + ": record " + std::to_string(i) + source_of(shard, i, key_field) +
                                          ": buckets: its " + source.what + " size cannot be read: " + e.what());
  }
}

}  // namespace

BucketedField plan_bucket_outputs(const LoaderOptions& opt, const Schema& schema, Context& ctx, ImageFacts& img,
                                  VideoFacts& vid) {
  BucketedField out;
  if (!opt.buckets.enabled()) return out;
  const std::vector<BucketSize> sizes = resolve_buckets(opt.buckets);
  // The first field in schema order that is a decoded image or a clip.
  auto lead = std::find_if(img.outs.begin(), img.outs.end(),
                           [](const FieldOut& o) { return o.how == FieldOut::How::kImage; });
  VideoOut* clip = vid.outs.empty() ? nullptr : &vid.outs.front();
  if (lead == img.outs.end() && !clip)
    refuse("no image field is decoded and no video field is cut into clips (a transform, or fields= with "
           "RandomResizedCrop, CenterCrop or VideoClip, is needed)");
  const bool image_first = lead != img.outs.end() && (!clip || lead->field < clip->field);
  out.field = image_first ? lead->field : clip->field;
  out.source = source_of_kind(schema.fields.at(static_cast<size_t>(out.field)).kind);
  if (!out.source) refuse("field '" + schema.fields[static_cast<size_t>(out.field)].name + "' has no stored size to bucket by");
  const BucketSize widest = *std::max_element(sizes.begin(), sizes.end(), [](const BucketSize& a, const BucketSize& b) {
    return int64_t{a.height} * a.width < int64_t{b.height} * b.width;
  });
  // Each shaped tensor is laid out for the largest bucket; a batch uses its first
  // elements, as many as its bucket's size needs.
  auto reshape = [&](int tensor, size_t h_dim) {
    Output& t = ctx.tensors[static_cast<size_t>(tensor)];
    std::vector<int64_t> shape = t.shape;
    shape.at(h_dim) = widest.height;
    shape.at(h_dim + 1) = widest.width;
    t = Output::dense(t.name, t.dtype, shape);
    out.shaped.push_back(BucketShaped{tensor, std::move(shape), h_dim});
  };
  if (image_first) {
    const int leader = static_cast<int>(lead - img.outs.begin());
    const bool chw = opt.pixel_format == PixelFormat::kU8CHW || opt.pixel_format == PixelFormat::kF32CHW ||
                     opt.pixel_format == PixelFormat::kF16CHW;
    lead->bucketed = true;
    reshape(lead->tensor, chw ? 1 : 0);
    for (FieldOut& o : img.outs)
      if (o.how == FieldOut::How::kFollow && o.leader == leader) {
        o.bucketed = true;
        reshape(o.tensor, 0);  // [H, W, C]
      }
  } else {
    clip->bucketed = true;
    // [T, H, W, 3] or [clips, T, H, W, 3]
    reshape(clip->tensor, ctx.tensors[static_cast<size_t>(clip->tensor)].shape.size() - 3);
  }
  img.bucket_t = ctx.add_tensor("bucket", ElemType::kInt64, {});
  return out;
}

std::shared_ptr<const BucketPlan> plan_buckets(const Context& ctx, BucketedField field, int key_field) {
  const LoaderOptions& opt = *ctx.opt;
  if (!opt.buckets.enabled()) return nullptr;
  if (ctx.cached) refuse("a remote dataset cannot be bucketed yet (each record's stored size is read when the Loader opens)");
  if (opt.on_error != OnError::kError) refuse("on_error='skip' cannot keep a batch within one bucket; use on_error='error'");
  if (field.field < 0) refuse("needs a dataset of records with a decoded image field or a video field cut into clips");
  auto plan = std::make_shared<BucketPlan>();
  plan->sizes = resolve_buckets(opt.buckets);
  plan->group = opt.batch_size * ctx.rank.world_size;
  plan->fill = !opt.drop_last;
  plan->bucketed = std::move(field);
  const BucketSource& source = *plan->bucketed.source;
  const int bucket_field = plan->bucketed.field;

  const auto t0 = std::chrono::steady_clock::now();
  const Dataset& ds = *ctx.dataset;
  plan->of.assign(ds.record_count(), 0);
  std::vector<uint64_t> first(ds.shard_count() + 1, 0);
  for (size_t s = 0; s < ds.shard_count(); ++s) first[s + 1] = first[s] + ds.manifest().shards[s].records;
  plan->width.assign(ds.record_count(), 0);
  plan->height.assign(ds.record_count(), 0);
  // Units of kRecordsPerUnit records of one shard, so a dataset of few shards still
  // spreads over every thread.
  std::vector<std::pair<size_t, uint64_t>> units;  // (shard, first record in it)
  for (size_t s = 0; s < ds.shard_count(); ++s)
    for (uint64_t i = 0; i < ds.manifest().shards[s].records; i += kRecordsPerUnit) units.emplace_back(s, i);
  // The reads wait on storage more than they use a CPU: more threads than decoders keep
  // more of them in flight (a cold dataset on NVMe).
  const unsigned n = static_cast<unsigned>(
      std::clamp<size_t>(std::max(ctx.threads, kMinHeaderThreads), 1, std::max<size_t>(units.size(), 1)));
  parallel_units<std::vector<uint8_t>>(units.size(), n, [&](size_t u, std::vector<uint8_t>& buf) {
    const auto [s, begin] = units[u];
    const auto shard = ds.shard(s);
    for (uint64_t i = begin; i < std::min(begin + kRecordsPerUnit, shard->record_count()); ++i) {
      const StoredSize size = probe_field(*shard, i, bucket_field, key_field, source, buf);
      const uint64_t r = first[s] + i;
      plan->of[r] = nearest_bucket(plan->sizes, size.width, size.height);
      plan->width[r] = static_cast<uint32_t>(size.width);
      plan->height[r] = static_cast<uint32_t>(size.height);
    }
  });
  plan->counts.assign(plan->sizes.size(), 0);
  for (uint32_t b : plan->of) ++plan->counts[b];
  plan->open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("buckets: the " + std::string(source.what) + " sizes of " + std::to_string(ds.record_count()) +
           " records read in " + std::to_string(plan->open_s) + " s on " + std::to_string(n) + " threads");
  return plan;
}

std::unique_ptr<EpochOrder> bucket_epoch_order(const Context& ctx, const BucketPlan& plan, uint64_t epoch) {
  const BucketOrder order(plan.of, static_cast<uint32_t>(plan.sizes.size()), ctx.order_opt.seed, epoch, plan.group,
                          plan.fill, ctx.order_opt.kind != OrderKind::kSequential);
  return std::make_unique<EpochOrder>(ctx.order_opt, ctx.layout, epoch, order.sequence());
}

namespace {

// A uniform double in [0, 1) from the top 53 bits of a hash.
double unit(uint64_t x) { return static_cast<double>(mix64(x) >> 11) * 0x1.0p-53; }

}  // namespace

DecodeResult put_bucketed(const BucketPlan& plan, const FieldOut& o, const LoaderOptions& opt,
                          std::span<const uint8_t> bytes, uint64_t record, uint64_t seed, const DecodeResult* leader,
                          ImageDecoder& dec, std::vector<uint8_t>& pixels, uint8_t* tensor, uint32_t j) {
  const BucketSize b = plan.sizes.at(plan.of.at(record));
  if (o.how == FieldOut::How::kFollow) {
    FollowOutput fo = o.follow;
    fo.width = b.width;
    fo.height = b.height;
    const size_t item = static_cast<size_t>(b.width) * b.height * fo.channels;
    return dec.decode_with(bytes, leader->geometry, fo, tensor + j * item, item);
  }
  ImageGeometry g;
  g.src_width = static_cast<int>(plan.width[record]);
  g.src_height = static_cast<int>(plan.height[record]);
  // Cover the bucket: the window is the bucket's shape at the scale where the image's
  // short side (relative to the bucket's) just fits, placed at random or centred.
  const double scale = std::max(static_cast<double>(b.width) / g.src_width, static_cast<double>(b.height) / g.src_height);
  g.w = std::min<double>(b.width / scale, g.src_width);
  g.h = std::min<double>(b.height / scale, g.src_height);
  const bool train = o.transform.kind == ImageTransform::Kind::kTrain;
  const double u = train ? unit(seed ^ 0x63726f702d78ull) : 0.5, v = train ? unit(seed ^ 0x63726f702d79ull) : 0.5;
  g.x = (g.src_width - g.w) * u;
  g.y = (g.src_height - g.h) * v;
  g.flip = train && unit(seed ^ 0x666c6970ull) < o.transform.flip_prob;
  g.clip_to_window = false;  // resize, then crop: the filter may read past the window
  g.out_width = b.width;
  g.out_height = b.height;
  FollowOutput fo;
  fo.width = b.width;
  fo.height = b.height;
  fo.max_pixels = o.transform.max_pixels;
  fo.allow_dct_scaling = o.transform.allow_dct_scaling;
  const size_t item = pixel_format_bytes(b.height, b.width, opt.pixel_format);
  if (opt.pixel_format == PixelFormat::kU8HWC) return dec.decode_with(bytes, g, fo, tensor + j * item, item);
  pixels.resize(static_cast<size_t>(b.width) * b.height * 3);
  const DecodeResult r = dec.decode_with(bytes, g, fo, pixels.data(), pixels.size());
  convert_pixels(pixels.data(), b.height, b.width, opt.pixel_format, opt.mean, opt.std, tensor + j * item);
  return r;
}

void shape_bucket_views(const BucketPlan& plan, uint32_t bucket, uint64_t n, std::vector<TensorView>& views) {
  const BucketSize b = plan.sizes.at(bucket);
  for (const BucketShaped& s : plan.bucketed.shaped) {
    TensorView& v = views.at(static_cast<size_t>(s.tensor));
    v.shape.assign(1, static_cast<int64_t>(n));
    v.shape.insert(v.shape.end(), s.shape.begin(), s.shape.end());
    v.shape[s.h_dim + 1] = b.height;
    v.shape[s.h_dim + 2] = b.width;
  }
}

}  // namespace stoker::internal
