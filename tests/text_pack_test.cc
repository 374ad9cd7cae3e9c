// pack_text: text files and JSON Lines tokenised into a token dataset that the Loader
// reads with tokens, targets and document boundaries; the token stream is each document
// as [bos] + its ids + [eos] in input order, decoding back to the text; the same bytes
// whatever the thread count; errors name the file and line.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "stoker/commit.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/pack.h"
#include "stoker/tokenizer.h"
#include "util/base64.h"
#include "util/tar_builder.h"
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
  const std::string tool = testing::test_tool(STOKER_CLI_PATH);
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
  // The tokenizer and the ids around documents, for whoever reads or extends the dataset.
  const Manifest tm = read_manifest(dir.str("ds"));
  EXPECT_EQ(tm.meta.at("tokenizer"), "small.tiktoken");
  EXPECT_EQ(tm.meta.at("tokenizer_format"), "tiktoken");
  EXPECT_EQ(tm.meta.at("bos"), std::to_string(kBos));
  EXPECT_EQ(tm.meta.at("eos"), std::to_string(kEos));
  std::ofstream(dir.str("bad.jsonl")) << "{\"text\": \"a\"}\n{\"body\": \"b\"}\n";
  EXPECT_EQ(run("pack text " + dir.str("bad.jsonl") + " " + dir.str("ds2") + common, &out), 1) << out;
  EXPECT_NE(out.find("bad.jsonl:2: no \"text\" key"), std::string::npos) << out;
  EXPECT_EQ(run("pack text --help", &out), 0) << out;
  for (const char* m : {"--tokenizer", "--bos", "--eos", "--jsonl-key", "--seq-len", "--pattern", "--special",
                        "--allow-special", "--threads"})
    EXPECT_NE(out.find(m), std::string::npos) << m;
}


// The same documents tokenised in the loader (a text dataset, LoaderOptions::tokenizer)
// and at pack time: each document's ids, reassembled from the packed rows, are the
// pack-time stream's documents, in record order.
TEST(TextPack, TokenisingInTheLoaderGivesThePackTimeDocuments) {
  TempDir dir;
  write_inputs(dir);
  TextPackOptions o = options_for(dir);
  pack_text({dir.str("in")}, dir.str("packed"), o);
  std::vector<uint16_t> packed;  // the pack-time stream, row after row
  {
    LoaderOptions lo;
    lo.path = dir.str("packed");
    lo.batch_size = 1;
    lo.order.kind = OrderKind::kSequential;
    Loader l(lo);
    while (auto b = l.next()) {
      const auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
      packed.insert(packed.end(), t, t + 16);
    }
  }
  Schema schema{{Field{"__key__", FieldKind::kText}, Field{"txt", FieldKind::kText}}};
  {
    DatasetWriter w(dir.str("text"), schema);
    for (size_t i = 0; i < kDocs.size(); ++i) {
      const std::string key = std::to_string(i);
      std::vector<std::span<const uint8_t>> f{{reinterpret_cast<const uint8_t*>(key.data()), key.size()},
                                              {reinterpret_cast<const uint8_t*>(kDocs[i].data()), kDocs[i].size()}};
      w.add(f);
    }
    w.finish();
  }
  LoaderOptions lo;
  lo.path = dir.str("text");
  lo.tokenizer = o.tokenizer;
  lo.tokenizer_options = o.tokenizer_options;
  lo.bos = kBos;
  lo.eos = kEos;
  lo.seq_len = 16;
  lo.long_samples = LongSamples::kSplit;
  lo.batch_size = 2;
  lo.threads = 2;
  lo.position_ids = true;
  Loader l(lo);
  std::map<int64_t, std::vector<uint32_t>> docs;  // record -> its ids, by position
  while (auto b = l.next()) {
    const auto* t = static_cast<const uint32_t*>((*b)["tokens"].data);
    const auto* p = static_cast<const int32_t*>((*b)["position_ids"].data);
    const TensorView& si = (*b)["sample_index"];
    for (size_t j = 0; j < b->size(); ++j) {
      int64_t piece = si.offsets[j] - 1;
      for (uint32_t i = 0; i < 16; ++i) {
        if (i == 0 || p[j * 16 + i] != p[j * 16 + i - 1] + 1) ++piece;  // a new piece starts
        if (piece >= si.offsets[j + 1]) break;                          // padding
        auto& d = docs[static_cast<const int64_t*>(si.data)[piece]];
        const auto at = static_cast<size_t>(p[j * 16 + i]);
        if (d.size() <= at) d.resize(at + 1);
        d[at] = t[j * 16 + i];
      }
    }
  }
  ASSERT_EQ(docs.size(), kDocs.size());
  std::vector<uint16_t> stream;
  for (const auto& [rec, ids] : docs) stream.insert(stream.end(), ids.begin(), ids.end());
  ASSERT_GE(stream.size(), packed.size());
  stream.resize(packed.size());  // pack time drops the tail that fills no row
  EXPECT_EQ(stream, packed);
  EXPECT_TRUE(l.stats().tokenize);
}

