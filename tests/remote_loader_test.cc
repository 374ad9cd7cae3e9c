// The Loader over a remote dataset (LoaderOptions::path a URL, read through the shard
// cache) against nginx on loopback: the same batches as the local dataset, epoch after
// epoch, and shards fetched once.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
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

// ---- the network stage (LoaderStats::network) -----------------------------------------

// Every batch of epoch `e`; the stats at its end.
LoaderStats run_epoch(Loader& l, uint64_t e) {
  l.set_epoch(e);
  while (l.next()) {
  }
  return l.stats();
}

TEST_F(RemoteLoader, AColdEpochCountsWhatItFetchedAndAWarmOneHitsEveryShardWithNoRequest) {
  TempDir cache;
  LoaderOptions o = options(nginx_.url());
  o.cache_dir = cache.str();
  o.remote.part_bytes = 64 << 10;
  o.report_interval_s = 3600;  // only the report at the end of each epoch
  std::vector<std::string> reports;
  o.report_sink = [&](const std::string& line) { reports.push_back(line); };
  Loader l(o);
  const LoaderStats cold = run_epoch(l, 0);
  // The epoch's report (STOKER_REPORT) carries the network stage whatever its verdict.
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].find("network: fetched") != std::string::npos ||
              reports[0].find("network bound: fetched") != std::string::npos)
      << reports[0];
  const NetworkStats& n = cold.network;
  ASSERT_TRUE(n.remote);
  EXPECT_GE(n.bytes_fetched, manifest_.total_bytes());  // every shard, and the MANIFEST
  EXPECT_GE(n.requests, manifest_.shards.size());
  EXPECT_EQ(n.hits + n.misses, manifest_.shards.size()) << "each shard the epoch read counts once";
  EXPECT_GT(n.misses, 0u) << "an empty cache had shards in place";
  EXPECT_EQ(n.cache_limit, manifest_.total_bytes() + 1);  // cache_limit 0: the dataset's size
  EXPECT_GE(n.cache_bytes, manifest_.total_bytes());
  EXPECT_LE(n.cache_bytes, n.cache_limit);
  EXPECT_NE(cold.summary().find("network fetched"), std::string::npos) << cold.summary();

  // The JSON carries the stage with its rates.
  const auto j = nlohmann::json::parse(cold.to_json());
  ASSERT_TRUE(j["network"].is_object()) << j;
  for (const char* k : {"bytes_fetched", "bytes_per_s", "requests", "requests_per_s", "requests_in_flight",
                        "requests_in_flight_avg", "fetch_wait_s", "fetch_wait_frac", "hits", "misses", "hit_rate",
                        "cache_bytes", "cache_limit"})
    EXPECT_TRUE(j["network"].contains(k)) << k << " missing: " << j["network"];
  EXPECT_EQ(j["network"]["bytes_fetched"].get<uint64_t>(), n.bytes_fetched);
  EXPECT_GT(j["network"]["bytes_per_s"].get<double>(), 0);
  EXPECT_GT(j["network"]["requests_per_s"].get<double>(), 0);

  // Epoch 2 reads every shard from the cache: no request, hit rate 1.
  const int before = shard_requests(nginx_);
  const LoaderStats warm = run_epoch(l, 1);
  EXPECT_EQ(shard_requests(nginx_), before);
  EXPECT_EQ(warm.network.requests, 0u);
  EXPECT_EQ(warm.network.bytes_fetched, 0u);
  EXPECT_EQ(warm.network.hits, manifest_.shards.size());
  EXPECT_DOUBLE_EQ(warm.network.hit_rate(), 1.0);
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(warm.to_json())["network"]["hit_rate"].get<double>(), 1.0);

  // Another loader on the same cache (a second process, a restarted job): every shard in
  // place, none asked for again.
  o.report_sink = nullptr;
  o.report_interval_s = 0;
  Loader again(o);
  const LoaderStats second = run_epoch(again, 0);
  EXPECT_EQ(shard_requests(nginx_), before);
  EXPECT_EQ(second.network.hits, manifest_.shards.size());
  EXPECT_DOUBLE_EQ(second.network.hit_rate(), 1.0);

  // A local dataset has no network stage.
  Loader local(options(root_.str("ds")));
  const LoaderStats ls = run_epoch(local, 0);
  EXPECT_FALSE(ls.network.remote);
  EXPECT_TRUE(nlohmann::json::parse(ls.to_json())["network"].is_null());
  EXPECT_EQ(ls.summary().find("network"), std::string::npos) << ls.summary();
}

// Behind a server that sends 300 KB/s, the readers wait on fetches while the consumer
// waits on them: the verdict, the stats and the periodic report name the network.
TEST_F(RemoteLoader, BehindAThrottledServerTheVerdictNamesTheNetwork) {
  testing::Proxy proxy;
  if (!proxy.start(nginx_.url(""), {"--rate", "300000"})) GTEST_SKIP() << "the fault proxy could not start";
  TempDir cache;
  LoaderOptions o = options(proxy.url());
  o.cache_dir = cache.str();
  o.order.kind = OrderKind::kSequential;  // shard after shard: each arrives while the feed runs
  o.remote.part_bytes = 64 << 10;
  o.report_interval_s = 0.3;
  std::vector<std::string> lines;
  std::mutex mu;
  o.report_sink = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  Loader l(o);
  const LoaderStats s = run_epoch(l, 0);
  EXPECT_EQ(s.bottleneck, "network") << s.evidence;
  for (const char* want : {"network bound", "MB/s", "requests in flight", "cache hit rate", "readers waited on fetches"})
    EXPECT_NE(s.evidence.find(want), std::string::npos) << want << " not in: " << s.evidence;
  // What the throttle allows, at most (its bucket holds a tenth of a second).
  EXPECT_LE(s.network.bytes_per_s(s.wall_s), 300000 * 1.5) << s.network.summary(s.wall_s);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("network bound"), std::string::npos) << lines.back();
}

}  // namespace
}  // namespace stoker
