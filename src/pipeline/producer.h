// Producers: what turns a dataset's records into batches in the ring's slots.
//
// A Producer runs one epoch's run at a time on its own threads (a "stoker-io" reader and
// "stoker-dec/N" workers). For each batch k of the rank's schedule, in batch order, it
// claims a free slot (Run::claim_locked), writes every sample's tensors at their
// TensorLayout offsets, and hands the batch over with Run::finish_one / finish_all. A
// sample that cannot be read, checked or decoded goes to Context::sample_failed, which
// fails the batch (OnError::kError) or marks the sample bad for skip compaction
// (OnError::kSkip). A failure of the producer itself goes to Run::fail. Once Run::stop is
// set and wake() called, every thread returns promptly; join() waits for them, and
// clear() drops what the run left (after join, no thread running).
//
// Two producers: ImageProducer (records of image + scalar fields, a decode per sample)
// and TokenProducer (token rows, a shuffle window of compressed records at a time).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "pipeline/slot_ring.h"
#include "stoker/cpu.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/loader.h"

namespace stoker::internal {

/// What every producer reads, fixed when the Loader opens (run state is in Run).
struct Context {
  const LoaderOptions* opt = nullptr;
  std::shared_ptr<Dataset> dataset;
  OrderOptions order_opt;  ///< effective (token data: kTokenWindow when shuffled)
  std::shared_ptr<const UnitLayout> layout;
  RankInfo rank;
  CpuPlan cpu;
  unsigned threads = 1;
  std::vector<TensorLayout> tensors;

  uint8_t* tensor_ptr(const Job& job, int t) const { return job.mem + tensors[static_cast<size_t>(t)].offset; }
  std::string record_name(size_t shard, uint64_t rec) const {
    return dataset->shard_path(shard) + ": record " + std::to_string(rec);
  }
  /// A sample could not be read, checked or decoded: fail its batch (kError) or drop it
  /// (kSkip: counted in run.c.skipped, each distinct reason logged once).
  void sample_failed(Run& run, Job& job, uint32_t j, std::exception_ptr e) const;

  mutable std::mutex skip_log_mu;
  mutable std::set<std::string> skip_logged;
};

/// `e` naming the record it is about: `record` in front, unless the message names it.
Error naming(const Error& e, const std::string& record);

class Producer {
 public:
  virtual ~Producer() = default;
  /// Starts the run's threads (run.order, run.sched set; run state cleared).
  virtual void start(Run& run) = 0;
  /// run.stop is set: wakes every thread that may be waiting on the producer's own
  /// condition variables (the ring's are woken by the Loader).
  virtual void wake() = 0;
  virtual void join() = 0;
  /// After join(): drops what the run left.
  virtual void clear() = 0;
  /// The IO engine's figures, published by the reader thread (any thread may call).
  virtual IoStats io_stats() const = 0;
};

/// Token data's facts, from the schema and the shard indexes.
struct TokenFacts {
  int field = -1;               ///< the tokens field
  uint32_t seq_len = 0;
  size_t row_bytes = 0;         ///< (seq_len + 1) stored tokens
  size_t capacity = 0;          ///< the largest record's raw size
  uint64_t largest_stored = 0;  ///< the largest record as stored (sizes the read slab)
  int tokens_t = -1, targets_t = -1, index_t = -1;  ///< tensors (targets_t -1: not asked for)
};

/// Images: which field goes to which tensor. A field not named is read and checked only.
struct ImageFacts {
  int image_field = -1, label_field = -1;
  int image_t = -1, label_t = -1, index_t = -1;  ///< image_t -1: not decoded (kNone)
};

std::unique_ptr<Producer> make_image_producer(const Context& ctx, const ImageFacts& facts);
std::unique_ptr<Producer> make_token_producer(const Context& ctx, const TokenFacts& facts);
/// The ring slots a token producer wants: every worker holding a window's batches, plus
/// a window's more (so each worker can fill its window's batches directly).
size_t token_direct_slots(const Context& ctx, uint64_t batch_size);

}  // namespace stoker::internal
