#include "text/bpe_tokenizer.h"

#include <algorithm>

#include "stoker/error.h"
#include "text/special_split.h"
#include "text/utf8_repair.h"

namespace stoker::internal {

void BpeModel::add_token(uint32_t id, std::string bytes, const std::string& where) {
  // Ids index dense tables: a sparse huge id in an untrusted file would allocate gigabytes.
  // Real vocabularies stay far below this (o200k_base: 200k; the largest in use ~260k).
  constexpr uint32_t kMaxTokenId = 1u << 24;
  if (id >= kMaxTokenId)
    throw_error(ErrorCode::kInvalidArgument, where + ": token id " + std::to_string(id) + " is out of range (ids below " +
                                                 std::to_string(kMaxTokenId) + " are read)");
  if (id >= tokens.size()) {
    tokens.resize(static_cast<size_t>(id) + 1);
    present.resize(static_cast<size_t>(id) + 1, 0);
  }
  if (present[id]) throw_error(ErrorCode::kInvalidArgument, where + ": token id " + std::to_string(id) + " appears twice");
  if (!ids.insert(bytes, id))
    throw_error(ErrorCode::kInvalidArgument, where + ": token id " + std::to_string(id) + " repeats the bytes of token " +
                                                 std::to_string(ids.find(bytes)));
  tokens[id] = std::move(bytes);
  present[id] = 1;
}

void BpeModel::derive_pairs_from_ranks() {
  for (uint32_t id = 0; id < tokens.size(); ++id) {
    if (!present[id]) continue;
    const std::string_view b = tokens[id];
    for (size_t k = 1; k < b.size(); ++k) {
      const uint32_t l = ids.find(b.substr(0, k));
      if (l == BytesTable::kMissing) continue;
      const uint32_t r = ids.find(b.substr(k));
      if (r != BytesTable::kMissing) pairs.insert(l, r, {id, id});
    }
  }
}

BpeTokenizer::BpeTokenizer(BpeRules rules, BpeModel model) : rules_(std::move(rules)), model_(std::move(model)) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const uint32_t id = model_.ids.find(std::string_view(&c, 1));
    if (id == BytesTable::kMissing)
      throw_error(ErrorCode::kInvalidArgument, rules_.source + ": no token for the byte " + std::to_string(b) +
                                                   " (a byte-level BPE needs one for each of the 256)");
    byte_tokens_[b] = id;
  }
  splitter_ = std::make_unique<RegexSplitter>(rules_.pattern, rules_.source);
  size_t n = model_.tokens.size();
  for (const auto& [text, id] : model_.specials) n = std::max<size_t>(n, static_cast<size_t>(id) + 1);
  decode_text_.resize(n);
  decodable_.assign(n, 0);
  for (size_t id = 0; id < model_.tokens.size(); ++id)
    if (model_.present[id]) decode_text_[id] = model_.tokens[id], decodable_[id] = 1;
  // A special token's own text wins over an ordinary token of that id (tokenizer.json
  // lists added tokens in its vocab too).
  for (const auto& [text, id] : model_.specials) decode_text_[id] = text, decodable_[id] = 1;
  vocab_size_ = static_cast<uint32_t>(n);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_tokens_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (rules_.whole_piece_first) {
    const uint32_t id = model_.ids.find(piece);
    if (id != BytesTable::kMissing) {
      out.push_back(id);
      return;
    }
  }
  bpe_merge(piece, byte_tokens_, model_.pairs, out);
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  if (text.empty()) return;
  thread_local std::vector<PieceRange> pieces;
  thread_local std::string prefixed;
  if (rules_.prefix_space && text[0] != ' ') {
    prefixed.assign(1, ' ');
    prefixed.append(text);
    text = prefixed;
  }
  pieces.clear();
  splitter_->split(text, rules_.keep_gaps, pieces);
  for (const PieceRange& p : pieces) encode_piece(text.substr(p.first, p.second - p.first), out);
}

void BpeTokenizer::encode(std::string_view raw, std::vector<uint32_t>& out, const SpecialTokens& allowed) const {
  std::string scratch;
  const std::string_view text = repair_utf8(raw, scratch);
  if (text.size() >= 0xFFFFFFFFull)
    throw_error(ErrorCode::kInvalidArgument, "tokenizer: a text of " + std::to_string(text.size()) +
                                                 " bytes is over the 4 GiB one encode() takes");
  split_at_specials(text, model_.specials, allowed, rules_.source,
                    [&](std::string_view run) { encode_ordinary(run, out); }, out);
}

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  for (uint32_t id : ids) {
    if (id >= decodable_.size() || !decodable_[id])
      throw_error(ErrorCode::kInvalidArgument, rules_.source + ": no token has the id " + std::to_string(id));
    out += decode_text_[id];
  }
  return out;
}

std::optional<uint32_t> BpeTokenizer::special_token(std::string_view text) const {
  auto it = model_.specials.find(std::string(text));
  if (it == model_.specials.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> BpeTokenizer::token_id(std::string_view text) const {
  if (auto s = special_token(text)) return s;
  const uint32_t id = model_.ids.find(text);
  if (id == BytesTable::kMissing) return std::nullopt;
  return id;
}

}  // namespace stoker::internal
