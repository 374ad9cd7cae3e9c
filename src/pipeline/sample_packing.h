// Packed samples (LoaderOptions::seq_len): which samples of varying length share each
// row of seq_len tokens, planned once from the samples' lengths alone.
//
// The samples are taken in a seed-keyed shuffle (the same for every epoch and world
// size) and cut into windows of `window` samples; each window is packed best-fit
// decreasing: its samples, longest first, each go into the open row with the least room
// that holds it, or a new row. A window's rows are complete before the next window's
// start, so a row never mixes windows and the plan is a pure function of the lengths and
// the rules. A sample longer than a row is refused, truncated or split (LongSamples):
// split, it fills whole rows of its own and its remainder starts one more row, which
// best-fit fills up with other samples. Those rows follow one another and form a row
// group, which the epoch order keeps together (a reader then reads, and a tokenising
// loader tokenises, the sample once for all of its rows); every other row is a group of
// its own.
//
// Threading: a PackPlan is immutable once made; read it from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "stoker/loader.h"

namespace stoker::internal {

/// One sample's tokens in one row.
struct PackedPiece {
  uint64_t sample = 0;  ///< the sample (global record index)
  uint32_t start = 0;   ///< its first token in this piece
  uint32_t len = 0;     ///< tokens of it in the row
  uint32_t at = 0;      ///< where in the row they start
  uint32_t end = 0;     ///< the sample's delivered length (truncated: seq_len): no target at or past it
};

struct PackingRules {
  uint32_t seq_len = 0;  ///< >= 1
  uint64_t window = 1024;  ///< >= 1
  LongSamples long_samples = LongSamples::kError;
  uint64_t seed = 0;
};

struct PackPlan {
  uint32_t seq_len = 0;
  std::vector<uint64_t> row_begin{0};  ///< rows() + 1 offsets into `pieces`
  std::vector<PackedPiece> pieces;     ///< row by row, each row's in placement order
  std::vector<uint64_t> group_rows;    ///< rows per row group, in row order (they sum to rows())
  uint64_t samples = 0;           ///< samples placed (empty ones are not)
  uint64_t tokens = 0;            ///< tokens placed (the rows' non-padding positions)
  uint64_t empty_samples = 0;     ///< samples with no tokens, left out
  uint64_t truncated_tokens = 0;  ///< LongSamples::kTruncate: tokens cut off
  uint64_t split_samples = 0;     ///< LongSamples::kSplit: samples over several rows

  uint64_t rows() const noexcept { return row_begin.size() - 1; }
  std::span<const PackedPiece> row(uint64_t r) const {
    return {pieces.data() + row_begin[r], pieces.data() + row_begin[r + 1]};
  }
  /// Tokens of row r (the rest is padding).
  uint32_t used(uint64_t r) const noexcept;
  /// Non-padding share of the rows' positions, in [0, 1].
  double efficiency() const noexcept;
};

/// The plan for samples of `lengths` tokens (sample i: lengths[i]). kInvalidArgument for
/// a sample longer than a row under LongSamples::kError, naming it with `name(i)`.
PackPlan plan_packing(std::span<const uint32_t> lengths, const PackingRules& rules,
                      const std::function<std::string(uint64_t)>& name);

/// LoaderOptions::max_tokens: which samples share each padded batch. Made as the rows
/// are (the same seed-keyed shuffle, cut into windows), then each window is sorted
/// longest first (ties in the shuffle's order) and cut greedily: a batch takes the next
/// samples while its count times its first (longest) length stays within max_tokens.
/// A window is `window` samples, or kWindowBatches batches' worth when more (that many
/// times max_tokens over the mean length). A pure function of the lengths and the rules.
inline constexpr uint64_t kWindowBatches = 128;
struct TokenBatchPlan {
  uint64_t max_tokens = 0;
  std::vector<uint64_t> begin{0};  ///< batches() + 1 offsets into samples / lengths
  std::vector<uint64_t> samples;   ///< global record indexes, batch by batch, longest first
  std::vector<uint32_t> lengths;   ///< each one's delivered length (truncated: max_tokens)
  uint64_t tokens = 0;            ///< tokens delivered (non-padding positions)
  uint64_t positions = 0;         ///< sum over batches of B x L
  uint64_t empty_samples = 0;     ///< samples with no tokens, left out
  uint64_t truncated_tokens = 0;  ///< LongSamples::kTruncate: tokens cut off

  uint64_t batches() const noexcept { return begin.size() - 1; }
  uint64_t size(uint64_t b) const noexcept { return begin[b + 1] - begin[b]; }
  uint32_t width(uint64_t b) const noexcept { return lengths[begin[b]]; }  ///< L: the longest
  /// Non-padding share of the batches' positions, in [0, 1].
  double efficiency() const noexcept {
    return positions ? static_cast<double>(tokens) / static_cast<double>(positions) : 1.0;
  }
};

/// The padded batches for samples of `lengths` tokens. rules.seq_len is not used;
/// kInvalidArgument for max_tokens 0, LongSamples::kSplit, or a sample longer than
/// max_tokens under kError, naming it with `name(i)`.
TokenBatchPlan plan_token_batches(std::span<const uint32_t> lengths, uint64_t max_tokens, const PackingRules& rules,
                                  const std::function<std::string(uint64_t)>& name);

}  // namespace stoker::internal
