// Document boundaries of a token stream, found at pack time and stored per record.
//
// A token dataset packed with boundaries has, next to its `tokens` field, a `doc_starts`
// field (kVarArray of int32, scalar elements): for a record whose rows hold the stream
// positions [b, e] (b = first row * N, e = b + rows * N: the last row's last target), the
// positions, relative to b, where a document starts. The first entry is <= 0: where the
// document holding the record's first token started (0 when one starts right there),
// so every record is self-contained (no corpus-wide index at load time); the others are
// the starts in (b, e], increasing. shards/FORMAT.md describes it for other readers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stoker/pack.h"

namespace stoker::internal {

inline constexpr const char* kDocStartsField = "doc_starts";

/// Reads stream tokens [first, first + count) into `out` (little-endian `elem`-byte tokens).
using StreamReader = std::function<void(uint64_t first, uint64_t count, uint8_t* out)>;

/// nanoGPT-style streams: a document ends with its EOS token, which belongs to it, so
/// one starts at 0 and right after every EOS (but at the stream's end). The stream is
/// read once, in large pieces; the starts take 8 bytes a document. kInvalidArgument
/// when `eos` cannot be a token of `dtype` or never occurs in the stream.
std::vector<uint64_t> eos_doc_starts(const StreamReader& read, uint64_t tokens, DType dtype, int64_t eos,
                                     const std::string& file);

/// Megatron .bin/.idx: document d starts at the stream position of sequence doc_idx[d]
/// (empty documents folded into the next).
std::vector<uint64_t> megatron_doc_starts(const MegatronIndex& idx);

/// The `doc_starts` payload of the record holding stream positions [begin, end]
/// (little-endian int32s). kInvalidArgument naming `file` when the document holding
/// `begin` started more than 2^31 - 1 tokens before `end` (positions are int32; with
/// --eos that means the id hardly ever occurs: is it the right one?).
std::vector<uint8_t> record_doc_starts(const std::vector<uint64_t>& starts, uint64_t begin, uint64_t end,
                                       const std::string& file);

}  // namespace stoker::internal
