// pack_text: text files and JSON Lines tokenised into a token dataset that the Loader
// reads with tokens, targets and document boundaries; the token stream is each document
// as [bos] + its ids + [eos] in input order, decoding back to the text; the same bytes
// whatever the thread count; errors name the file and line.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "stoker/commit.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/pack.h"
#include "stoker/tokenizer.h"
#include "util/base64.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using stoker::testing::base64;

using testing::TempDir;

constexpr uint32_t kBos = 300, kEos = 301;

// A ranks file of the 256 bytes and a few merges; its pattern and specials are options.
TextPackOptions options_for(const TempDir& dir) {
  std::ofstream f(dir.str("small.tiktoken"));
  uint32_t rank = 0;
  for (int b = 0; b < 256; ++b) f << base64(std::string(1, static_cast<char>(b))) << ' ' << rank++ << '\n';
  for (const char* t : {"th", "the", " the", "in", "ing", " a", "an", " an", "and", " and"}) f << base64(t) << ' ' << rank++ << '\n';
  f.close();
  TextPackOptions o;
  o.tokenizer = dir.str("small.tiktoken");
  o.tokenizer_options.pattern = R"( ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  o.tokenizer_options.special_tokens = {{"<bos>", kBos}, {"<eos>", kEos}};
  o.bos = "<bos>";
  o.eos = std::to_string(kEos);
  o.seq_len = 16;
  o.rows_per_record = 3;
  return o;
}

const std::vector<std::string> kDocs = {
    "the cat and the hat\nin the rain\n",
    "ünïcödé and emoji 🎉 inside",
    "a line with \"quotes\" and <eos> text",
    "",
    "the end, and then another beginning of a longer document that spans rows and records",
};

void write_inputs(const TempDir& dir) {
  std::filesystem::create_directories(dir.str("in"));
  std::ofstream(dir.str("in/a.txt")) << kDocs[0];
  std::ofstream j(dir.str("in/b.jsonl"));
  j << R"({"text": "ünïcödé and emoji 🎉 inside", "id": 1})" << "\n\n";
  j << R"({"id": 2, "text": "a line with \"quotes\" and <eos> text"})" << "\n";
  j << R"({"text": ""})" << "\n";
  j.close();
  std::ofstream(dir.str("in/c.txt")) << kDocs[4];
}

TEST(TextPack, LoaderReadsTheDocumentsAsTokensAndTargets) {
  TempDir dir;
  write_inputs(dir);
  TextPackOptions o = options_for(dir);
  const PackSummary s = pack_text({dir.str("in")}, dir.str("ds"), o);
  auto tok = open_tokenizer(o.tokenizer, o.tokenizer_options);
  std::vector<uint32_t> stream;
  std::vector<size_t> doc_start;
  for (const std::string& d : kDocs) {
    doc_start.push_back(stream.size());
    stream.push_back(kBos);
    tok->encode(d, stream);  // "<eos>" in the text is text, not the special
    stream.push_back(kEos);
  }
  EXPECT_EQ(s.tokens_dropped, (stream.size() - 1) % 16);
  const uint64_t rows = (stream.size() - 1) / 16;
  EXPECT_EQ(std::count(stream.begin(), stream.end(), kEos), static_cast<long>(kDocs.size()));
  // Each document decodes back to its text.
  for (size_t i = 0; i < kDocs.size(); ++i) {
    const size_t end = i + 1 < kDocs.size() ? doc_start[i + 1] : stream.size();
    std::vector<uint32_t> ids(stream.begin() + static_cast<long>(doc_start[i]) + 1, stream.begin() + static_cast<long>(end) - 1);
    EXPECT_EQ(tok->decode(ids), kDocs[i]);
  }

  LoaderOptions lo;
  lo.path = dir.str("ds");
  lo.batch_size = 2;
  lo.threads = 2;
  lo.targets = true;
  lo.doc_ids = true;
  lo.order.kind = OrderKind::kSequential;
  Loader loader(lo);
  uint64_t seen = 0;
  while (auto b = loader.next()) {
    const auto* idx = static_cast<const int64_t*>((*b)["index"].data);
    const auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
    const auto* y = static_cast<const uint16_t*>((*b)["targets"].data);
    const auto* d = static_cast<const int32_t*>((*b)["doc_ids"].data);
    for (size_t j = 0; j < b->size(); ++j, ++seen) {
      const uint64_t r = static_cast<uint64_t>(idx[j]);
      int32_t doc = 0;
      for (uint32_t i = 0; i < 16; ++i) {
        const uint64_t p = r * 16 + i;
        ASSERT_EQ(t[j * 16 + i], stream[p]) << "row " << r << " token " << i;
        ASSERT_EQ(y[j * 16 + i], stream[p + 1]) << "row " << r << " token " << i;
        if (i > 0 && stream[p] == kBos) ++doc;  // a document starts at each BOS
        EXPECT_EQ(d[j * 16 + i], doc) << "row " << r << " token " << i;
      }
    }
  }
  EXPECT_EQ(seen, rows);
}

