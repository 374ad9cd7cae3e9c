// Aspect-ratio buckets: batches of images (or clips) whose shape follows their aspect.
//
// Two pure pieces, independent of what the records hold:
//
//  1. The bucket list. Either given (a list of (height, width)), or made from a pixel
//     budget P and a step s (BucketOptions::pixels / step / max_ratio), the rule kohya_ss
//     and SDXL trainers use: for every width w = s, 2s, 3s, ... the height is the largest
//     multiple of s with w·h <= P; the pair is kept when h >= s and max(h, w) / min(h, w)
//     <= max_ratio; the square side floor(sqrt(P) / s)·s is always in. The list is sorted
//     by aspect ratio (h / w, tallest first) and has no duplicates. 512² in steps of 64
//     with max_ratio 2 gives 640x384, 576x448, 512x512, 448x576, 384x640 (h x w).
//     A record of (width, height) goes to the bucket nearest its aspect ratio:
//     argmin over buckets of |log(w / h) - log(bw / bh)|, the earlier bucket on a tie.
//
//  2. BucketOrder: the epoch's sample sequence when every global batch is one bucket.
//     With G = the global batch (world size × per-rank batch):
//       - the records are shuffled by a keyed permutation of (seed, epoch), as kShuffled;
//       - walked in that order, each record joins its bucket's list;
//       - each bucket's list is cut into groups of G consecutive samples. The last,
//         partial group of a bucket (fewer than G left) is dropped with `fill` false
//         (those samples miss this epoch; the shuffle picks others the next), or with
//         `fill` true completed by repeating the bucket's first samples of the epoch
//         (wrapping: at most G - 1 repeats per bucket);
//       - the groups are shuffled by a second keyed permutation, and concatenated.
//     So position p of the sequence is in group p / G, and every group is one bucket.
//     A RankSchedule (order.h) over this sequence with W·B = G gives step k exactly
//     group k, split among the ranks: equal batch counts, every batch one bucket. The
//     sequence depends on (seed, epoch, G, bucket assignment, fill) alone: the same for
//     every world size whose W·B equals G, and resumable at any group boundary.
//
// Threading: immutable values after construction; const methods safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace stoker {

/// One bucket's output size, pixels.
struct BucketSize {
  int height = 0, width = 0;
  bool operator==(const BucketSize&) const = default;
};

/// How the buckets are chosen. Either `sizes` (non-empty) or `pixels` (> 0), not both;
/// neither: no bucketing.
struct BucketOptions {
  /// Explicit buckets (height, width), each 1..8192, no duplicates.
  std::vector<BucketSize> sizes;
  /// A pixel budget: every bucket has h·w <= pixels (>= step²).
  uint64_t pixels = 0;
  /// The grid step with `pixels`: both sides are multiples of it, 1..8192.
  int step = 64;
  /// With `pixels`: the largest long side / short side kept, >= 1.
  double max_ratio = 2.0;

  bool enabled() const noexcept { return !sizes.empty() || pixels > 0; }
};

/// The bucket list the options describe (header rule above), checked: kInvalidArgument
/// naming the parameter when it cannot be used. Empty when !options.enabled().
std::vector<BucketSize> resolve_buckets(const BucketOptions& options);

/// The index in `buckets` (non-empty) nearest in aspect ratio to a width x height record
/// (both >= 1; kInvalidArgument otherwise).
uint32_t nearest_bucket(std::span<const BucketSize> buckets, int width, int height);

/// One epoch's order of bucketed samples (header, part 2). Memory: 8 bytes per position
/// plus 4 per record while it is built.
class BucketOrder {
 public:
  /// bucket_of[i]: record i's bucket, each < bucket_count. group >= 1. kInvalidArgument
  /// otherwise. shuffle false (a sequential Loader): neither shuffle is made, so the
  /// groups come bucket by bucket, each bucket's records in record order.
  BucketOrder(std::span<const uint32_t> bucket_of, uint32_t bucket_count, uint64_t seed,
              uint64_t epoch, uint64_t group, bool fill, bool shuffle = true);

  /// Positions in the epoch: a multiple of group().
  uint64_t size() const noexcept { return sequence_->size(); }
  uint64_t group() const noexcept { return group_; }
  uint64_t groups() const noexcept { return group_bucket_.size(); }
  /// The record at `position` (< size(); kInvalidArgument otherwise).
  uint64_t at(uint64_t position) const;
  /// The bucket of group k (< groups()).
  uint32_t group_bucket(uint64_t k) const { return group_bucket_.at(k); }
  /// The whole sequence, shared (EpochOrder's sequence constructor takes it).
  std::shared_ptr<const std::vector<uint64_t>> sequence() const noexcept { return sequence_; }

  /// size() for these bucket sizes without building the order: the sum over buckets of
  /// floor(n / group) (fill: ceil) times group.
  static uint64_t epoch_size(std::span<const uint64_t> bucket_counts, uint64_t group, bool fill);

 private:
  uint64_t group_ = 1;
  std::shared_ptr<const std::vector<uint64_t>> sequence_;
  std::vector<uint32_t> group_bucket_;
};

}  // namespace stoker
