#include "text/tiktoken_file.h"

#include <array>
#include <charconv>
#include <filesystem>

#include "stoker/error.h"
#include "text/bpe_tokenizer.h"
#include "util/bytes.h"

namespace stoker::internal {

namespace {

// tiktoken's own patterns (tiktoken_ext/openai_public.py), verbatim.
constexpr std::string_view kR50kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const KnownEncoding kKnown[] = {
    {"r50k_base", kR50kPattern, {{"<|endoftext|>", 50256}}},
    {"p50k_base", kR50kPattern, {{"<|endoftext|>", 50256}}},
    {"cl100k_base",
     kCl100kPattern,
     {{"<|endoftext|>", 100257},
      {"<|fim_prefix|>", 100258},
      {"<|fim_middle|>", 100259},
      {"<|fim_suffix|>", 100260},
      {"<|endofprompt|>", 100276}}},
    {"o200k_base", kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
};

// Standard base64 (RFC 4648, with padding), as tiktoken writes it. false on anything else.
bool decode_base64(std::string_view in, std::string& out) {
  static constexpr auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(a[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const size_t pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=') : 0;
    if (pad == 1 && in[i + 2] == '=') return false;  // "x=" then a character
    uint32_t v = 0;
    for (size_t k = 0; k < 4 - pad; ++k) {
      const int8_t d = table[static_cast<uint8_t>(in[i + k])];
      if (d < 0) return false;
      v |= static_cast<uint32_t>(d) << (18 - 6 * k);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xFF);
    if (pad < 1) out += static_cast<char>(v & 0xFF);
  }
  return true;
}

std::string stem_of(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  const std::string ext = ".tiktoken";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
    name.resize(name.size() - ext.size());
  return name;
}

}  // namespace

const KnownEncoding* find_known_encoding(std::string_view name) {
  for (const KnownEncoding& k : kKnown)
    if (k.name == name) return &k;
  return nullptr;
}

std::unique_ptr<Tokenizer> open_tiktoken(const std::string& path, const TokenizerOptions& options) {
  const std::string text = read_small_file(path, 1ull << 30);
  BpeModel model;
  std::string bytes;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const size_t space = line.find(' ');
    uint32_t rank = 0;
    const std::string_view num = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    if (space == std::string_view::npos || ec != std::errc() || p != num.data() + num.size() || num.empty())
      throw_error(ErrorCode::kInvalidArgument, where + ": not a tiktoken ranks line (\"<base64 token> <rank>\")");
    if (!decode_base64(line.substr(0, space), bytes))
      throw_error(ErrorCode::kInvalidArgument, where + ": the token is not valid base64");
    model.add_token(rank, bytes, where);
  }
  if (model.ids.size() == 0) throw_error(ErrorCode::kInvalidArgument, path + ": no ranks in the file");
  model.derive_pairs_from_ranks();

  BpeRules rules;
  rules.format = "tiktoken";
  rules.source = path;
  const std::string name = stem_of(path);
  if (const KnownEncoding* known = find_known_encoding(name)) {
    if (!options.pattern.empty() || !options.special_tokens.empty())
      throw_error(ErrorCode::kInvalidArgument, path + ": " + name +
                                                   " has its own split pattern and special tokens; give none for it");
    rules.pattern = known->pattern;
    for (const auto& [t, id] : known->specials) model.specials.emplace(std::string(t), id);
  } else {
    if (options.pattern.empty())
      throw_error(ErrorCode::kInvalidArgument,
                  path + ": not named after a known encoding (cl100k_base, o200k_base, r50k_base, p50k_base): give "
                         "its split pattern (--pattern) and special tokens (--special)");
    rules.pattern = options.pattern;
    model.specials = options.special_tokens;
  }
  for (const auto& [t, id] : model.specials)
  {
    if (t.empty()) throw_error(ErrorCode::kInvalidArgument, path + ": a special token with empty text");
    if (id < model.present.size() && model.present[id])
      throw_error(ErrorCode::kInvalidArgument, path + ": special token " + t + " has the id " + std::to_string(id) +
                                                   " of a ranked token");
  }
  return std::make_unique<BpeTokenizer>(std::move(rules), std::move(model));
}

}  // namespace stoker::internal
