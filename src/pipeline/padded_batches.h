// Padded batches under a token budget (LoaderOptions::max_tokens) through the record
// producer: records of a variable-length `tokens` field (and an optional `loss_mask`),
// or text tokenised here, one sample per row, each batch padded to its longest sample.
//
// The plan (sample_packing.h TokenBatchPlan) is made once, when the Loader opens, from
// the shard indexes (or, for text, one tokenising pass). Each planned batch is one unit
// of the epoch order and one Loader batch (the feed runs with a batch size of 1 unit), so
// the order, the rank schedule, resume and the tail rule are the record producer's. A
// slot holds max_tokens positions per output; a batch of B samples of longest length L
// uses the first B x L, row i at i x L, and make_batch reshapes the views to [B, L].
// What needs no record (padding, attention mask, index) is written as the batch starts;
// a worker writes each sample's row.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/packed_samples.h"
#include "pipeline/producer.h"
#include "pipeline/sample_packing.h"

namespace stoker::internal {

struct PaddedFacts {
  PackedFacts fields;  ///< the tokens / loss_mask / text fields (fields.plan unused)
  std::shared_ptr<const TokenBatchPlan> plan;
  int tokens_t = -1, targets_t = -1, attention_t = -1, index_t = -1, position_t = -1, mask_t = -1;
};

/// The plan and the outputs (added to `ctx`). kInvalidArgument: no usable tokens or text
/// field, doc_ids or cu_seqlens asked for, LongSamples::kSplit, a sample longer than
/// max_tokens under kError (naming its record and `__key__`).
PaddedFacts plan_padded_batches(const LoaderOptions& opt, Context& ctx);

/// The views of planned batch `unit` ([max_tokens] per output) reshaped to its [B, L]
/// ("index": [B]); returns B.
uint64_t shape_padded_views(const PaddedFacts& f, uint64_t unit, std::vector<TensorView>& views);

std::unique_ptr<RecordWork> make_padded_work(const Context& ctx, const PaddedFacts& facts);

}  // namespace stoker::internal
