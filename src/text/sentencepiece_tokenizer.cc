#include "text/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <map>

#include "stoker/error.h"
#include "text/special_split.h"
#include "text/utf8_repair.h"

namespace stoker::internal {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    const auto status = sp_.Load(path);
    if (!status.ok())
      throw_error(ErrorCode::kInvalidArgument, path + ": not a SentencePiece model (" + status.ToString() + ")");
    for (int id = 0; id < sp_.GetPieceSize(); ++id)
      if (sp_.IsControl(id)) specials_.emplace(sp_.IdToPiece(id), static_cast<uint32_t>(id));
  }

  using Tokenizer::encode;
  void encode(std::string_view raw, std::vector<uint32_t>& out, const SpecialTokens& allowed) const override {
    std::string scratch;
    const std::string_view text = repair_utf8(raw, scratch);
    split_at_specials(text, specials_, allowed, path_, [&](std::string_view run) { encode_run(run, out); }, out);
  }

  std::string decode(std::span<const uint32_t> ids) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (uint32_t id : ids) {
      if (id >= vocab_size()) throw_error(ErrorCode::kInvalidArgument, path_ + ": no token has the id " + std::to_string(id));
      v.push_back(static_cast<int>(id));
    }
    std::string out;
    const auto status = sp_.Decode(v, &out);
    if (!status.ok()) throw_error(ErrorCode::kInvalidArgument, path_ + ": " + status.ToString());
    return out;
  }

  uint32_t vocab_size() const override { return static_cast<uint32_t>(sp_.GetPieceSize()); }

  std::optional<uint32_t> special_token(std::string_view text) const override {
    auto it = specials_.find(std::string(text));
    if (it == specials_.end()) return std::nullopt;
    return it->second;
  }

  std::optional<uint32_t> token_id(std::string_view text) const override {
    const int id = sp_.PieceToId(std::string(text));
    if (id < 0 || (sp_.IsUnknown(id) && sp_.IdToPiece(id) != text)) return std::nullopt;
    return static_cast<uint32_t>(id);
  }

  std::string_view format() const override { return "sentencepiece"; }

 private:
  void encode_run(std::string_view run, std::vector<uint32_t>& out) const {
    if (run.empty()) return;
    std::vector<int> ids;
    const auto status = sp_.Encode(run, &ids);
    if (!status.ok()) throw_error(ErrorCode::kInvalidArgument, path_ + ": " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
  std::map<std::string, uint32_t> specials_;
};

}  // namespace

std::unique_ptr<Tokenizer> open_sentencepiece(const std::string& path, const TokenizerOptions& options) {
  if (!options.pattern.empty() || !options.special_tokens.empty())
    throw_error(ErrorCode::kInvalidArgument, path + ": a SentencePiece model has its own rules and special tokens; give none");
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace stoker::internal
