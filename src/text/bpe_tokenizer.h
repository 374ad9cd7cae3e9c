// The byte-level BPE tokenizer that tiktoken ranks files and tokenizer.json BPE models
// both become (tokenizer.h has the contract): a split pattern, a vocabulary of byte
// strings, a pair table of merges and special tokens. The file readers
// (tiktoken_file.h, hf_tokenizer_json.h) fill a BpeModel; BpeTokenizer checks it and
// is immutable from then on.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stoker/tokenizer.h"
#include "text/bpe_merge.h"
#include "text/regex_splitter.h"
#include "text/token_tables.h"

namespace stoker::internal {

/// How a format splits and merges, besides its tables.
struct BpeRules {
  std::string format;  ///< Tokenizer::format()
  std::string source;  ///< the file, for messages
  std::string pattern;  ///< the split pattern
  /// Text between the pattern's matches: dropped (tiktoken) or kept as pieces (Hugging
  /// Face's Split with behavior Isolated, which ByteLevel uses too).
  bool keep_gaps = false;
  /// A piece that is a token as a whole is that token, without merging (tiktoken always;
  /// Hugging Face with `ignore_merges`).
  bool whole_piece_first = true;
  /// Hugging Face ByteLevel add_prefix_space: a space before each run of text between
  /// special tokens that does not start with one.
  bool prefix_space = false;
};

/// The tables a reader fills.
struct BpeModel {
  std::vector<std::string> tokens;  ///< id -> bytes of the ordinary tokens
  std::vector<uint8_t> present;     ///< id -> 1 when `tokens[id]` is a token (ids may have gaps)
  BytesTable ids;                   ///< bytes -> id of the ordinary tokens
  PairTable pairs;                  ///< the merges
  std::map<std::string, uint32_t> specials;  ///< special token text -> id

  /// Adds an ordinary token; kInvalidArgument naming `where` when the id or the bytes
  /// are already taken.
  void add_token(uint32_t id, std::string bytes, const std::string& where);
  /// tiktoken's rule, as pairs: merging two tokens whose bytes concatenate to a token
  /// of rank r has rank r and gives that token (ids are ranks).
  void derive_pairs_from_ranks();
};

class BpeTokenizer final : public Tokenizer {
 public:
  /// kInvalidArgument naming the source when the model lacks a token for some byte
  /// value (byte-level BPE needs all 256) or the pattern does not compile.
  BpeTokenizer(BpeRules rules, BpeModel model);

  using Tokenizer::encode;
  void encode(std::string_view text, std::vector<uint32_t>& out, const SpecialTokens& allowed) const override;
  std::string decode(std::span<const uint32_t> ids) const override;
  uint32_t vocab_size() const override { return vocab_size_; }
  std::optional<uint32_t> special_token(std::string_view text) const override;
  std::optional<uint32_t> token_id(std::string_view text) const override;
  std::string_view format() const override { return rules_.format; }

 private:
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;

  BpeRules rules_;
  BpeModel model_;
  ByteTokens byte_tokens_{};
  std::unique_ptr<RegexSplitter> splitter_;
  std::vector<std::string> decode_text_;  // id -> bytes, ordinary and special
  std::vector<uint8_t> decodable_;
  uint32_t vocab_size_ = 0;
};

}  // namespace stoker::internal
