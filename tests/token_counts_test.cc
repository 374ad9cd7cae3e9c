// Text tokenised in the loader: opening counts every document's tokens once and keeps
// the counts (LoaderOptions::token_counts_dir); a later open with the same dataset and
// tokenizer reads them and delivers the same batches; another tokenizer, pattern or
// dataset gets counts of its own; a damaged, stale or foreign file is named in a warning
// and replaced; loaders opening at once tokenise once; a directory that cannot be used
// is a warning, not a failure, and one where no lock can be made is still read.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/log.h"
#include "util/base64.h"
#include "util/bytes.h"
#include "util/test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kDocs = 300;

// Documents of 1 to ~200 words, some with a long run of letters that merges slowly.
void write_text(const std::string& dir, int changed = -1) {
  Schema schema{{Field{"__key__", FieldKind::kText}, Field{"txt", FieldKind::kText}}};
  DatasetWriterOptions wo;
  wo.shard_size = 16 << 10;
  DatasetWriter w(dir, schema, wo);
  for (int i = 0; i < kDocs; ++i) {
    const std::string key = "doc/" + std::to_string(i);
    std::string text = i == changed ? "changed" : "doc " + std::to_string(i);
    for (int k = 0; k < (i * 53) % 200; ++k) text += k % 9 ? " the" : " thethethe\n";
    const std::vector<std::span<const uint8_t>> f{{reinterpret_cast<const uint8_t*>(key.data()), key.size()},
                                                  {reinterpret_cast<const uint8_t*>(text.data()), text.size()}};
    w.add(f);
  }
  w.finish();
}

class TokenCounts : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(root_.str("text"));
    std::ofstream f(root_.str("small.tiktoken"));
    uint32_t rank = 0;
    for (int b = 0; b < 256; ++b) f << testing::base64(std::string(1, static_cast<char>(b))) << ' ' << rank++ << '\n';
    for (const char* t : {"th", "the", " the", "thethe"}) f << testing::base64(t) << ' ' << rank++ << '\n';
    set_log_sink([this](LogLevel level, const std::string& m) {
      std::lock_guard<std::mutex> lock(mu_);
      (level == LogLevel::kWarn ? warnings_ : infos_).push_back(m);
    });
    saved_level_ = log_level();
    set_log_level(LogLevel::kInfo);
  }
  void TearDown() override {
    set_log_sink({});
    set_log_level(saved_level_);
  }
  LoaderOptions options() const {
    LoaderOptions o;
    o.path = root_.str("text");
    o.tokenizer = root_.str("small.tiktoken");
    o.tokenizer_options.pattern = R"( ?\p{L}+| ?\p{N}+|\s+)";
    o.tokenizer_options.special_tokens = {{"<eos>", 300}, {"<bos>", 301}};
    o.token_counts_dir = root_.str("counts");
    o.eos = 300;
    o.seq_len = 64;
    o.long_samples = LongSamples::kSplit;
    o.batch_size = 4;
    o.threads = 2;
    o.rank = 0;
    o.world_size = 1;
    o.order.seed = 5;
    return o;
  }
  // One epoch's tokens and row indexes, as bytes; the plan figures of the open.
  struct Run {
    std::vector<std::string> batches;
    uint64_t tokenised = 0;
  };
  static Run run(const LoaderOptions& o) {
    Loader l(o);
    Run r;
    r.tokenised = l.stats().plan_tokenised;
    while (auto b = l.next()) {
      const TensorView& t = (*b)["tokens"];
      const TensorView& i = (*b)["index"];
      r.batches.emplace_back(static_cast<const char*>(t.data), t.bytes());
      r.batches.back().append(static_cast<const char*>(i.data), i.bytes());
    }
    return r;
  }
  std::vector<fs::path> kept() const {
    std::vector<fs::path> out;
    if (!fs::exists(root_.str("counts"))) return out;
    for (const auto& e : fs::directory_iterator(root_.str("counts")))
      if (e.path().extension() == ".counts") out.push_back(e.path());
    return out;
  }
  std::vector<std::string> warnings() {
    std::lock_guard<std::mutex> lock(mu_);
    return warnings_;
  }
  bool info_has(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& m : infos_)
      if (m.find(s) != std::string::npos) return true;
    return false;
  }

  TempDir root_;
  std::mutex mu_;
  std::vector<std::string> warnings_, infos_;
  LogLevel saved_level_ = LogLevel::kWarn;
};

