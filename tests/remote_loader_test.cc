// The Loader over a remote dataset (LoaderOptions::path a URL, read through the shard
// cache) against nginx on loopback: the same batches as the local dataset, epoch after
// epoch, and shards fetched once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/remote.h"
#include "util/datasets.h"
#include "util/test_servers.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::Nginx;
using testing::TempDir;
using namespace std::chrono_literals;

// `shards` shards of ~120 KiB: records of 3-5 KiB random bytes and a label.
Manifest write_dataset(const std::string& dir, int shards) {
  return testing::write_bytes_dataset(dir, {.count = shards * 30, .shard_size = 120 << 10, .seed = 1});
}

// Everything a batch holds, as bytes: each tensor's name, shape, data and offsets.
std::string digest(const Batch& b) {
  std::string d = std::to_string(b.size()) + ";";
  for (const TensorView& t : b.tensors()) {
    d += t.name + "[";
    for (int64_t x : t.shape) d += std::to_string(x) + ",";
    d += "]";
    d.append(static_cast<const char*>(t.data), t.bytes());
    if (t.offsets) d.append(reinterpret_cast<const char*>(t.offsets), (b.size() + 1) * sizeof(int64_t));
  }
  return d;
}

std::vector<std::string> epoch_digests(Loader& l, uint64_t epoch) {
  l.set_epoch(epoch);
  std::vector<std::string> out;
  while (auto b = l.next()) out.push_back(digest(*b));
  return out;
}

int shard_requests(const Nginx& n) {
  int k = 0;
  for (const auto& [path, count] : n.requests())
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ".stk") == 0) k += count;
  return k;
}

class RemoteLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = write_dataset(root_.str("ds"), 6);
    ASSERT_GE(manifest_.shards.size(), 5u);
    if (!nginx_.start(root_.str())) GTEST_SKIP() << "nginx (Debian nginx-light) could not start on 127.0.0.1";
  }
  LoaderOptions options(const std::string& path) const {
    LoaderOptions o;
    o.path = path;
    o.batch_size = 16;
    o.order.kind = OrderKind::kShuffled;
    o.order.seed = 11;
    o.threads = 2;
    return o;
  }

  TempDir root_;
  Manifest manifest_;
  Nginx nginx_;
};

// Three epochs of `lo` (local) and `ro` (the URL) give the same batches; opening and the
// first epoch fetch every one of `shards` shards, the later epochs ask the server for none.
void expect_same_batches(const LoaderOptions& lo, const LoaderOptions& ro, const Nginx& nginx, size_t shards) {
  const int before = shard_requests(nginx);
  Loader local(lo), remote(ro);
  ASSERT_EQ(remote.num_batches(), local.num_batches());
  int after_first = 0;
  for (uint64_t e = 0; e < 3; ++e) {
    const auto want = epoch_digests(local, e);
    const auto got = epoch_digests(remote, e);
    ASSERT_EQ(got.size(), want.size()) << "epoch " << e;
    ASSERT_GT(got.size(), 0u);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << "epoch " << e << " batch " << k;
    const int fetched = shard_requests(nginx) - before;
    if (e == 0) {
      // Every shard arrived, each by one or more ranged GETs (parts of 64 KiB).
      EXPECT_GE(fetched, static_cast<int>(shards)) << "epoch 0";
      after_first = fetched;
    } else {
      EXPECT_EQ(fetched, after_first) << "epoch " << e << " asked the server for shards again";
    }
  }
}

TEST_F(RemoteLoader, BatchesEqualTheLocalOnesEpochAfterEpochAndLaterEpochsFetchNoShard) {
  for (const auto& [rank, world] : {std::pair{0, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(world));
    TempDir cache;
    LoaderOptions lo = options(root_.str("ds"));
    lo.rank = rank;
    lo.world_size = world;
    LoaderOptions ro = options(nginx_.url());
    ro.rank = rank;
    ro.world_size = world;
    ro.cache_dir = cache.str();
    ro.remote.part_bytes = 64 << 10;  // several ranged GETs per shard
    expect_same_batches(lo, ro, nginx_, manifest_.shards.size());
  }
}

// Token data needs every shard's index when the loader opens: all shards arrive then.
TEST_F(RemoteLoader, TokenRowsEqualTheLocalOnesToo) {
  const uint32_t L = 16;
  testing::write_token_dataset(root_.str("tok"), 2400 * L + 1, L, 8, true, 8 << 10);  // 2400 rows
  const Manifest m = Dataset::open(root_.str("tok"))->manifest();
  ASSERT_GE(m.shards.size(), 3u);
  TempDir cache;
  LoaderOptions lo = options(root_.str("tok"));
  lo.targets = true;
  lo.rank = 0;
  lo.world_size = 1;
  LoaderOptions ro = lo;
  ro.path = nginx_.url("tok");
  ro.cache_dir = cache.str();
  expect_same_batches(lo, ro, nginx_, m.shards.size());
}

TEST_F(RemoteLoader, AShardCorruptOnEveryFetchFailsTheBatchNamingItsUrl) {
  testing::Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "100000"}));
  TempDir cache;
  LoaderOptions o = options(proxy.url());
  o.cache_dir = cache.str();
  o.remote.part_bytes = 64 << 10;
  o.remote.backoff_base = std::chrono::milliseconds(5);
  try {
    Loader l(o);
    while (l.next()) {
    }
    FAIL() << "batches came from a server that flips a byte of every answer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(proxy.port)), std::string::npos) << m;
    EXPECT_NE(m.find(".stk"), std::string::npos) << m;
    EXPECT_NE(m.find("checksum mismatch"), std::string::npos) << m;
  }
}

TEST_F(RemoteLoader, ACacheTheDatasetCannotFitOrNoCacheIsANamedError) {
  LoaderOptions o = options(nginx_.url());
  try {
    Loader l(o);
    FAIL() << "a URL without cache_dir opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cache_dir"), std::string::npos) << e.what();
  }
  TempDir cache;
  o.cache_dir = cache.str();
  o.cache_limit = manifest_.total_bytes() / 2;
  try {
    Loader l(o);
    FAIL() << "a cache_limit of half the dataset opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cache_limit"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker
