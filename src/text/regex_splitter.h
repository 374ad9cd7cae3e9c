// Pre-tokenisation: cutting text into the pieces BPE merges within, by a regular
// expression, as tiktoken and Hugging Face tokenizers do.
//
// The engine is PCRE2 (8-bit, UTF mode, Unicode properties for \p{..}, \s, \d, \w),
// JIT-compiled when the platform allows, else interpreted. The reference libraries
// run their patterns on Rust's regex engines, whose \s is Unicode's White_Space
// property; PCRE2's \s lacks U+0085 (NEL) from it, so the pattern is rewritten to add
// it, the one difference that matters for the known patterns.
//
// Threading: a RegexSplitter is immutable once built; split() may run on many threads
// at once (each thread keeps its own PCRE2 match data and JIT stack).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace stoker::internal {

/// A half-open byte range [first, second) of the text given to split().
using PieceRange = std::pair<uint32_t, uint32_t>;

class RegexSplitter {
 public:
  /// Compiles `pattern`; kInvalidArgument naming `source` (the file or option it came
  /// from), PCRE2's message and the offset when it does not compile.
  RegexSplitter(const std::string& pattern, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  /// Appends to `out` the pieces of `text` (valid UTF-8, under 4 GiB). Matches are
  /// found left to right, each search starting where the last match ended (a match may
  /// look behind it); an empty match is skipped. Text between matches is dropped, as
  /// tiktoken does, or kept as pieces of its own (`keep_gaps`), as Hugging Face's
  /// Split(behavior=Isolated) does.
  void split(std::string_view text, bool keep_gaps, std::vector<PieceRange>& out) const;

  /// `pattern` with \s and \S widened to Unicode's White_Space (U+0085 added).
  static std::string white_space_compatible(const std::string& pattern);

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string source_;
};

}  // namespace stoker::internal