TEST(TextPack, ShardsAreTheSameWhateverTheThreadCount) {
  TempDir dir;
  write_inputs(dir);
  TextPackOptions o = options_for(dir);
  o.threads = 1;
  pack_text({dir.str("in/a.txt"), dir.str("in/b.jsonl"), dir.str("in/c.txt")}, dir.str("one"), o);
  o.threads = 2;
  pack_text({dir.str("in")}, dir.str("two"), o);
  for (const auto& e : std::filesystem::directory_iterator(dir.str("one")))
    EXPECT_EQ(testing::read_file(e.path().string()), testing::read_file(dir.str("two/" + e.path().filename().string())))
        << e.path().filename();
  // Nothing is left beside the output.
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".text-pending"), std::string::npos) << e.path();
}

TEST(TextPack, BadInputsAreNamedWithTheirLine) {
  TempDir dir;
  write_inputs(dir);
  TextPackOptions o = options_for(dir);
  struct Case {
    std::string jsonl, want;
  };
  const Case cases[] = {
      {"{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n", "bad.jsonl:3: no \"text\" key"},
      {"{\"text\": \"a\"}\n{\"text\": 7}\n", "bad.jsonl:2: \"text\" is not a string"},
      {"{\"text\": \"a\"}\n[1, 2]\n", "bad.jsonl:2: not a JSON object"},
      {"{\"text\": \"a\"\n", "bad.jsonl:1: not JSON"},
      {"{\"text\": \"a\"}\n{\"text\": \"b\", \"n\": 777e99999999999}\n", "bad.jsonl:2: not JSON"},  // past double
  };
  for (const Case& c : cases) {
    std::ofstream(dir.str("bad.jsonl")) << c.jsonl;
    std::string msg;
    EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("in"), dir.str("bad.jsonl")}, dir.str("out"), o); }, &msg),
              ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find(c.want), std::string::npos) << msg;
    EXPECT_FALSE(std::filesystem::exists(dir.str("out")));
  }
  std::ofstream(dir.str("x.csv")) << "a,b\n";
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("x.csv")}, dir.str("out"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("x.csv: not a text input"), std::string::npos) << msg;
  o.bos = "<nope>";
  EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("in")}, dir.str("out"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("--bos <nope>"), std::string::npos) << msg;
  o = options_for(dir);
  o.tokenizer = dir.str("absent.tiktoken");
  EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("in")}, dir.str("out"), o); }), ErrorCode::kNotFound);
}

// A JSON Lines file larger than a work piece (4 MiB) is cut between lines: every line is
// one document, in order, and a bad line deep in it is named by its line in the file.
TEST(TextPack, LargeJsonLinesKeepLineNumbersAcrossPieces) {
  TempDir dir;
  TextPackOptions o = options_for(dir);
  o.threads = 2;
  const std::string pad(200, 'x');
  const int lines = 30000;  // ~6.5 MB: two pieces or more
  {
    std::ofstream f(dir.str("big.jsonl"));
    for (int i = 1; i <= lines; ++i) f << "{\"pad\": \"" << pad << "\", \"text\": \"the " << i << "\"}\n";
  }
  const PackSummary s = pack_text({dir.str("big.jsonl")}, dir.str("ds"), o);
  EXPECT_EQ(read_manifest(dir.str("ds")).meta.at("documents"), std::to_string(lines));
  EXPECT_GT(s.input_bytes, 4u << 20);
  {
    std::ofstream f(dir.str("big.jsonl"), std::ios::app);
    f << "{\"text\": \"fine\"}\n{\"pad\": 1}\n";
  }
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("big.jsonl")}, dir.str("ds2"), o); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("big.jsonl:" + std::to_string(lines + 2) + ": no \"text\" key"), std::string::npos) << msg;
}

