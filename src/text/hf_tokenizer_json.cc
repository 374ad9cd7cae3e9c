#include "text/hf_tokenizer_json.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include <array>
#include <unordered_map>

#include "stoker/error.h"
#include "text/bpe_tokenizer.h"
#include "util/bytes.h"

namespace stoker::internal {

namespace {

using json = nlohmann::json;

// The regex Hugging Face's ByteLevel pre-tokenizer splits with (GPT-2's).
constexpr std::string_view kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode, inverted: the code point each byte is written as in a
// byte-level vocabulary -> the byte. Printable Latin-1 bytes stand for themselves, the
// others for 256 + their order among them.
std::unordered_map<uint32_t, uint8_t> byte_level_alphabet() {
  std::unordered_map<uint32_t, uint8_t> m;
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    m[printable ? b : 256 + extra++] = static_cast<uint8_t>(b);
  }
  return m;
}

// A vocabulary string back to the bytes it stands for; false when a character is not
// in the byte-level alphabet.
bool byte_level_bytes(std::string_view s, const std::unordered_map<uint32_t, uint8_t>& alphabet, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    uint32_t cp;
    size_t len;
    if (c < 0x80) cp = c, len = 1;
    else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, len = 2;
    else if ((c & 0xF0) == 0xE0) cp = c & 0x0F, len = 3;
    else cp = c & 0x07, len = 4;
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    i += len;
    auto it = alphabet.find(cp);
    if (it == alphabet.end()) return false;
    out += static_cast<char>(it->second);
  }
  return true;
}

[[noreturn]] void refuse(const std::string& path, const std::string& key, const std::string& why) {
  throw_error(ErrorCode::kInvalidArgument, path + ": " + key + ": " + why);
}

// A token id: a JSON integer in uint32 range (nlohmann's get<uint32_t> converts floats and
// out-of-range numbers with undefined behaviour).
uint32_t token_id_of(const json& v, const std::string& path, const std::string& key) {
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= UINT32_MAX
                                               : v.is_number_integer() && v.get<int64_t>() >= 0 &&
                                                     v.get<int64_t>() <= int64_t{UINT32_MAX};
  if (!in_range) refuse(path, key, "the id " + v.dump() + " is not an integer in 0..4294967295");
  return static_cast<uint32_t>(v.get<uint64_t>());
}

bool null_or_empty(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

void read_pre_tokenizer(const std::string& path, const json& pre, BpeRules& rules) {
  auto byte_level = [&](const json& b, bool with_regex, const std::string& key) {
    if (b.value("use_regex", true) != with_regex)
      refuse(path, key + ".use_regex", with_regex ? "false is read only after a Split" : "true after a Split splits twice");
    rules.prefix_space = b.value("add_prefix_space", false);
  };
  if (pre.is_null()) refuse(path, "pre_tokenizer", "none: a byte-level BPE needs ByteLevel");
  const std::string type = pre.value("type", "");
  rules.keep_gaps = true;  // both shapes split with behavior Isolated
  if (type == "ByteLevel") {
    byte_level(pre, true, "pre_tokenizer");
    rules.pattern = kByteLevelPattern;
    return;
  }
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].size() == 2) {
    const json& split = pre["pretokenizers"][0];
    const json& bl = pre["pretokenizers"][1];
    if (split.value("type", "") == "Split" && bl.value("type", "") == "ByteLevel") {
      if (!split.contains("pattern") || !split["pattern"].contains("Regex"))
        refuse(path, "pre_tokenizer.pretokenizers[0].pattern", "only {\"Regex\": ...} is read");
      if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
        refuse(path, "pre_tokenizer.pretokenizers[0]", "only behavior Isolated, invert false is read");
      byte_level(bl, false, "pre_tokenizer.pretokenizers[1]");
      if (rules.prefix_space) refuse(path, "pre_tokenizer.pretokenizers[1].add_prefix_space", "true is not read after a Split");
      rules.pattern = split["pattern"]["Regex"].get<std::string>();
      return;
    }
  }
  refuse(path, "pre_tokenizer", "only ByteLevel, or a Sequence of a Split by regex and a ByteLevel, is read (got " +
                                    pre.dump().substr(0, 120) + ")");
}

}  // namespace

