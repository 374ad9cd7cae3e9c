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
// Batches carry the outputs every source has (planned from the sources' loaders before
// any batch: each must agree across them in kind, dtype and shape, else
// kInvalidArgument naming it and the two sources) plus "source" int64 [B]; "index" is
// the sample's index in its own source. Dense outputs are copied per sample; text,
// bytes and ragged ones (`__key__` among them) gather each sample's values and offsets;
// cu_seqlens (cumulative) is summed again over the mixture's batch. An output only some
// sources have is left out with one warning naming it. OnError::kSkip is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/loader.h"

namespace stoker::internal {

/// One output of a Loader's batches as planned when it opens (before any batch).
struct OutputSpec {
  std::string name;
  TensorKind kind = TensorKind::kDense;
  ElemType dtype = ElemType::kUint8;
  std::vector<int64_t> inner;  ///< dense: the sample's shape; ragged: the shape after the first dimension
  bool cumulative = false;     ///< running sums over the batch (cu_seqlens)
};

struct LoaderOutputs {
  /// `l`'s outputs in its batches' order; `l` reads one dataset (not a mixture).
  static std::vector<OutputSpec> of(const Loader& l);
};

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
  /// Loader::close(): closes every source's loader; thread-safe.
  void close();
  /// The sources' summed figures (their runs), this run's batches and samples.
  LoaderStats stats() const;
  int rank() const noexcept;
  int world_size() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::internal
