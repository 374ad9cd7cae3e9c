// Per-row document outputs of token data, from a record's `doc_starts` (pack/token_docs.h,
// shards/FORMAT.md): the positions, relative to the record's first token, where
// documents start; the first <= 0 (where the document holding the first token began).
//
// Row r of a record holds stream tokens [r*N, r*N + N]: inputs [r*N, r*N + N), targets
// one later. For its inputs:
//   position_ids[i]  the token's position in its document (0 at a document's first token;
//                    or, from_row_start, at the row's first token too);
//   loss_mask[i]     0 where target i is the first token of another document (the input
//                    ends its document: predicting across documents), else 1;
//   doc_ids[i]       which document of the row the token is in (0, 1, ...);
//   seqlens          the lengths of the row's pieces of documents (they sum to N), for
//                    varlen attention (the Loader makes cu_seqlens of them).
// The stored bytes are untrusted: check_doc_starts() first.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "format/record_checks.h"  // check_doc_starts: the format's rule, shared with verify

namespace stoker::internal {


struct DocRowOut {
  int32_t* position_ids = nullptr;  ///< seq_len entries, or null: not wanted
  uint8_t* loss_mask = nullptr;     ///< seq_len entries (0/1), or null
  int32_t* doc_ids = nullptr;       ///< seq_len entries, or null
  std::vector<uint8_t>* seqlens = nullptr;  ///< int32 lengths appended (bytes), or null
  /// Write the per-input outputs with streaming stores where 16-byte aligned (a ring
  /// slot's rows, which this thread does not read back): stream_copy_fence()
  /// (util/stream_copy.h) before another thread reads them.
  bool stream = false;
};

/// Fills the outputs of row `row` from checked `starts`, each written once, in blocks
/// made in registers (no per-row buffer: the outputs are several times the tokens'
/// bytes, and their stores are the cost).
/// `from_row_start`: the document holding the row's first token counts from 0 there.
void doc_row(std::span<const uint8_t> starts, uint64_t row, uint32_t seq_len, const DocRowOut& out,
             bool from_row_start = false);

}  // namespace stoker::internal
