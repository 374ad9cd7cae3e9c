// Packed samples through the record producer (LoaderOptions::seq_len): records of a
// variable-length `tokens` field (and an optional per-token `loss_mask`), or of text
// tokenised here (LoaderOptions::tokenizer), placed into rows as sample_packing.h
// plans, with token data's outputs per sample.
//
// The plan is made once, when the Loader opens, from the shard indexes (each record's
// token count is its field size). A batch's rows are the epoch order's samples; the
// reader reads every record a row holds a piece of, and a worker writes each piece: its
// tokens and targets, and per position the sample's position, its place in the row
// (doc_ids) and the loss mask (the stored mask of the target, 0 at the sample's end).
// Text: the plan needs every document's token count, so opening tokenises the dataset
// once on the loader's threads, or reads the counts an earlier run kept
// (token_counts.h); a worker then tokenises a document again for each of its pieces.
// What needs no record (the padding, cu_seqlens, the row's samples) is written as the
// batch starts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipeline/producer.h"
#include "pipeline/sample_packing.h"
#include "pipeline/token_counts.h"
#include "stoker/tokenizer.h"

namespace stoker::internal {

struct PackedFacts {
  int tokens_field = -1;  ///< the 1-D integer var-array "tokens"
  int mask_field = -1;    ///< the uint8/bool var-array "loss_mask", or -1
  int key_field = -1;
  /// Text tokenised here: the text field, the tokenizer and the ids around a document
  /// (tokens_field is -1, stored_type kUint32: the tokenizer's ids).
  int text_field = -1;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::optional<uint32_t> bos, eos;
  std::string tokenizer_path;  ///< text: the tokenizer's file and options, what its counts are of
  TokenizerOptions tokenizer_options;
  std::string token_counts_dir;  ///< text: where counts are kept ("" nowhere)
  TokenCountsReport counts;  ///< text: how the plan's document token counts came (sample_lengths fills it)
  ElemType stored_type = ElemType::kUint16;
  std::shared_ptr<const PackPlan> plan;
  int tokens_t = -1, targets_t = -1, index_t = -1, position_t = -1, mask_t = -1, doc_ids_t = -1;
  int seqlens_var = -1;  ///< cu_seqlens
  int samples_var = -1;  ///< "sample_index": the row's samples (records), int64 values + offsets
};

/// The schema's fields for packing and, for text, the tokenizer opened (no plan, no
/// outputs). kInvalidArgument: no usable `tokens` field, no text field to tokenise, a
/// bad bos/eos; what open_tokenizer throws.
PackedFacts packed_facts(const LoaderOptions& opt, const Schema& schema);

/// Every sample's token count, in record order: from the shard indexes, or for text
/// document_token_counts' (token_counts.h) with bos and eos (f.counts says how they came).
/// kDataLoss: a stored loss_mask whose length is not the tokens'.
std::vector<uint32_t> sample_lengths(const Context& ctx, PackedFacts& f);

/// The schema's fields for packing, the plan (kInvalidArgument: no usable `tokens`
/// field, a sample too long under LongSamples::kError, naming it) and the outputs,
/// added to `ctx`.
PackedFacts plan_packed_samples(const LoaderOptions& opt, Context& ctx);

/// A text document's ids as the loader packs them: bos, the text's, eos (into `out`).
void document_ids(const PackedFacts& f, std::span<const uint8_t> text, std::vector<uint32_t>& out);

/// A sample's tokens as stored_type little-endian bytes: its tokens field, or its text
/// tokenised (document_ids) into `ids`, which the result then points into.
std::span<const uint8_t> sample_tokens(const PackedFacts& f, const std::vector<std::span<const uint8_t>>& fields,
                                       std::vector<uint32_t>& ids);

std::unique_ptr<RecordWork> make_packed_work(const Context& ctx, const PackedFacts& facts);

}  // namespace stoker::internal