std::unique_ptr<Tokenizer> open_hf_tokenizer_json(const std::string& path, const TokenizerOptions& options) {
  if (!options.pattern.empty() || !options.special_tokens.empty())
    throw_error(ErrorCode::kInvalidArgument, path + ": a tokenizer.json has its own pattern and special tokens; give none");
  json j;
  try {
    j = json::parse(read_small_file(path, 1ull << 30));
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double
    throw_error(ErrorCode::kInvalidArgument, path + ": not JSON (" + e.what() + ")");
  }
  try {
    if (!j.is_object() || !j.contains("model")) refuse(path, "model", "missing: not a tokenizer.json");
    const json& m = j["model"];
    if (m.value("type", "BPE") != "BPE") refuse(path, "model.type", m.value("type", "") + " is not BPE");
    if (m.contains("dropout") && !m["dropout"].is_null()) refuse(path, "model.dropout", "BPE dropout is not read");
    if (m.value("byte_fallback", false)) refuse(path, "model.byte_fallback", "true is not read");
    if (!null_or_empty(m, "continuing_subword_prefix")) refuse(path, "model.continuing_subword_prefix", "is not read");
    if (!null_or_empty(m, "end_of_word_suffix")) refuse(path, "model.end_of_word_suffix", "is not read");
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      refuse(path, "normalizer", j["normalizer"].value("type", "?") + " is not read (only none)");

    BpeRules rules;
    rules.format = "tokenizer.json";
    rules.source = path;
    rules.whole_piece_first = m.value("ignore_merges", false);
    read_pre_tokenizer(path, j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), rules);

    BpeModel model;
    if (j.contains("added_tokens")) {
      for (const json& a : j["added_tokens"]) {
        const std::string content = a.at("content").get<std::string>();
        if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false))
          refuse(path, "added_tokens \"" + content + "\"", "lstrip, rstrip and single_word are not read");
        if (content.empty()) refuse(path, "added_tokens", "an added token with empty content");
        model.specials[content] = token_id_of(a.at("id"), path, "added_tokens \"" + content + "\"");
      }
    }
    const auto alphabet = byte_level_alphabet();
    std::unordered_map<std::string, uint32_t> vocab;  // vocabulary string -> id
    std::string bytes;
    for (const auto& [text, id_json] : m.at("vocab").items()) {
      const uint32_t id = token_id_of(id_json, path, "model.vocab \"" + text + "\"");
      vocab.emplace(text, id);
      if (byte_level_bytes(text, alphabet, bytes)) {
        model.add_token(id, bytes, path + ": model.vocab \"" + text + "\"");
      } else if (!model.specials.count(text)) {
        refuse(path, "model.vocab \"" + text + "\"", "not written in the byte-level alphabet");
      }
    }
    uint32_t rank = 0;
    for (const json& merge : m.at("merges")) {
      std::string a, b;
      if (merge.is_string()) {
        const std::string s = merge.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          refuse(path, "model.merges[" + std::to_string(rank) + "]", "\"" + s + "\" is not two tokens");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else {
        a = merge.at(0).get<std::string>(), b = merge.at(1).get<std::string>();
      }
      auto l = vocab.find(a), r = vocab.find(b), t = vocab.find(a + b);
      if (l == vocab.end() || r == vocab.end() || t == vocab.end())
        refuse(path, "model.merges[" + std::to_string(rank) + "]", "\"" + a + " " + b + "\" has a token not in the vocab");
      if (!model.pairs.insert(l->second, r->second, {rank, t->second}))
        refuse(path, "model.merges[" + std::to_string(rank) + "]", "\"" + a + " " + b + "\" is listed twice");
      ++rank;
    }
    return std::make_unique<BpeTokenizer>(std::move(rules), std::move(model));
  } catch (const json::exception& e) {
    throw_error(ErrorCode::kInvalidArgument, path + ": malformed tokenizer.json (" + e.what() + ")");
  }
}

}  // namespace stoker::internal
