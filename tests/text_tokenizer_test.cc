// The tokenizer core without oracles: the two merge loops agree, UTF-8 repair follows
// the maximal-subpart rule, special tokens are cut only where allowed, the formats
// table opens files by name and by content, malformed files are refused naming the file
// and line, and one tokenizer encodes on many threads at once.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>

#include "stoker/tokenizer.h"
#include "text/bpe_merge.h"
#include "text/regex_splitter.h"
#include "text/utf8_repair.h"
#include "util/base64.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using stoker::testing::base64;

using internal::ByteTokens;
using internal::PairTable;

// A small ranks file: the 256 bytes, then merges of "ab", "abab", "aa", "aaaa", " a".
std::string write_ranks(const testing::TempDir& dir, const std::string& name) {
  std::ofstream f(dir.str(name));
  uint32_t rank = 0;
  for (int b = 0; b < 256; ++b) f << base64(std::string(1, static_cast<char>(b))) << ' ' << rank++ << '\n';
  for (const char* t : {"ab", "aa", "abab", "aaaa", " a", "aaa"}) f << base64(t) << ' ' << rank++ << '\n';
  return dir.str(name);
}

TEST(TextMerge, ScanAndHeapGiveTheSameIds) {
  // Byte b is token b; pair tables of random merges over a 4-letter alphabet.
  std::mt19937 rng(7);
  for (int table = 0; table < 20; ++table) {
    ByteTokens bytes;
    for (uint32_t b = 0; b < 256; ++b) bytes[b] = b;
    PairTable pairs;
    uint32_t next_id = 256;
    std::vector<uint32_t> ids = {'a', 'b', 'c', 'd'};
    for (int m = 0; m < 60; ++m) {
      const uint32_t l = ids[rng() % ids.size()], r = ids[rng() % ids.size()];
      // Equal ranks on purpose (a rank shared by pairs), so ties are exercised.
      if (pairs.insert(l, r, {static_cast<uint32_t>(m / 3), next_id})) ids.push_back(next_id++);
    }
    for (int trial = 0; trial < 30; ++trial) {
      std::string piece(1 + rng() % internal::kBpeScanMaxBytes, 'a');
      for (char& c : piece) c = "abcd"[rng() % 4];
      std::vector<uint32_t> scan, heap;
      internal::bpe_merge_scan(piece, bytes, pairs, scan);
      internal::bpe_merge_heap(piece, bytes, pairs, heap);
      ASSERT_EQ(scan, heap) << piece;
    }
  }
}

TEST(TextUtf8, InvalidBytesBecomeOneReplacementPerMaximalSubpart) {
  std::string scratch;
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(internal::repair_utf8("plain", scratch), "plain");
  // Unicode's table 3-8 example: each maximal subpart is one U+FFFD.
  const std::string in("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", 13);
  EXPECT_EQ(internal::repair_utf8(in, scratch), "a" + fffd + fffd + fffd + "b" + fffd + "c" + fffd + fffd + "d");
  EXPECT_EQ(internal::repair_utf8(std::string("\xF0\x9F\x8E", 3), scratch), fffd);
  EXPECT_EQ(internal::repair_utf8(std::string("\xED\xA0\x80", 3), scratch), fffd + fffd + fffd);  // surrogate
  EXPECT_EQ(internal::repair_utf8(std::string("\xC0\xAF", 2), scratch), fffd + fffd);            // overlong
}

TEST(TextSplit, WhiteSpaceIncludesNextLine) {
  EXPECT_EQ(internal::RegexSplitter::white_space_compatible(R"(\s+(?!\S)|[^\s\p{L}])"),
            R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
  internal::RegexSplitter split(R"(\s+|\S+)", "test");
  std::vector<internal::PieceRange> pieces;
  split.split("a\xC2\x85" "b", false, pieces);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1], internal::PieceRange(1, 3));
}

