// One record of an image dataset into one sample of a batch: the record's fields sliced
// out of what was read (record_fields), then every field's output written at its place
// in the batch (put_image_fields) as plan_image_fields planned it. The record producer
// runs these per sample (ImageWork, below); the in-memory decode limit (benchlib/decode_limit.h) runs the very
// same two over records held in memory, so the limit is the loader's own work per record.
#include <cstdio>
#include <cstring>

#include "format/record_checks.h"
#include "format/shard_layout.h"
#include "pipeline/bucket_plan.h"
#include "pipeline/producer.h"
#include "stoker/crc32c.h"
#include "stoker/media.h"
#include "stoker/order.h"

namespace stoker::internal {

std::vector<std::span<const uint8_t>> record_fields(const Schema& schema, const RecordLocation& loc,
                                                    std::span<const uint8_t> stored, std::vector<uint8_t>& scratch,
                                                    const std::string& where) {
  if (loc.flags & kRecordZstd) {
    scratch.resize(loc.raw_size);
    return unpack_record_into(schema, loc, stored, scratch, where);
  }
  // Zero-copy: check the CRC and slice the fields out of the buffer read.
  check_record_crc(schema, loc, stored, where);
  return slice_fields(stored.data(), loc);
}

namespace {

void put_fields(const Context& ctx, const ImageFacts& f, uint64_t epoch, Job& job, uint32_t j,
                const std::vector<std::span<const uint8_t>>& fields, uint64_t sample, ImageDecoder& dec,
                std::vector<uint8_t>& pixels, std::vector<DecodeResult>& results) {
  const LoaderOptions& opt = *ctx.opt;
  results.resize(f.outs.size());
  for (size_t x = 0; x < f.outs.size(); ++x) {
    const FieldOut& o = f.outs[x];
    const std::span<const uint8_t> bytes = fields[static_cast<size_t>(o.field)];
    if (o.bucketed && ctx.buckets) {
      const uint64_t seed = sample_seed(ctx.order_opt.seed + o.seed_salt * 0x9E3779B97F4A7C15ull, epoch, sample);
      results[x] = put_bucketed(*ctx.buckets, o, opt, bytes, sample, seed,
                                o.leader >= 0 ? &results[static_cast<size_t>(o.leader)] : nullptr, dec, pixels,
                                ctx.tensor_ptr(job, o.tensor), j);
      continue;
    }
    switch (o.how) {
      case FieldOut::How::kImage: {
        const Output& tl = ctx.tensors[static_cast<size_t>(o.tensor)];
        uint8_t* out = ctx.tensor_ptr(job, o.tensor) + j * tl.item_bytes;
        // The first image field draws as it always has; others get draws of their own.
        const uint64_t seed = sample_seed(ctx.order_opt.seed + o.seed_salt * 0x9E3779B97F4A7C15ull, epoch, sample);
        if (opt.pixel_format == PixelFormat::kU8HWC) {
          results[x] = dec.decode(bytes, o.transform, seed, out, tl.item_bytes);
        } else {
          const int S = o.transform.size;
          pixels.resize(static_cast<size_t>(S) * S * 3);
          results[x] = dec.decode(bytes, o.transform, seed, pixels.data(), pixels.size());
          convert_pixels(pixels.data(), S, S, opt.pixel_format, opt.mean, opt.std, out);
        }
        break;
      }
      case FieldOut::How::kFollow: {
        const Output& tl = ctx.tensors[static_cast<size_t>(o.tensor)];
        results[x] = dec.decode_with(bytes, results[static_cast<size_t>(o.leader)].geometry, o.follow,
                                     ctx.tensor_ptr(job, o.tensor) + j * tl.item_bytes, tl.item_bytes);
        break;
      }
      case FieldOut::How::kCopy:
        // Stored little-endian, and so are the tensors on the hosts we build for.
        std::memcpy(ctx.tensor_ptr(job, o.tensor) + j * o.bytes, bytes.data(), o.bytes);
        break;
      case FieldOut::How::kVar: {
        MediaInfo media;  // a video or audio field as stored: its file, not the index
        const std::span<const uint8_t> v = o.media ? parse_media_value(bytes, media) : bytes;
        job.var[static_cast<size_t>(o.var)][j].assign(v.begin(), v.end());
        break;
      }
    }
  }
  if (f.missing_label_t >= 0) {
    const int64_t none = -1;
    std::memcpy(ctx.tensor_ptr(job, f.missing_label_t) + j * 8, &none, 8);
  }
  const int64_t gi = static_cast<int64_t>(sample);
  std::memcpy(ctx.tensor_ptr(job, f.index_t) + j * 8, &gi, 8);
  if (f.bucket_t >= 0 && ctx.buckets) {
    const int64_t b = ctx.buckets->of[sample];
    std::memcpy(ctx.tensor_ptr(job, f.bucket_t) + j * 8, &b, 8);
  }
}

}  // namespace

void put_image_fields(const Context& ctx, const ImageFacts& f, uint64_t epoch, Job& job, uint32_t j,
                      const std::vector<std::span<const uint8_t>>& fields, uint64_t sample, ImageDecoder& dec,
                      std::vector<uint8_t>& pixels, std::vector<DecodeResult>& results, const std::string& where) {
  try {
    put_fields(ctx, f, epoch, job, j, fields, sample, dec, pixels, results);
  } catch (const Error& e) {
    std::string key;
    if (f.key_field >= 0) {
      const auto k = fields[static_cast<size_t>(f.key_field)];
      key = " (source '" + std::string(k.begin(), k.end()) + "')";
    }
    throw Error(e.code(), where + key + ": " + e.what());
  }
}

namespace {

// Images through the record producer: one record per sample, decoded into its place.
class ImageWork final : public RecordWork {
 public:
  ImageWork(const Context& ctx, const ImageFacts& f) : ctx_(ctx), f_(f) {}
  void plan_locked(const Run& run, Job& job, std::vector<Use>& uses) const override {
    plan_record_per_sample(run, job, uses);
  }
  std::unique_ptr<Worker> worker() const override { return std::make_unique<ImageWorker>(*this); }
  uint64_t records_per_batch() const override { return ctx_.opt->batch_size; }

 private:
  class ImageWorker final : public Worker {
   public:
    explicit ImageWorker(const ImageWork& w) : w_(w) {}
    void put(const Run& run, Job& job, const Use& use, const std::vector<std::span<const uint8_t>>& fields,
             const std::string& where) override {
      put_image_fields(w_.ctx_, w_.f_, run.epoch, job, use.j, fields, use.record, dec_, pixels_, results_, where);
    }

   private:
    const ImageWork& w_;
    ImageDecoder dec_;
    std::vector<uint8_t> pixels_;
    std::vector<DecodeResult> results_;
  };
  const Context& ctx_;
  const ImageFacts f_;
};

}  // namespace

std::unique_ptr<RecordWork> make_image_work(const Context& ctx, const ImageFacts& facts) {
  return std::make_unique<ImageWork>(ctx, facts);
}

}  // namespace stoker::internal
