// The merge loop of byte-pair encoding, on one piece of text: start from one token per
// byte, then repeatedly merge the adjacent pair of lowest rank (the leftmost of equal
// ranks) until no adjacent pair has a merge. This is tiktoken's and Hugging Face's rule;
// both reach the same ids through a PairTable (a tiktoken ranks file's pairs are
// derived from its ranks, a tokenizer.json's are its merges).
//
// Two implementations with the same result: a scan over a small array (short pieces,
// most of them: cache-resident, no allocation) and a heap over a linked list (long
// pieces, where the scan would be quadratic). bpe_merge picks one by length; tests run
// both on the same input.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "text/token_tables.h"

namespace stoker::internal {

/// Each byte's own token id (every byte value has one in a byte-level BPE).
using ByteTokens = std::array<uint32_t, 256>;

/// Pieces up to this many bytes take the array scan.
inline constexpr size_t kBpeScanMaxBytes = 48;

/// Appends the merged ids of `piece` (non-empty) to `out`.
void bpe_merge_scan(std::string_view piece, const ByteTokens& bytes, const PairTable& pairs,
                    std::vector<uint32_t>& out);
void bpe_merge_heap(std::string_view piece, const ByteTokens& bytes, const PairTable& pairs,
                    std::vector<uint32_t>& out);

inline void bpe_merge(std::string_view piece, const ByteTokens& bytes, const PairTable& pairs,
                      std::vector<uint32_t>& out) {
  if (piece.size() <= kBpeScanMaxBytes)
    bpe_merge_scan(piece, bytes, pairs, out);
  else
    bpe_merge_heap(piece, bytes, pairs, out);
}

}  // namespace stoker::internal