TEST(TextTokenizer, RanksFileEncodesDecodesAndAllowsSpecialsOnlyWhenAsked) {
  testing::TempDir dir;
  TokenizerOptions o;
  o.pattern = R"( ?\p{L}+|\s+)";
  o.special_tokens = {{"<|eot|>", 1000}, {"<|eot|>x", 1001}};
  auto tok = open_tokenizer(write_ranks(dir, "mine.tiktoken"), o);
  EXPECT_EQ(tok->vocab_size(), 1002u);
  EXPECT_EQ(tok->encode("abab"), std::vector<uint32_t>{258});
  EXPECT_EQ(tok->encode("aaaaa"), (std::vector<uint32_t>{259, 'a'}));
  EXPECT_EQ(tok->encode(" aab"), (std::vector<uint32_t>{260, 256}));  // " a" first, "ab" second: whole rank order
  EXPECT_EQ(tok->encode("ab<|eot|>ab", SpecialTokens::every()), (std::vector<uint32_t>{256, 1000, 256}));
  EXPECT_EQ(tok->encode("<|eot|>x", SpecialTokens::every()), std::vector<uint32_t>{1001});  // the longer one
  EXPECT_EQ(tok->encode("<|eot|>x", SpecialTokens{false, {"<|eot|>"}}), (std::vector<uint32_t>{1000, 'x'}));
  // Not allowed: a special's text is ordinary text (dropped where the pattern does not match it, as in tiktoken).
  const std::vector<uint32_t> plain = tok->encode("ab<|eot|>ab");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1000u), 0);
  EXPECT_EQ(tok->decode(std::vector<uint32_t>{256, 1000, 260}), "ab<|eot|> a");
  EXPECT_EQ(tok->special_token("<|eot|>"), 1000u);
  EXPECT_EQ(tok->token_id("abab"), 258u);
  EXPECT_FALSE(tok->token_id("abc").has_value());
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { tok->decode(std::vector<uint32_t>{999}); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_EQ(testing::error_code_of([&] { tok->encode("x", SpecialTokens{false, {"<nope>"}}); }),
            ErrorCode::kInvalidArgument);
}

TEST(TextTokenizer, FormatIsToldByContentWhenTheNameSaysNothing) {
  testing::TempDir dir;
  const std::string ranks = write_ranks(dir, "ranks.tiktoken");
  std::filesystem::copy_file(ranks, dir.str("vocab.bin"));
  TokenizerOptions o;
  o.pattern = R"(\S+|\s+)";
  EXPECT_EQ(open_tokenizer(dir.str("vocab.bin"), o)->format(), "tiktoken");
  testing::write_file(dir.str("junk.bin"), {'x', 'y', 'z'});
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(dir.str("junk.bin")); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("junk.bin: not a tokenizer"), std::string::npos) << msg;
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(dir.str("absent.tiktoken")); }), ErrorCode::kNotFound);
}

TEST(TextTokenizer, MalformedFilesAreRefusedNamingFileAndLine) {
  testing::TempDir dir;
  TokenizerOptions o;
  o.pattern = R"(\S+)";
  struct Case {
    std::string text, want;
  };
  const Case cases[] = {
      {base64("a") + " 0\n" + "not-base64! 1\n", "bad.tiktoken:2: the token is not valid base64"},
      {base64("a") + " 0\n" + base64("b") + " x\n", "bad.tiktoken:2: not a tiktoken ranks line"},
      {base64("a") + " 0\n" + base64("a") + " 1\n", "bad.tiktoken:2: token id 1 repeats the bytes of token 0"},
      {base64("a") + " 0\n" + base64("b") + " 0\n", "bad.tiktoken:2: token id 0 appears twice"},
      {base64("a") + " 0\n", "no token for the byte 0"},
  };
  for (const Case& c : cases) {
    std::ofstream(dir.str("bad.tiktoken")) << c.text;
    std::string msg;
    EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(dir.str("bad.tiktoken"), o); }, &msg),
              ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
  }
  const std::string ranks = write_ranks(dir, "cl100k_base.tiktoken");
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(ranks, o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("has its own split pattern"), std::string::npos) << msg;
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(write_ranks(dir, "mine.tiktoken")); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("--pattern"), std::string::npos) << msg;
  o.pattern = "(unclosed";
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(dir.str("mine.tiktoken"), o); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("does not compile"), std::string::npos) << msg;
  std::ofstream(dir.str("t.json")) << R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "normalizer": {"type": "NFC"}})";
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(dir.str("t.json")); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("t.json: normalizer: NFC is not read"), std::string::npos) << msg;
  std::ofstream(dir.str("t.json")) << R"({"model": {"type": "BPE", "vocab": {"a": 1e999}, "merges": []}})";
  EXPECT_EQ(testing::error_code_of([&] { open_tokenizer(dir.str("t.json")); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("t.json: not JSON"), std::string::npos) << msg;
}

TEST(TextTokenizer, ConcurrentEncodesGiveTheSameIds) {
  testing::TempDir dir;
  TokenizerOptions o;
  o.pattern = R"( ?\p{L}+|\s+(?!\S)|\s+|.)";
  auto tok = open_tokenizer(write_ranks(dir, "mine.tiktoken"), o);
  std::string text;
  std::mt19937 rng(3);
  const char* parts[] = {" ", "a", "b", "ab", "\t", "\xc3\xa9", "aaaa"};
  for (int i = 0; i < 20000; ++i) text += parts[rng() % 7];
  const std::vector<uint32_t> want = tok->encode(text);
  std::vector<std::thread> pool;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&] {
      for (int k = 0; k < 5; ++k)
        if (tok->encode(text) != want) ++mismatches;
    });
  for (auto& t : pool) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_TRUE(tok->decode(want) == text);
}

}  // namespace
}  // namespace stoker
