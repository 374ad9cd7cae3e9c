// Exactness of the tokenizers against the reference libraries, on a fixed corpus:
// multilingual text, emoji, whitespace runs, invalid UTF-8, special-token-like strings,
// long pieces (the heap merge path).
//   - tiktoken cl100k_base and o200k_base against npm's `tiktoken` (tiktoken's Rust
//     code in WASM), special tokens allowed and not;
//   - byte-level tokenizer.json files (a ByteLevel pre-tokenizer; a Split then a
//     ByteLevel with ignore_merges) against npm's `@anush008/tokenizers` (Hugging Face
//     tokenizers, native);
//   - a SentencePiece BPE model trained here against python3-sentencepiece.
// The oracles (tests/text/oracle.js, tests/text/sentencepiece_oracle.py) write the
// tokenizer files and the reference ids; a missing oracle skips its tests, saying so.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "stoker/tokenizer.h"
#include "util/base64.h"
#include "util/test_util.h"
#include "util/utf8.h"

namespace stoker {
namespace {

using stoker::testing::base64;

using nlohmann::json;
namespace fs = std::filesystem;

// A string literal's bytes, embedded NULs included (its length from its type, never
// counted by hand).
template <size_t N>
std::string literal(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::vector<std::string> corpus() {
  std::vector<std::string> c = {
      "",
      "Hello, world! It's a test; we'll see what they've done.",
      "HELLO WORLD I'M SHOUTING, YOU'RE NOT. ſtrange ſ and K (Kelvin sign)",
      "Le cœur a ses raisons que la raison ne connaît point. Ça va? Über straße.",
      "Ничто не вечно под луной. Привет, мир!",
      "天下没有不散的筵席。我爱北京天安门。",
      "すべての道はローマに通ず。カタカナとひらがな。",
      "한국어 텍스트도 있습니다. 안녕하세요!",
      "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก",
      "Emoji: 🎉🎉🎉 👨‍👩‍👧‍👦 family, flags 🇫🇷🇯🇵, skin 👍🏽, keycap 1️⃣ and ❤️‍🔥.",
      "Numbers 1234567890 3.14159 1,000,000 ٣٤٥ ①②③ and 12abc34",
      "tabs\tand\ttabs\t\t\tand\nnewlines\n\n\n\nand\r\nCRLF\r\n",
      std::string(300, ' ') + "x" + std::string(17, ' ') + "\n" + std::string(40, '\n'),
      "    indented code:\n        for (int i = 0; i < n; ++i) { x += y[i]; }\n",
      "<|endoftext|>",
      "before<|endoftext|>after <|endoftext|> <|fim_prefix|>mid<|fim_suffix|><|endofprompt|>",
      "<|endoftext|<|endoftext|>|> <|im_start|>user<|im_end|> <|endoftext",
      literal("bad \xff\xfe bytes \xe2\x82 and \xc0\xaf overlong \xed\xa0\x80 surrogate"),
      literal("\xf0\x9f\x8e tail cut \xf0\x9f"),
      literal("nul\0inside"),
      std::string(250, 'a') + " " + std::string(120, 'z') + "qq",
      "https://example.com/path/to/page?query=1&x=y#frag user@example.org",
      "NEL\xc2\x85here and nbsp\xc2\xa0there and ideographic\xe3\x80\x80space",
      "combining: e\xcc\x81 a\xcc\x8a n\xcc\x83; zero width\xe2\x80\x8bjoin\xe2\x80\x8d",
      "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D dog's DOG'S",
  };
  std::string big;
  for (int i = 0; i < 40; ++i) big += c[static_cast<size_t>(1 + i % 12)] + (i % 5 ? " " : "\n\n");
  c.push_back(big);
  return c;
}

bool has_command(const std::string& cmd) { return std::system(("command -v " + cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string file_text(const std::string& path) { return testing::read_file_text(path); }

// Runs the oracles once per corpus and oracle scripts (ctest starts each test in its
// own process): their output is kept under $STOKER_TEST_TMP, in a directory named by
// a hash of what made it, written beside it and renamed into place whole.
class TextExact : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    json c = json::array();
    for (const std::string& s : corpus()) c.push_back(base64(s));
    const std::string src = STOKER_SOURCE_DIR;
    const std::string node_script = src + "/tests/text/oracle.js";
    const std::string spm_script = src + "/tests/text/sentencepiece_oracle.py";
    const size_t h = std::hash<std::string>{}(c.dump() + file_text(node_script) + file_text(spm_script));
    const char* tmp = std::getenv("STOKER_TEST_TMP");
    const fs::path root = tmp ? fs::path(tmp) : fs::temp_directory_path();
    dir_ = (root / ("text-oracle-" + std::to_string(h))).string();
    if (!fs::exists(dir_ + "/done")) {
      const std::string work = dir_ + ".tmp-" + std::to_string(::getpid());
      fs::create_directories(work);
      std::ofstream(work + "/corpus.json") << c.dump();
      if (has_command("node") && has_command("npm")) {
        const std::string cmd = "NODE_PATH=\"$(npm root -g)\" node " + node_script + " " + work + " " + work +
                                "/corpus.json 2>" + work + "/node.log";
        if (std::system(cmd.c_str()) != 0) fs::remove(work + "/oracle.json");
      } else {
        std::ofstream(work + "/node.log") << "node/npm not installed";
      }
      const std::string py = has_command("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
      const std::string cmd = py + " " + spm_script + " " + work + " " + work + "/corpus.json 2>" + work + "/spm.log";
      if (std::system(cmd.c_str()) != 0) fs::remove(work + "/sentencepiece_oracle.json");
      std::ofstream(work + "/done") << "";
      std::error_code ec;
      fs::rename(work, dir_, ec);  // a concurrent test may have put its own there first
      if (ec) fs::remove_all(work);
    }
    if (fs::exists(dir_ + "/oracle.json")) node_ = json::parse(std::ifstream(dir_ + "/oracle.json"));
    else node_why_ = file_text(dir_ + "/node.log");
    if (fs::exists(dir_ + "/sentencepiece_oracle.json"))
      spm_ = json::parse(std::ifstream(dir_ + "/sentencepiece_oracle.json"));
    else spm_why_ = file_text(dir_ + "/spm.log");
  }
  static std::string file(const std::string& name) { return dir_ + "/" + name; }

  // Every corpus text's ids equal the oracle's `ids[mode]`.
  static void expect_exact(const Tokenizer& tok, const json& ids, const SpecialTokens& allowed, const std::string& what) {
    const auto texts = corpus();
    ASSERT_EQ(ids.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<uint32_t> want = ids[i].get<std::vector<uint32_t>>();
      EXPECT_EQ(tok.encode(texts[i], allowed), want) << what << ", text " << i << ": " << texts[i].substr(0, 80);
    }
  }

  static inline std::string dir_;
  static inline json node_, spm_;
  static inline std::string node_why_, spm_why_;
};

#define NEED_NODE() \
  if (node_.is_null()) GTEST_SKIP() << "npm tiktoken / @anush008/tokenizers oracle unavailable: " << node_why_
#define NEED_SPM() \
  if (spm_.is_null()) GTEST_SKIP() << "python3-sentencepiece oracle unavailable: " << spm_why_

TEST_F(TextExact, Cl100kMatchesTiktoken) {
  NEED_NODE();
  auto tok = open_tokenizer(file("cl100k_base.tiktoken"));
  EXPECT_EQ(tok->format(), "tiktoken");
  EXPECT_EQ(tok->vocab_size(), 100277u);
  expect_exact(*tok, node_["cl100k_base"]["none"], SpecialTokens::none(), "cl100k_base, no specials");
  expect_exact(*tok, node_["cl100k_base"]["all"], SpecialTokens::every(), "cl100k_base, all specials");
}

TEST_F(TextExact, O200kMatchesTiktoken) {
  NEED_NODE();
  auto tok = open_tokenizer(file("o200k_base.tiktoken"));
  EXPECT_EQ(tok->vocab_size(), 200019u);
  expect_exact(*tok, node_["o200k_base"]["none"], SpecialTokens::none(), "o200k_base, no specials");
  expect_exact(*tok, node_["o200k_base"]["all"], SpecialTokens::every(), "o200k_base, all specials");
}

TEST_F(TextExact, ByteLevelTokenizerJsonMatchesHuggingFace) {
  NEED_NODE();
  for (const char* name : {"gpt2-bytelevel", "prefix-bytelevel", "split-bytelevel"}) {
    auto tok = open_tokenizer(file(std::string(name) + ".json"));
    EXPECT_EQ(tok->format(), "tokenizer.json");
    expect_exact(*tok, node_[name]["all"], SpecialTokens::every(), name);
  }
}

TEST_F(TextExact, SentencePieceMatchesItsLibrary) {
  NEED_SPM();
  auto tok = open_tokenizer(file("tiny.model"));
  EXPECT_EQ(tok->format(), "sentencepiece");
  expect_exact(*tok, spm_["none"], SpecialTokens::none(), "sentencepiece");
}

TEST_F(TextExact, EveryFormatRoundTripsValidText) {
  NEED_NODE();
  for (const char* name : {"cl100k_base.tiktoken", "o200k_base.tiktoken", "gpt2-bytelevel.json", "split-bytelevel.json"}) {
    auto tok = open_tokenizer(file(name));
    for (const std::string& text : corpus()) {
      const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
      if (internal::utf8_error_offset(bytes) != bytes.size()) continue;
      EXPECT_EQ(tok->decode(tok->encode(text, SpecialTokens::every())), text) << name;
      EXPECT_EQ(tok->decode(tok->encode(text)), text) << name;
    }
  }
}

TEST_F(TextExact, SentencePieceRoundTripsTextItDoesNotNormalise) {
  NEED_SPM();
  auto tok = open_tokenizer(file("tiny.model"));
  // SentencePiece normalises (NFKC, whitespace runs folded, a leading space dropped):
  // text already in that form comes back as written.
  for (const std::string text : {"The quick brown fox jumps over the lazy dog.", "Привет, мир! 天下没有不散的筵席。",
                                 "In 1969, 3 astronauts flew 384,400 km."})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  const auto ctrl = tok->special_token("<ctrl>");
  ASSERT_TRUE(ctrl.has_value());
  const std::vector<uint32_t> ids = tok->encode("a<ctrl>b", SpecialTokens::every());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *ctrl), 1);
  const std::vector<uint32_t> plain = tok->encode("a<ctrl>b");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), *ctrl), 0);
}

}  // namespace
}  // namespace stoker
