// Tokenizers: text in, token ids out, for packing text into token datasets.
//
// open_tokenizer reads one of three file formats and returns a Tokenizer behind one
// interface:
//   - tiktoken ranks files (`.tiktoken`: one "base64-token rank" pair a line). A file
//     named after a known encoding (cl100k_base.tiktoken, o200k_base.tiktoken,
//     r50k_base.tiktoken, p50k_base.tiktoken) gets that encoding's split pattern and
//     special tokens; any other takes them from TokenizerOptions.
//   - Hugging Face `tokenizer.json` files holding a byte-level BPE model (GPT-2, Llama 3,
//     Qwen style): vocab, merges, a ByteLevel pre-tokenizer (or a Split by regex followed
//     by one), added tokens.
//   - SentencePiece `.model` files, through the SentencePiece library.
// The two BPE formats share one core: the text is split into pieces by the format's
// pattern, run by PCRE2 (JIT-compiled, UTF mode with Unicode properties), and each piece
// is merged pair by pair, the pair of lowest rank first (leftmost on ties), as tiktoken
// and Hugging Face tokenizers do. The ids equal those of the reference libraries on the
// same text (tests/text_exact_test.cc checks it against them).
//
// Text is UTF-8. Bytes that are not valid UTF-8 are replaced, each maximal invalid
// subsequence by one U+FFFD, before tokenising: what Python's errors="replace", Rust's
// from_utf8_lossy and JavaScript's TextDecoder give, so the ids equal what the reference
// libraries give on the text as those decoders hand it to them. decode() then returns
// the replacement character where the invalid bytes were.
//
// Special tokens (`<|endoftext|>`, added tokens) are recognised in the text only when
// SpecialTokens allows them; elsewhere a special token's text is ordinary text and is
// split and merged like any other.
//
// Threading: a Tokenizer is immutable once opened; every method is const and may be
// called from any number of threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stoker {

/// Raised whenever some tokenizer here gives other ids for some text than it gave before
/// (a fix to a format's rules, say). What is kept from tokenising, such as the loader's
/// document token counts (LoaderOptions::token_counts_dir), records it and is made
/// again under a new one.
inline constexpr uint32_t kTokenizerRevision = 1;

/// Which special tokens encode() recognises in the text.
struct SpecialTokens {
  bool all = false;                ///< every special token of the tokenizer
  std::vector<std::string> names;  ///< these (by their text), when `all` is false
  static SpecialTokens none() { return {}; }
  static SpecialTokens every() { return {true, {}}; }
};

/// How open_tokenizer reads a file.
struct TokenizerOptions {
  /// tiktoken files not named after a known encoding: the split pattern (PCRE2 syntax
  /// with \p{..} properties, as tiktoken's patterns are written). Required for those;
  /// kInvalidArgument for a known encoding's file, which has its own.
  std::string pattern;
  /// tiktoken files not named after a known encoding: special tokens, text -> id (ids
  /// may not be ids of ranked tokens). kInvalidArgument for a known encoding's file.
  std::map<std::string, uint32_t> special_tokens;
};

/// A tokenizer of one of the formats above. Immutable; thread-safe (see the top).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Appends the ids of `text` to `out`. Never adds BOS/EOS or any template of the
  /// file (a tokenizer.json post-processor is not applied): callers add those.
  virtual void encode(std::string_view text, std::vector<uint32_t>& out,
                      const SpecialTokens& allowed = {}) const = 0;
  /// The ids of `text`.
  std::vector<uint32_t> encode(std::string_view text, const SpecialTokens& allowed = {}) const {
    std::vector<uint32_t> out;
    encode(text, out, allowed);
    return out;
  }
  /// The bytes `ids` stand for (special tokens as their text). Not always UTF-8: a
  /// sequence may end inside a character. kInvalidArgument for an id with no token.
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  /// One more than the largest id (ordinary or special).
  virtual uint32_t vocab_size() const = 0;
  /// The id of the special (control, added) token written `text`, if there is one.
  virtual std::optional<uint32_t> special_token(std::string_view text) const = 0;
  /// The id of `text` as one token: a special token, or an ordinary token whose text
  /// (its bytes, or its SentencePiece piece) is exactly `text`.
  virtual std::optional<uint32_t> token_id(std::string_view text) const = 0;
  /// The format: "tiktoken", "tokenizer.json" or "sentencepiece".
  virtual std::string_view format() const = 0;
};

/// Opens the tokenizer in `path`, the format told by its name (.tiktoken, .json,
/// .model) or else by its first bytes. kNotFound when it does not exist; kInvalidArgument
/// naming the file (and line or key) when it is not a tokenizer stoker reads or is
/// malformed, or when the options do not fit it; kIoError on OS failures.
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path, const TokenizerOptions& options = {});

}  // namespace stoker
