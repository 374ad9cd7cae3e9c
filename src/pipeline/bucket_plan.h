// Aspect-ratio buckets in the Loader (LoaderOptions::buckets, stoker/buckets.h): planned
// once when the Loader opens, applied per epoch and per batch.
//
// The bucketed field: the first field, in schema order, that is a decoded image or a
// video cut into clips (a VideoClip). How a record's stored size is read depends on the
// field's kind, and is a row of a table (BucketSource, bucket_plan.cc): an image's from
// its header, a video's from the media index stored in front of it at pack time (width,
// height and rotation: the upright size). Another kind of field is another row, and its
// writer at the bucket's size in its producer.
//
// Opening: every record's size is read from the first 4 KiB of the field's bytes (more
// when the row asks for them — an image header further in, a media index with a long
// keyframe table —, all of them when the record is compressed), on at least 8 threads
// (the reads wait on storage), once for the Loader's life, and the record goes to the
// bucket nearest its aspect. Nothing is decoded; the partial read is not CRC-checked
// (the decode checks the whole record when it reads it).
// Per epoch: BucketOrder over those buckets, with the global batch (batch_size × world
// size) as its group, is the epoch's order, so step k of every rank is group k: one
// bucket. Per batch: the bucketed field and its followers are written at the bucket's
// size (an image by put_bucketed, a clip's frames by put_video_fields), and their
// tensors go out with the bucket's height and width; "bucket" int64 [B] says which (an
// index into the resolved list).
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
#include "stoker/shard.h"

namespace stoker::internal {

struct Context;
struct FieldOut;
struct ImageFacts;
struct VideoFacts;

/// A record's size as a field's stored bytes tell it, or how many bytes are needed to.
struct StoredSize {
  int width = 0, height = 0;  ///< upright
  size_t need = 0;            ///< > 0: not known from the bytes given; read this many (SIZE_MAX: all)
};

/// How the stored size of one kind of field is read (a row of bucket_plan.cc's table).
struct BucketSource {
  const char* what;  ///< the kind's name, in errors
  /// From the first bytes of a field's value (`whole`: all of them). Throws Error naming
  /// the reason when they cannot tell it.
  StoredSize (*read)(std::span<const uint8_t> head, bool whole);
};

/// A tensor (Context::tensors) whose sample shape follows the bucket: `shape` as laid
/// out (for the largest bucket), its dims h_dim and h_dim + 1 the bucket's height and width.
struct BucketShaped {
  int tensor = -1;
  std::vector<int64_t> shape;
  size_t h_dim = 0;
};

/// What plan_bucket_outputs chose: the field whose size picks the bucket, and the
/// tensors shaped by it.
struct BucketedField {
  int field = -1;                        ///< in the schema
  const BucketSource* source = nullptr;  ///< the row of its kind
  std::vector<BucketShaped> shaped;
};

struct BucketPlan {
  std::vector<BucketSize> sizes;  ///< resolve_buckets(LoaderOptions::buckets)
  std::vector<uint32_t> of;       ///< each global record's bucket
  std::vector<uint64_t> counts;   ///< records per bucket
  uint64_t group = 1;             ///< the global batch: batch_size × world size
  bool fill = true;               ///< !drop_last: a bucket's last group is completed with repeats
  std::vector<uint32_t> width, height;  ///< each global record's stored (upright) size
  BucketedField bucketed;
  double open_s = 0;  ///< seconds the sizes took to read
};

/// Marks the bucketed field (header) and the image fields that Follow it as bucketed,
/// lays their tensors out for the largest bucket and adds "bucket" (to `img`, written
/// with the other image outputs). Called once image and video fields are planned;
/// nothing (field -1) without LoaderOptions::buckets. kInvalidArgument when no field
/// can be bucketed.
BucketedField plan_bucket_outputs(const LoaderOptions& opt, const Schema& schema, Context& ctx, ImageFacts& img,
                                  VideoFacts& vid);

/// Checks the options (kInvalidArgument naming what cannot be bucketed: token data,
/// packed samples, a remote dataset, OnError::kSkip, no bucketed field) and reads every
/// record's size (kDataLoss naming the shard, record, its `__key__` (`key_field`) and
/// the reason when it cannot be read). Null when LoaderOptions::buckets is not enabled.
std::shared_ptr<const BucketPlan> plan_buckets(const Context& ctx, BucketedField field, int key_field);

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
