// MixtureFeed: the Loader over a weighted mixture of datasets (LoaderOptions::sources).
//
// The epoch's sequence is MixtureOrder's (stoker/mixture.h): global position p draws
// sample `position` of source `source`'s epoch `source_epoch`. This rank takes the
// positions RankSchedule gives it, as for one dataset, so the sequence does not depend
// on the world size and resumes from OrderState::consumed. Each source is read by a
// Loader of its own (world size 1: it runs through its epoch order front to back, as
// the mixture's draws of a source increase with p), and this rank copies the samples
// it draws into its batch, passing over the others' (on W ranks a source's rows are
// each unpacked on every rank, as a single token dataset's are, and copied W times).
// Batches carry the sources' dense outputs plus "source" int64 [B]; "index" is the
// sample's index in its own source. Outputs must agree across sources (names, dtypes,
// shapes); variable-size outputs and OnError::kSkip are refused.
#pragma once

#include <memory>
#include <optional>

#include "stoker/loader.h"

namespace stoker::internal {

class MixtureFeed {
 public:
  explicit MixtureFeed(const LoaderOptions& opt);  ///< opens every source
  ~MixtureFeed();
  std::optional<Batch> next();
  void set_epoch(uint64_t e);
  uint64_t epoch() const noexcept;
  uint64_t num_batches() const;
  uint64_t epoch_samples() const noexcept;
  OrderState state() const;
  void load_state(const OrderState& s);
  /// The sources' summed figures (their runs), this run's batches and samples.
  LoaderStats stats() const;
  int rank() const noexcept;
  int world_size() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::internal
