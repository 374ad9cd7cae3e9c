// The inputs of pack_text, cut into pieces the workers tokenise in parallel: a plain
// text file is one document (one piece, whole); a JSON Lines file is one document per
// line (the string under a key) and is cut into pieces of whole lines of about
// `piece_bytes`. Documents keep input order: files in the order given (a directory's
// .txt/.jsonl files in byte-wise order of their paths), lines in file order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "stoker/shard.h"  // DType

namespace stoker::internal {

enum class TextInputKind { kPlainText, kJsonLines };

/// A byte range of one input file holding whole documents.
struct TextPiece {
  std::string file;
  TextInputKind kind;
  uint64_t offset = 0, size = 0;
};

/// The pieces of `inputs` (files or directories). kInvalidArgument naming a file that
/// is neither .txt nor .jsonl/.ndjson, or a directory with none; kNotFound / kIoError
/// from the OS.
std::vector<TextPiece> plan_text_pieces(const std::vector<std::string>& inputs, uint64_t piece_bytes);

/// The bytes of a piece (pread; kDataLoss when the file shrank).
std::string read_text_piece(const TextPiece& piece);

/// Lines of `piece.file` before the piece ('\n' in its first piece.offset bytes): where
/// its line numbers start when the piece is not the file's first (a part's slice).
uint64_t lines_before(const TextPiece& piece);

/// Where a JSON Lines piece is bad: its line (1-based, within the piece) and why.
struct JsonLinesProblem {
  uint64_t line;
  std::string why;
};

/// Calls `object(json)` for each line of `lines` that is a JSON object (blank lines
/// skipped) and sets `line_count`. Returns the first problem: a line that is not JSON or
/// not an object, or the reason `object` gives (non-empty) for its line.
std::optional<JsonLinesProblem> read_json_objects(std::string_view lines,
                                                  const std::function<std::string(const nlohmann::json&)>& object,
                                                  uint64_t& line_count);

/// The integers listed under `key` of `object`, as little-endian `dtype` (uint16,
/// uint32, int32, int64) into `out`, their number in `count`; "" or why not (no key, not
/// a list of integers, a value the dtype cannot hold), naming the key and the index.
std::string json_integers(const nlohmann::json& object, const std::string& key, DType dtype,
                          std::vector<uint8_t>& out, size_t* count);

/// Calls `document(text)` for the `key` string of each line of `lines` (blank lines
/// skipped; a last line without '\n' counted) and sets `line_count` to the lines seen.
/// Returns the first problem — a line that is not a JSON object, lacks `key`, or whose
/// value there is not a string — instead of throwing, so that the caller, who knows
/// where the piece starts, can name the file's line.
std::optional<JsonLinesProblem> read_json_lines(std::string_view lines, const std::string& key,
                                                const std::function<void(std::string_view)>& document,
                                                uint64_t& line_count);

}  // namespace stoker::internal
