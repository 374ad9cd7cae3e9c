// Text tokenised in the loader from a URL dataset (nginx on loopback): opening
// tokenises every document once with each shard pinned in the cache in turn (or reads
// the counts kept by the first open, checking a few documents of the first shard), and the
// batches equal the local dataset's, packed into rows (seq_len) or padded under a
// token budget (max_tokens), through a cache that holds the whole dataset or a few
// shards of it.
#include <gtest/gtest.h>

#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "util/base64.h"
#include "util/test_servers.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::Nginx;
using testing::TempDir;

class RemoteText : public ::testing::Test {
 protected:
  void SetUp() override {
    // 200 documents of up to ~450 bytes over 6 shards.
    Schema schema{{Field{"__key__", FieldKind::kText}, Field{"txt", FieldKind::kText}}};
    DatasetWriterOptions wo;
    wo.shard_size = 12 << 10;
    DatasetWriter w(root_.str("text"), schema, wo);
    for (int i = 0; i < 200; ++i) {
      const std::string key = "doc/" + std::to_string(i);
      std::string text = "doc " + std::to_string(i);
      for (int k = 0; k < (i * 37) % 90; ++k) text += k % 7 ? " word" : "\n";
      const std::vector<std::span<const uint8_t>> f{{reinterpret_cast<const uint8_t*>(key.data()), key.size()},
                                                    {reinterpret_cast<const uint8_t*>(text.data()), text.size()}};
      w.add(f);
    }
    const Manifest m = w.finish();
    shards_ = m.shards.size();
    for (const ShardEntry& e : m.shards) largest_ = std::max(largest_, e.file_size);
    std::ofstream f(root_.str("bytes.tiktoken"));
    for (int b = 0; b < 256; ++b) f << testing::base64(std::string(1, static_cast<char>(b))) << ' ' << b << '\n';
    f << testing::base64("word") << " 256\n" << testing::base64(" word") << " 257\n";
    if (!nginx_.start(root_.str())) GTEST_SKIP() << "nginx (Debian nginx-light) could not start on 127.0.0.1";
  }
  LoaderOptions local() const {
    LoaderOptions o;
    o.path = root_.str("text");
    o.tokenizer = root_.str("bytes.tiktoken");
    o.tokenizer_options.pattern = R"( ?\S+|\s+)";
    o.token_counts_dir = "";  // every open tokenises (the pass over pinned shards)
    o.eos = 10;
    o.threads = 2;
    o.rank = 0;
    o.world_size = 1;
    o.targets = true;
    o.order.seed = 9;
    return o;
  }
  // Every batch's tokens, targets and index, as bytes, for epochs 0 and 1.
  static std::vector<std::string> two_epochs(const LoaderOptions& o) {
    Loader l(o);
    std::vector<std::string> out;
    for (uint64_t e = 0; e < 2; ++e) {
      l.set_epoch(e);
      while (auto b = l.next()) {
        std::string d;
        for (const char* name : {"tokens", "targets", "index"}) {
          const TensorView& t = (*b)[name];
          for (int64_t x : t.shape) d += std::to_string(x) + ",";
          d.append(static_cast<const char*>(t.data), t.bytes());
        }
        out.push_back(std::move(d));
      }
    }
    return out;
  }

  TempDir root_;
  Nginx nginx_;
  size_t shards_ = 0;
  uint64_t largest_ = 0;
};

TEST_F(RemoteText, RowsAndBudgetBatchesOfAUrlEqualTheLocalOnesInAWholeOrASmallCache) {
  ASSERT_GE(shards_, 5u);
  for (const bool budget : {false, true}) {
    LoaderOptions lo = local();
    if (budget) {
      lo.max_tokens = 1024;
    } else {
      lo.seq_len = 64;
      lo.batch_size = 4;
      lo.long_samples = LongSamples::kSplit;
    }
    const auto want = two_epochs(lo);
    ASSERT_GT(want.size(), 4u);
    // The first URL loader keeps its counts; the others read them, tokenising a few
    // documents of the first shard again to check them (pinned in a small cache).
    TempDir counts;
    // The whole dataset cached; 2.5 shards read by ranged GETs; 2.5 shards fetched whole.
    for (const auto& [limit, reads] : {std::pair{uint64_t{0}, RemoteReads::kAuto},
                                       std::pair{largest_ * 5 / 2, RemoteReads::kAuto},
                                       std::pair{largest_ * 5 / 2, RemoteReads::kShards}}) {
      SCOPED_TRACE(std::string(budget ? "max_tokens" : "seq_len") + ", cache_limit " + std::to_string(limit) +
                   (reads == RemoteReads::kShards ? ", whole shards" : ""));
      TempDir cache;
      LoaderOptions ro = lo;
      ro.path = nginx_.url("text");
      ro.cache_dir = cache.str();
      ro.cache_limit = limit;
      ro.remote_reads = reads;
      ro.token_counts_dir = counts.str();
      const auto got = two_epochs(ro);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << "batch " << k;
    }
  }
}

}  // namespace
}  // namespace stoker
