// Aspect-ratio buckets in the Loader (LoaderOptions::buckets, stoker/buckets.h): planned
// once when the Loader opens, applied per epoch and per batch.
//
// Opening: every record's stored image width and height are read from its image
// header — the first 4 KiB of the field's bytes (all of them when the header lies
// further, or the record is compressed), on at least 8 threads (the reads wait on
// storage), once for the Loader's life — and the record goes to the bucket nearest its
// aspect. Nothing is decoded; the partial read is not CRC-checked (the decode checks the
// whole record when it reads it).
// Per epoch: BucketOrder over those buckets, with the global batch (batch_size × world
// size) as its group, is the epoch's order, so step k of every rank is group k: one
// bucket. Per batch: the bucketed image field and its followers are written at the
// bucket's size, and their tensors go out with the bucket's shape; "bucket" int64 [B]
// says which (an index into the resolved list).
//
// Threading: a BucketPlan is immutable once made; read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "stoker/batch.h"
#include "stoker/buckets.h"
#include "stoker/image.h"
#include "stoker/loader.h"
#include "stoker/order.h"

namespace stoker::internal {

struct Context;
struct FieldOut;
struct ImageFacts;

struct BucketPlan {
  std::vector<BucketSize> sizes;  ///< resolve_buckets(LoaderOptions::buckets)
  std::vector<uint32_t> of;       ///< each global record's bucket
  std::vector<uint64_t> counts;   ///< records per bucket
  uint64_t group = 1;             ///< the global batch: batch_size × world size
  bool fill = true;               ///< !drop_last: a bucket's last group is completed with repeats
  std::vector<uint32_t> width, height;  ///< each global record's stored image size
  /// A tensor (Context::tensors) whose sample shape is the bucket's.
  struct Shaped {
    int tensor = -1;
    int channels = 3;
    bool chw = false;  ///< [C, H, W] (else [H, W, C])
  };
  std::vector<Shaped> shaped;
  bool chw = false;  ///< the pixel format is [C, H, W]
  double open_s = 0;  ///< seconds the headers took to read
};

/// Marks the first decoded image field of `img` and the fields that Follow it as
/// bucketed, lays their tensors out for the largest bucket and adds "bucket". Called by
/// plan_image_fields; nothing without LoaderOptions::buckets.
void plan_bucket_outputs(const LoaderOptions& opt, Context& ctx, ImageFacts& img);

/// Checks the options (kInvalidArgument naming what cannot be bucketed: token data,
/// packed samples, a remote dataset, OnError::kSkip, no decoded image field) and reads
/// every record's image size (kDataLoss naming the shard, record and reason when a
/// header cannot be read). Null when LoaderOptions::buckets is not enabled.
std::shared_ptr<const BucketPlan> plan_buckets(const Context& ctx, const ImageFacts& img);

/// The epoch's order of a bucketed Loader (BucketOrder's sequence).
std::unique_ptr<EpochOrder> bucket_epoch_order(const Context& ctx, const BucketPlan& plan, uint64_t epoch);

/// The bucket of a batch whose first sample is record `first`.
inline uint32_t batch_bucket(const BucketPlan& plan, uint64_t first) { return plan.of[first]; }

/// Writes sample j of a bucketed output `o` (FieldOut::bucketed) of record `record`
/// into `tensor` (the output's memory in the batch), at the record's bucket size: an
/// image covered and cropped (kTrain: window placed and flipped by draws from `seed`;
/// kEval: centred), a follower with `leader`'s geometry. Errors as ImageDecoder's.
DecodeResult put_bucketed(const BucketPlan& plan, const FieldOut& o, const LoaderOptions& opt,
                          std::span<const uint8_t> bytes, uint64_t record, uint64_t seed, const DecodeResult* leader,
                          ImageDecoder& dec, std::vector<uint8_t>& pixels, uint8_t* tensor, uint32_t j);

/// Gives the bucket-shaped views of a batch of `n` samples of `bucket` its shape.
void shape_bucket_views(const BucketPlan& plan, uint32_t bucket, uint64_t n, std::vector<TensorView>& views);

}  // namespace stoker::internal