// The tool: `stoker pack text` packs, names a bad line, and its help names its options.
TEST(TextPack, ToolPacksAndNamesTheBadLine) {
  TempDir dir;
  write_inputs(dir);
  const TextPackOptions o = options_for(dir);
  const char* env = std::getenv("STOKER_TEST_TOOL");
  const std::string tool = env && *env ? env : STOKER_CLI_PATH;
  auto run = [&](const std::string& args, std::string* out) {
    const std::string cmd = tool + " " + args + " >" + dir.str("log") + " 2>&1 </dev/null";
    const int status = std::system(cmd.c_str());
    *out = testing::read_file_text(dir.str("log"));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  };
  const std::string common = " --tokenizer " + o.tokenizer + " --pattern '" + o.tokenizer_options.pattern +
                             "' --special '<bos>=300' --special '<eos>=301' --bos '<bos>' --eos 301 --seq-len 16";
  std::string out;
  EXPECT_EQ(run("pack text " + dir.str("in") + " " + dir.str("ds") + common, &out), 0) << out;
  EXPECT_NE(out.find("tokenized 5 documents"), std::string::npos) << out;
  EXPECT_EQ(read_manifest(dir.str("ds")).meta.at("documents"), "5");
  std::ofstream(dir.str("bad.jsonl")) << "{\"text\": \"a\"}\n{\"body\": \"b\"}\n";
  EXPECT_EQ(run("pack text " + dir.str("bad.jsonl") + " " + dir.str("ds2") + common, &out), 1) << out;
  EXPECT_NE(out.find("bad.jsonl:2: no \"text\" key"), std::string::npos) << out;
  EXPECT_EQ(run("pack text --help", &out), 0) << out;
  for (const char* m : {"--tokenizer", "--bos", "--eos", "--jsonl-key", "--seq-len", "--pattern", "--special",
                        "--allow-special", "--threads"})
    EXPECT_NE(out.find(m), std::string::npos) << m;
}

// Parts cut the documents (whole files, whole JSON lines): every document lands in
// exactly one part, and the merged counts are the parts' sums.
TEST(TextPack, PartsSplitTheDocumentsAndCommitSumsTheirCounts) {
  TempDir dir;
  write_inputs(dir);
  TextPackOptions o = options_for(dir);
  o.seq_len = 8;
  pack_text({dir.str("in")}, dir.str("one"), o);
  uint64_t tokens = 0, documents = 0;
  for (uint32_t i = 0; i < 2; ++i) {
    o.part = PartSpec{i, 2};
    pack_text({dir.str("in")}, dir.str("two"), o);
    const Manifest p = read_manifest_file(dir.str("two/") + part_manifest_name(o.part));
    tokens += std::stoull(p.meta.at("tokens"));
    documents += std::stoull(p.meta.at("documents"));
  }
  commit_parts(dir.str("two"));
  const Manifest one = read_manifest(dir.str("one")), two = read_manifest(dir.str("two"));
  EXPECT_EQ(two.meta.at("tokens"), one.meta.at("tokens"));
  EXPECT_EQ(two.meta.at("documents"), one.meta.at("documents"));
  EXPECT_EQ(std::to_string(tokens), one.meta.at("tokens"));
  EXPECT_EQ(std::to_string(documents), one.meta.at("documents"));
  EXPECT_EQ(two.meta.at("parts"), "2");
  o.part = PartSpec{0, 4};  // 3 pieces in 4 parts: part 0 gets none
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("in")}, dir.str("four"), o); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("use at most 3 parts"), std::string::npos) << msg;
}

}  // namespace
}  // namespace stoker
