// Feed: what stands behind a Loader — one interface, two implementations: a dataset's
// feed (dataset_feed.h: one dataset, a producer filling a ring of slots) and a
// mixture's (mixture_feed.h: several datasets' feeds drawn from by weight). The Loader
// (stoker/loader.h) checks its options and resolves rank and world size once, here,
// makes the one feed its options ask for, and forwards to it; it keeps only what every
// feed shares (the one-consumer guard, close(), the resume rule of set_epoch()).
//
// A feed's outputs are planned when it opens, before its first batch (outputs()), so a
// mixture can match its sources' outputs without reading a batch.
//
// Threading: next(), set_epoch(), load_state() and state() on the consumer's thread,
// one at a time (the Loader guards that); stats() and close() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/output.h"
#include "stoker/loader.h"
#include "stoker/order.h"

namespace stoker::internal {

class Feed {
 public:
  virtual ~Feed() = default;
  /// The next batch of the epoch, or nullopt at its end. `block` false: when the batch is
  /// not ready, sets *would_wait and returns nullopt with nothing consumed.
  virtual std::optional<Batch> next(bool block, bool* would_wait) = 0;
  /// Restarts at the beginning of epoch `e`; batches in flight are dropped.
  virtual void set_epoch(uint64_t e) = 0;
  virtual uint64_t epoch() const noexcept = 0;
  /// Batches this rank gets in the current epoch, from its start or resume point.
  virtual uint64_t num_batches() const = 0;
  virtual uint64_t epoch_samples() const noexcept = 0;
  virtual OrderState state() const = 0;
  /// Resumes from `s`; kInvalidArgument when it was made with other order options or
  /// another epoch size.
  virtual void load_state(const OrderState& s) = 0;
  /// Stops the feed's threads; a next() waiting, and every later one, throws kCancelled.
  virtual void close() = 0;
  virtual LoaderStats stats() const = 0;
  /// The options in effect (LoaderOptions::slots: the count used).
  virtual const LoaderOptions& options() const noexcept = 0;
  /// The outputs of every batch, in the batches' order (dense first).
  virtual const std::vector<Output>& outputs() const noexcept = 0;
  /// The dataset's schema (a mixture: its first source's).
  virtual const Schema& schema() const noexcept = 0;
  virtual const std::vector<std::string>& class_names() const noexcept = 0;
  /// The manifest generation of the dataset opened (0: a mixture).
  virtual uint64_t generation() const noexcept { return 0; }
};

/// Checks what the options say on their own, before any dataset is opened: the batch
/// size, the skip budget, normalisation, a mixture's lists (rank and world size:
/// resolve_rank). kInvalidArgument naming the option.
void check_options(const LoaderOptions& opt);

/// This rank and the world size: LoaderOptions::rank / world_size when given (a valid
/// pair, else kInvalidArgument), else torchrun's RANK / WORLD_SIZE.
RankInfo resolve_rank(const LoaderOptions& opt);

/// This rank's schedule over an epoch of `units` samples, from `start_consumed` on.
RankSchedule rank_schedule(uint64_t units, const LoaderOptions& opt, RankInfo rank, uint64_t start_consumed,
                           TailPolicy tail = TailPolicy::kPad);

/// The feed `opt` asks for: a mixture of opt.sources, else opt.path's dataset.
std::unique_ptr<Feed> open_feed(const LoaderOptions& opt, RankInfo rank);

}  // namespace stoker::internal
