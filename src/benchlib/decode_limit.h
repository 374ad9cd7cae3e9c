// The in-memory decode limit: the loader's own per-record work over records already in
// memory, on the same number of threads, with no IO and no batching. The feed-rate
// benchmarks divide the pipeline's rate by it to show the pipeline overhead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/loader.h"

namespace stoker::internal {

struct DecodeLimit {
  double samples_per_s = 0;
  uint64_t samples = 0;         ///< records decoded
  uint64_t raw_bytes = 0;       ///< bytes of unpacked records (tokens: rows = raw_bytes / row bytes)
  uint64_t tokens = 0;          ///< packed samples and text (LoaderOptions::seq_len): tokens made
  uint64_t records_in_memory = 0;
  uint64_t bytes_in_memory = 0;
  double seconds = 0;
};

/// Loads up to `max_records` records of the dataset at `opt.path` (evenly spread; 0: as
/// many as decode_limit_default_records says), then
/// runs `threads` threads working through them round-robin for about `seconds` (at least
/// one pass), in the order decode_limit_visits gives.
/// Image datasets: the whole record as the loader does it for `opt` — the fields planned
/// by plan_image_fields (opt.fields, else opt.transform for the first image field), then
/// per record the loader's record_fields and put_image_fields: every image decoded with
/// its transform (JPEG ROI crop-decode, PNG/WebP decode + crop/resize), a Follow field
/// given its leader's geometry, scalars and arrays copied, text and bytes gathered —
/// with per-sample seeds as the loader draws them (opt.order.seed, epoch 0).
/// Token datasets: zstd decompression of the records.
/// Packed samples (opt.seq_len): a sample's tokens written out as the loader writes a
/// row's piece; text (opt.tokenizer): tokenised first, as the loader does.
/// kInvalidArgument for specs the loader refuses (the same messages).
/// How many records the limit holds by default: every record while they fit in
/// `max_bytes` (as stored, by their mean size), and at least `min_records` (or all).
/// Work whose speed depends on which records it meets wants them all: a tokenizer is
/// faster on a few thousand documents than on the whole text, whose words reach more
/// of its tables. Records of images or clips take the floor, as before.
uint64_t decode_limit_default_records(const Dataset& ds, uint64_t max_bytes = uint64_t{256} << 20,
                                      uint64_t min_records = 2000);
/// `max_records` when it is set (> 0), else decode_limit_default_records(ds).
inline uint64_t decode_limit_record_count(const Dataset& ds, uint64_t max_records) {
  return max_records > 0 ? max_records : decode_limit_default_records(ds);
}
/// The records (global indices) the limit holds of a dataset of `records`: up to
/// `max_records` of them, evenly spread.
std::vector<uint64_t> decode_limit_records(uint64_t records, uint64_t max_records);
/// The same records in the order the limit works through them: the loader's kind of
/// order — a keyed shuffle (order.seed) when it is kShuffled, else index order.
std::vector<uint64_t> decode_limit_visits(uint64_t records, uint64_t max_records, const OrderOptions& order);

DecodeLimit measure_decode_limit(const LoaderOptions& opt, unsigned threads, double seconds, uint64_t max_records);

/// The same measurement in slices (bench feed --limit-interleaved: a slice after each
/// epoch, so that the load of a shared machine weighs on the feed and its limit alike).
/// The constructor loads the records and plans the fields; each run() adds to result().
class DecodeLimitMeter {
 public:
  DecodeLimitMeter(const LoaderOptions& opt, uint64_t max_records);
  ~DecodeLimitMeter();
  DecodeLimitMeter(const DecodeLimitMeter&) = delete;
  DecodeLimitMeter& operator=(const DecodeLimitMeter&) = delete;
  /// `threads` threads for about `seconds`; with `full_pass`, also until every record
  /// held has been done once over all runs so far. The records continue round-robin
  /// from where the last run stopped. A bad record throws its error, named.
  void run(unsigned threads, double seconds, bool full_pass);
  const DecodeLimit& result() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::internal
