// The inputs of pack_text, cut into pieces the workers tokenise in parallel: a plain
// text file is one document (one piece, whole); a JSON Lines file is one document per
// line (the string under a key) and is cut into pieces of whole lines of about
// `piece_bytes`; a WebDataset tar is one piece whose documents are its .txt members, in
// tar order; a stoker dataset (a directory holding a MANIFEST) gives one document per
// record (its text field), in pieces of consecutive records of about `piece_bytes`.
// Documents keep input order: inputs in the order given (a directory's .txt/.jsonl/tar
// files in byte-wise order of their paths), lines, members and records in their order.
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

enum class TextInputKind { kPlainText, kJsonLines, kTar, kDataset };

/// A byte range of one input file holding whole documents (kDataset: the records
/// [first_record, first_record + records) of the dataset in `file`, `size` their bytes).
struct TextPiece {
  std::string file;
  TextInputKind kind;
  uint64_t offset = 0, size = 0;
  uint64_t first_record = 0, records = 0;
};

/// The pieces of `inputs` (files or directories). kInvalidArgument naming a file that
/// is neither .txt, .jsonl/.ndjson nor a tar (.tar, .tar.gz, .tgz, .tar.zst, .tar.xz,
/// .tar.bz2), or a directory with none; kNotFound / kIoError from the OS.
std::vector<TextPiece> plan_text_pieces(const std::vector<std::string>& inputs, uint64_t piece_bytes);

/// The bytes of a piece (pread; kDataLoss when the file shrank). Plain text and JSON Lines.
std::string read_text_piece(const TextPiece& piece);

/// Calls `document(text)` for each document of a tar or dataset piece: a tar's .txt
/// members, a dataset's records' `text_field` (""): its one text field besides
/// `__key__`). kInvalidArgument naming the dataset when it has no such field; the
/// reader's errors (a malformed tar, a damaged record) as they come, naming the file.
void read_document_piece(const TextPiece& piece, const std::string& text_field,
                         const std::function<void(std::string_view)>& document);

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