TEST_F(TokenCounts, ASecondOpenReadsTheKeptCountsAndDeliversTheSameBatches) {
  const Run first = run(options());
  EXPECT_EQ(first.tokenised, uint64_t{kDocs});
  EXPECT_TRUE(info_has("tokenised 300 documents")) << "the open says what it did";
  EXPECT_TRUE(info_has("on 2 threads")) << "the count runs on the loader's threads";
  ASSERT_EQ(kept().size(), 1u);
  const Run second = run(options());
  EXPECT_EQ(second.tokenised, 0u) << "read from " << kept()[0];
  EXPECT_TRUE(info_has("read from " + kept()[0].string()));
  ASSERT_GT(first.batches.size(), 10u);
  EXPECT_EQ(second.batches, first.batches);
  // Nothing kept: every open tokenises, the same batches.
  LoaderOptions none = options();
  none.token_counts_dir = "";
  none.threads = 1;
  const Run third = run(none);
  EXPECT_EQ(third.tokenised, uint64_t{kDocs});
  EXPECT_EQ(third.batches, first.batches);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(TokenCounts, AnotherPatternTokenizerOrDatasetGetsCountsOfItsOwn) {
  EXPECT_EQ(run(options()).tokenised, uint64_t{kDocs});
  LoaderOptions other = options();
  other.tokenizer_options.pattern = R"(\S+|\s+)";
  const Run by_pattern = run(other);
  EXPECT_EQ(by_pattern.tokenised, uint64_t{kDocs});
  EXPECT_EQ(kept().size(), 2u);
  // The same tokenizer's bytes under another name: a name may choose a known encoding.
  fs::copy_file(root_.str("small.tiktoken"), root_.str("renamed.tiktoken"));
  other = options();
  other.tokenizer = root_.str("renamed.tiktoken");
  EXPECT_EQ(run(other).tokenised, uint64_t{kDocs});
  // The tokenizer file changed in place (a merge more).
  std::ofstream(root_.str("small.tiktoken"), std::ios::app) << testing::base64(" thethe") << " 260\n";
  EXPECT_EQ(run(options()).tokenised, uint64_t{kDocs});
  // One document of the dataset changed: a new manifest, new counts, other rows.
  fs::remove_all(root_.str("text"));
  write_text(root_.str("text"), 7);
  const Run changed = run(options());
  EXPECT_EQ(changed.tokenised, uint64_t{kDocs});
  EXPECT_EQ(kept().size(), 5u);
  EXPECT_EQ(run(options()).tokenised, 0u);
  // bos/eos are not part of the counts: the same file serves another eos.
  other = options();
  other.eos.reset();
  other.bos = 301;
  EXPECT_EQ(run(other).tokenised, 0u);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(TokenCounts, ADamagedStaleOrForeignFileIsNamedAndReplaced) {
  const Run want = run(options());
  ASSERT_EQ(kept().size(), 1u);
  const std::string file = kept()[0].string();
  const std::string good = internal::read_small_file(file, 1 << 20);
  const size_t payload = good.find("\n\n") + 2;
  auto replace_with = [&](std::string bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  };
  auto reopen_warns = [&](const std::string& why) {
    SCOPED_TRACE(why);
    const size_t before = warnings().size();
    const Run got = run(options());
    EXPECT_EQ(got.tokenised, uint64_t{kDocs}) << "tokenised again";
    EXPECT_EQ(got.batches, want.batches);
    const auto w = warnings();
    ASSERT_EQ(w.size(), before + 1);
    EXPECT_NE(w.back().find(file), std::string::npos) << w.back();
    EXPECT_NE(w.back().find(why), std::string::npos) << w.back();
    EXPECT_EQ(internal::read_small_file(file, 1 << 20), good) << "replaced by good counts";
    EXPECT_EQ(run(options()).tokenised, 0u) << "and read from then on";
  };
  // A flipped bit in a count.
  std::string bad = good;
  bad[payload + 4 * 3] ^= 0x10;
  replace_with(bad);
  reopen_warns("CRC");
  // Cut short.
  replace_with(good.substr(0, good.size() - 9));
  reopen_warns("bytes where");
  // Counts that are whole but wrong, as a tokenizer changed without a new revision
  // leaves them: the spot check tokenises a few documents again.
  bad = good;
  bad[payload] = static_cast<char>(bad[payload] + 1);
  internal::put_u32(reinterpret_cast<uint8_t*>(bad.data()) + bad.size() - 4, crc32c(bad.data(), bad.size() - 4));
  replace_with(bad);
  reopen_warns("spot check");
  // Another dataset's header under this name.
  bad = good;
  bad.replace(bad.find("records "), 8, "recorde ");
  internal::put_u32(reinterpret_cast<uint8_t*>(bad.data()) + bad.size() - 4, crc32c(bad.data(), bad.size() - 4));
  replace_with(bad);
  reopen_warns("header");
}

TEST_F(TokenCounts, LoadersOpeningAtOnceTokeniseOnce) {
  constexpr int kLoaders = 4;
  std::vector<Run> runs(kLoaders);
  std::vector<std::thread> ts;
  for (int i = 0; i < kLoaders; ++i) ts.emplace_back([&, i] { runs[static_cast<size_t>(i)] = run(options()); });
  for (auto& t : ts) t.join();
  uint64_t tokenised = 0;
  for (const Run& r : runs) {
    tokenised += r.tokenised;
    EXPECT_EQ(r.batches, runs[0].batches);
  }
  EXPECT_EQ(tokenised, uint64_t{kDocs}) << "one loader counted, the others read its file";
  EXPECT_EQ(kept().size(), 1u);
  for (const auto& e : fs::directory_iterator(root_.str("counts")))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "no temporary left: " << e.path();
}

TEST_F(TokenCounts, ADirectoryThatCannotBeUsedIsAWarningAndTheLoaderStillOpens) {
  std::ofstream(root_.str("a-file")) << "not a directory";
  LoaderOptions o = options();
  o.token_counts_dir = root_.str("a-file/counts");
  const Run got = run(o);
  EXPECT_EQ(got.tokenised, uint64_t{kDocs});
  LoaderOptions none = options();
  none.token_counts_dir = "";
  EXPECT_EQ(got.batches, run(none).batches);
  const auto w = warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find(root_.str("a-file/counts")), std::string::npos) << "the warning names the directory: " << w[0];
}

TEST_F(TokenCounts, KeptCountsAreReadWhereNoLockCanBeMade) {
  const Run want = run(options());
  ASSERT_EQ(kept().size(), 1u);
  // A lock that cannot be opened for writing, as in a directory others prepared read-only.
  const std::string lock = kept()[0].string() + ".lock";
  fs::remove(lock);
  fs::create_directory(lock);
  const Run got = run(options());
  EXPECT_EQ(got.tokenised, 0u);
  EXPECT_EQ(got.batches, want.batches);
  EXPECT_TRUE(warnings().empty());
}

TEST_F(TokenCounts, UnsetTheyGoUnderTheUsersCacheDirectory) {
  testing::ScopedEnv xdg("XDG_CACHE_HOME", root_.str("xdg"));
  LoaderOptions o = options();
  o.token_counts_dir.reset();
  EXPECT_EQ(run(o).tokenised, uint64_t{kDocs});
  EXPECT_EQ(run(o).tokenised, 0u);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(root_.str("xdg/stoker/token-counts"))) files += e.path().extension() == ".counts";
  EXPECT_EQ(files, 1u);
}

}  // namespace
}  // namespace stoker
