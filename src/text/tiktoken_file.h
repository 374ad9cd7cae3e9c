// tiktoken ranks files: one line per token, "<base64 of its bytes> <rank>", the rank
// being the token's id and its merge priority. The split pattern and special tokens are
// not in the file: the known encodings (a table, one row each) give theirs to the file
// named after them; other files take them from the caller.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "stoker/tokenizer.h"

namespace stoker::internal {

/// A known encoding: its name, split pattern and special tokens.
struct KnownEncoding {
  std::string_view name;
  std::string_view pattern;
  std::initializer_list<std::pair<std::string_view, uint32_t>> specials;
};

/// The row named `name` ("cl100k_base"), or nullptr.
const KnownEncoding* find_known_encoding(std::string_view name);

/// Reads the ranks file `path` (see tokenizer.h's open_tokenizer for the errors; a bad
/// line is kInvalidArgument naming the file and line number).
std::unique_ptr<Tokenizer> open_tiktoken(const std::string& path, const TokenizerOptions& options);

}  // namespace stoker::internal