// pack_samples: JSON Lines of token lists become one record per sample, which the
// loader packs into rows with the stored mask; bad lines are named with file and line.
TEST(PackSamples, TokenListsRoundTripThroughPackedRows) {
  TempDir dir;
  std::filesystem::create_directories(dir.str("in"));
  {
    std::ofstream f(dir.str("in/sft.jsonl"));
    for (int i = 0; i < 50; ++i) {
      f << R"({"input_ids": [)";
      for (int k = 0; k < 1 + i % 13; ++k) f << (k ? "," : "") << i * 100 + k;
      f << R"(], "labels_mask": [)";
      for (int k = 0; k < 1 + i % 13; ++k) f << (k ? "," : "") << (k % 2);
      f << "]}\n";
      if (i == 7) f << "\n";
    }
  }
  SamplesPackOptions o;
  o.tokens_key = "input_ids";
  o.mask_key = "labels_mask";
  o.dtype = DType::kUint16;
  const PackSummary s = pack_samples({dir.str("in")}, dir.str("ds"), o);
  EXPECT_EQ(s.records, 50u);
  auto ds = Dataset::open(dir.str("ds"));
  EXPECT_EQ(ds->schema().to_string(), "__key__:text tokens:vararray/uint16/* loss_mask:vararray/uint8/*");
  EXPECT_EQ(ds->read(9).text_field(0), "sft.jsonl:11");  // after the blank line
  LoaderOptions lo;
  lo.path = dir.str("ds");
  lo.seq_len = 16;
  lo.batch_size = 3;
  lo.loss_mask = true;
  lo.pad_id = 65535;
  Loader l(lo);
  std::map<int, std::vector<int>> seen;
  while (auto b = l.next()) {
    const auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
    const auto* m = static_cast<const uint8_t*>((*b)["loss_mask"].data);
    for (size_t i = 0; i < b->size() * 16; ++i) {
      if (t[i] == 65535) continue;  // padding
      const int sample = t[i] / 100, k = t[i] % 100;
      seen[sample].push_back(k);
      const bool last = k == sample % 13;
      EXPECT_EQ(m[i], last ? 0 : (k + 1) % 2) << sample << " " << k;
    }
  }
  ASSERT_EQ(seen.size(), 50u);
  for (auto& [sample, ks] : seen) EXPECT_EQ(ks.size(), static_cast<size_t>(1 + sample % 13)) << sample;

  struct Case {
    std::string line, want;
  };
  const std::vector<Case> bad = {
      {R"({"input_ids": [1, 2], "labels_mask": [1]})", "bad.jsonl:2: \"labels_mask\" has 1 entries for 2 tokens"},
      {R"({"input_ids": [1, 70000], "labels_mask": [1, 1]})", "bad.jsonl:2: \"input_ids\"[1] = 70000 does not fit uint16"},
      {R"({"input_ids": "1 2", "labels_mask": [1, 1]})", "bad.jsonl:2: \"input_ids\" is not a list of integers"},
      {R"({"labels_mask": [1, 1]})", "bad.jsonl:2: no \"input_ids\" key"},
      {R"({"input_ids": [1, 2], "labels_mask": [1, 2]})", "bad.jsonl:2: \"labels_mask\"[1] is not 0 or 1"},
  };
  for (const Case& c : bad) {
    std::ofstream(dir.str("bad.jsonl")) << R"({"input_ids": [5], "labels_mask": [1]})" << "\n" << c.line << "\n";
    try {
      pack_samples({dir.str("bad.jsonl")}, dir.str("bad"), o);
      ADD_FAILURE() << "packed: " << c.line;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << e.what();
    }
  }
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

// Tars of .txt members and a dataset's text field are documents too: the same documents
// from a tar, from a dataset and from text files give the same token rows.
TEST(TextPack, TarsAndDatasetsGiveTheSameDocumentsAsFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir.str("files"));
  testing::TarBuilder tar;
  Schema schema{{Field{"__key__", FieldKind::kText}, Field{"caption", FieldKind::kText}}};
  DatasetWriter w(dir.str("textds"), schema);
  for (size_t i = 0; i < kDocs.size(); ++i) {
    const std::string name = "d" + std::to_string(i);
    std::ofstream(dir.str("files/" + name + ".txt")) << kDocs[i];
    tar.file(name + ".txt", kDocs[i]);
    tar.file(name + ".cls", std::string("7"));  // not text: ignored
    std::vector<std::span<const uint8_t>> f{{reinterpret_cast<const uint8_t*>(name.data()), name.size()},
                                            {reinterpret_cast<const uint8_t*>(kDocs[i].data()), kDocs[i].size()}};
    w.add(f);
  }
  w.finish();
  tar.end();
  testing::write_file(dir.str("docs.tar"), tar.bytes);
  TextPackOptions o = options_for(dir);
  pack_text({dir.str("files")}, dir.str("from_files"), o);
  pack_text({dir.str("docs.tar")}, dir.str("from_tar"), o);
  pack_text({dir.str("textds")}, dir.str("from_dataset"), o);
  auto rows = [&](const std::string& ds) {
    LoaderOptions lo;
    lo.path = dir.str(ds);
    lo.batch_size = 1;
    lo.order.kind = OrderKind::kSequential;
    Loader l(lo);
    std::vector<uint16_t> all;
    while (auto b = l.next()) {
      const auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
      all.insert(all.end(), t, t + 16);
    }
    return all;
  };
  const auto files = rows("from_files");
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(rows("from_tar"), files);
  EXPECT_EQ(rows("from_dataset"), files);
  o.text_field = "nope";
  std::string msg;
  EXPECT_EQ(testing::error_code_of([&] { pack_text({dir.str("textds")}, dir.str("bad"), o); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("no text field 'nope'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace stoker
