// The in-memory decode limit: the loader's own decode+transform code over records
// already in memory, on the same number of threads, with no IO and no batching. The
// feed-rate benchmarks divide the pipeline's rate by it to show the pipeline overhead.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/image.h"

namespace stoker::internal {

struct DecodeLimit {
  double samples_per_s = 0;
  uint64_t samples = 0;         ///< records decoded
  uint64_t raw_bytes = 0;       ///< bytes of unpacked records (tokens: rows = raw_bytes / row bytes)
  uint64_t records_in_memory = 0;
  uint64_t bytes_in_memory = 0;
  double seconds = 0;
};

/// Loads up to `max_records` records of the dataset at `path` (evenly spread), then runs
/// `threads` threads decoding them round-robin for about `seconds` (at least one pass).
/// Image datasets: ImageDecoder::decode with `transform` and per-sample seeds as the
/// loader draws them (seed, epoch 0); token datasets: zstd decompression of the records.
DecodeLimit measure_decode_limit(const std::string& path, const ImageTransform& transform, unsigned threads,
                                 double seconds, uint64_t max_records, uint64_t seed);

}  // namespace stoker::internal
