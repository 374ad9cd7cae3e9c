// OnError::kSkip: samples that cannot be read, checked or decoded are dropped.
//
// Producers mark a bad sample in its batch (Context::sample_failed) and go on. The
// consumer compacts each batch that lost samples before it goes out, a function of which
// records are bad, not of timing:
//   one rank     output batches are the rank's sample stream with the dropped samples
//                taken out, cut into batches of B: batch d's remaining good samples move
//                to the front, then the first good samples of the following batches fill
//                it up (waiting for them as the consumer waits for any batch). A batch
//                whose good samples all moved into earlier ones goes out empty, and the
//                consumer skips it. Batches stay full and the order and a resume are
//                exact (Loader::state() takes the last sample used).
//   several      a batch keeps its own samples: its good ones move to the front and it
//   ranks        goes out shorter (empty, when every sample failed). Filling from later
//                batches would end the ranks' epochs after different numbers of batches
//                (a DDP collective then waits forever) and move each rank's resume point
//                apart from the shared one; this way every rank delivers num_batches()
//                and the batch-based state stays exact.
//
// Threading: the consumer's thread only, with the ring's mutex held.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "pipeline/producer.h"

namespace stoker::internal {

/// Whether a decoded batch of n samples must be compacted before it goes out: samples
/// were dropped from it or moved out of it, or it is short under kSkip.
bool needs_compaction(const LoaderOptions& opt, const Job& job, uint64_t n);

/// What compact_batch made: the batch's sample count, and how far into the rank's
/// stream it reached: every sample before sample `through_j` of batch `through_k` is
/// delivered or dropped (a resume point, Loader::state()).
struct Compacted {
  uint64_t n = 0;
  uint64_t through_k = 0, through_j = 0;
};

/// Moves the good samples of `job` to the front of its slot and, when the feed runs on
/// one rank, fills it up from the following batches.
Compacted compact_batch(const Context& ctx, Run& run, const std::shared_ptr<Job>& job,
                        std::unique_lock<std::mutex>& lock);

}  // namespace stoker::internal
