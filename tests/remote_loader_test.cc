// The Loader over a remote dataset (LoaderOptions::path a URL, read through the shard
// cache) against nginx on loopback: the same batches as the local dataset, epoch after
// epoch, and shards fetched once when the cache holds the dataset; through a cache of a
// shard or two, the same batches again, within the limit on disk, without a deadlock.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
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

// Shard GETs in nginx's access log. nginx logs a request after its answer has gone, so
// the last line may land a moment after the client has its bytes: the count is read
// until two reads 30 ms apart agree (or a second has passed).
int shard_requests(const Nginx& n) {
  auto count = [&] {
    int k = 0;
    for (const auto& [path, c] : n.requests())
      if (path.size() > 4 && path.compare(path.size() - 4, 4, ".stk") == 0) k += c;
    return k;
  };
  int last = count();
  for (int i = 0; i < 33; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const int now = count();
    if (now == last) break;
    last = now;
  }
  return last;
}

uint64_t largest_shard(const Manifest& m) {
  uint64_t b = 0;
  for (const ShardEntry& e : m.shards) b = std::max(b, e.file_size);
  return b;
}

// Token rows of 16 uint16 tokens (and the next one, their target), 8 rows a zstd record,
// in shards of ~8 KiB.
Manifest write_tokens(const std::string& dir) {
  const uint32_t L = 16;
  testing::write_token_dataset(dir, 2400 * L + 1, L, 8, true, 8 << 10);  // 2400 rows
  return Dataset::open(dir)->manifest();
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
  // The image dataset read locally (first) and by `url` through `cache`, as rank `rank`
  // of `world`.
  std::pair<LoaderOptions, LoaderOptions> rank_options(const TempDir& cache, int rank = 0, int world = 1,
                                                       const std::string& url = "") const {
    LoaderOptions lo = options(root_.str("ds"));
    lo.rank = rank;
    lo.world_size = world;
    LoaderOptions ro = lo;
    ro.path = url.empty() ? nginx_.url() : url;
    ro.cache_dir = cache.str();
    return {lo, ro};
  }
  // The token dataset under root_/tok read locally (first) and by URL through `cache`:
  // rows with their targets, one rank.
  std::pair<LoaderOptions, LoaderOptions> token_options(const TempDir& cache) const {
    LoaderOptions lo = options(root_.str("tok"));
    lo.targets = true;
    lo.rank = 0;
    lo.world_size = 1;
    LoaderOptions ro = lo;
    ro.path = nginx_.url("tok");
    ro.cache_dir = cache.str();
    return {lo, ro};
  }

  TempDir root_;
  Manifest manifest_;
  Nginx nginx_;
};

// Epoch `e` of `remote` gives the batches of `local`'s, batch for batch.
void expect_same_epoch(Loader& local, Loader& remote, uint64_t e) {
  const auto want = epoch_digests(local, e);
  const auto got = epoch_digests(remote, e);
  ASSERT_EQ(got.size(), want.size()) << "epoch " << e;
  ASSERT_GT(got.size(), 0u);
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(got[k] == want[k]) << "epoch " << e << " batch " << k;
}

// Three epochs of `lo` (local) and `ro` (the URL) give the same batches; opening and the
// first epoch fetch every one of `shards` shards, the later epochs ask the server for none.
void expect_same_batches(const LoaderOptions& lo, const LoaderOptions& ro, const Nginx& nginx, size_t shards) {
  const int before = shard_requests(nginx);
  Loader local(lo), remote(ro);
  ASSERT_EQ(remote.num_batches(), local.num_batches());
  int after_first = 0;
  for (uint64_t e = 0; e < 3; ++e) {
    expect_same_epoch(local, remote, e);
    if (::testing::Test::HasFatalFailure()) return;
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
    auto [lo, ro] = rank_options(cache, rank, world);
    ro.remote.part_bytes = 64 << 10;  // several ranged GETs per shard
    expect_same_batches(lo, ro, nginx_, manifest_.shards.size());
  }
}

// Opening a remote dataset fetches its MANIFEST once, whatever the cache's size (0: the
// dataset's, known only from the MANIFEST): the cached shard adapter hands the copy it
// fetched to the shard cache, and the dataset is opened on the cache's local copy.
TEST_F(RemoteLoader, ManifestIsFetchedOnceBeforeTheFirstBatch) {
  const auto manifest_gets = [](const std::map<std::string, int>& requests) {
    const auto it = requests.find("/ds/MANIFEST");
    return it == requests.end() ? 0 : it->second;
  };
  for (const uint64_t limit : {uint64_t{0}, 2 * largest_shard(manifest_)}) {
    SCOPED_TRACE("cache_limit " + std::to_string(limit));
    TempDir cache;
    LoaderOptions ro = rank_options(cache).second;
    ro.cache_limit = limit;
    const int before = manifest_gets(nginx_.requests());
    Loader remote(ro);
    ASSERT_TRUE(remote.next().has_value());
    EXPECT_EQ(manifest_gets(nginx_.requests()) - before, 1);
  }
}

// Token data needs every shard's index when the loader opens: all shards arrive then.
TEST_F(RemoteLoader, TokenRowsEqualTheLocalOnesToo) {
  const Manifest m = write_tokens(root_.str("tok"));
  ASSERT_GE(m.shards.size(), 3u);
  TempDir cache;
  const auto [lo, ro] = token_options(cache);
  expect_same_batches(lo, ro, nginx_, m.shards.size());
}

TEST_F(RemoteLoader, AShardCorruptOnEveryFetchFailsTheBatchNamingItsUrl) {
  testing::Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "100000"}));
  for (RemoteReads reads : {RemoteReads::kShards, RemoteReads::kRecords}) {
  SCOPED_TRACE(remote_reads_name(reads));
  TempDir cache;
  LoaderOptions o = options(proxy.url());
  o.cache_dir = cache.str();
  o.remote.part_bytes = 64 << 10;
  o.remote.backoff_base = std::chrono::milliseconds(5);
  o.remote_reads = reads;
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
}

// The retry budget is the Loader's too: batches of 16 records from a server that answers
// every shard read with 503 fail within the remote timeout, however the records come
// (each shard's parts, or each record by its own ranged GET, with their own retries).
TEST_F(RemoteLoader, APersistentFaultFailsTheBatchWithinTheRemoteTimeout) {
  testing::Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--always", "503"}));
  for (RemoteReads reads : {RemoteReads::kShards, RemoteReads::kRecords}) {
    SCOPED_TRACE(remote_reads_name(reads));
    TempDir cache;
    LoaderOptions o = options(proxy.url());
    o.cache_dir = cache.str();
    o.remote_reads = reads;
    o.remote.max_attempts = 100;  // the budget, not the attempt count, ends it
    o.remote.backoff_base = std::chrono::milliseconds(100);
    o.remote.backoff_max = std::chrono::milliseconds(400);
    o.remote.timeout = std::chrono::seconds(2);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      Loader l(o);
      while (l.next()) {
      }
      FAIL() << "batches came from a server that refuses every shard read";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kIoError) << m;
      EXPECT_NE(m.find("127.0.0.1:" + std::to_string(proxy.port)), std::string::npos) << m;
      EXPECT_NE(m.find("HTTP 503"), std::string::npos) << m;
      EXPECT_NE(m.find("remote timeout 2 s"), std::string::npos) << m;
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, std::chrono::milliseconds(1900));
    EXPECT_LT(took, std::chrono::seconds(6));  // the budget and one backoff, not 16 records' retries end to end
  }
}

TEST_F(RemoteLoader, NoCacheDirOrACacheBelowTheLargestShardIsANamedErrorAtOpen) {
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
  const uint64_t largest = largest_shard(manifest_);
  o.cache_limit = largest - 1;
  try {
    Loader l(o);
    FAIL() << "a cache_limit below the largest shard opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("cache_limit " + std::to_string(largest - 1)), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(largest) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find(".stk"), std::string::npos) << m;  // which shard
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
  // Not misses > 0: a prefetch that lands before the reader asks counts as a hit, and on a
  // loaded machine every shard of a cold epoch can; the fetches above say it was cold.
  EXPECT_EQ(n.cache_limit, manifest_.total_bytes());  // cache_limit 0: the dataset's size
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

// Samples the cache directory while a loader runs: the bytes of shard files (whole or
// being downloaded) never exceed the limit, and no evicted shard stays open (an
// unlinked file keeps its blocks on disk while a descriptor is open). A sample is taken
// under the cache's space lock (no eviction or reservation meanwhile), and a shard seen
// both as `.part` and renamed into place counts once: a directory listing is no snapshot.
class CacheWatch {
 public:
  explicit CacheWatch(std::string dir) : dir_(std::move(dir)), t_([this] { run(); }) {}
  ~CacheWatch() { stop(); }
  void stop() {
    stop_ = true;
    if (t_.joinable()) t_.join();
  }
  uint64_t samples = 0, max_bytes = 0, deleted_open = 0;
  std::string worst;

 private:
  void sample(const std::filesystem::path& key_dir) {
    namespace fs = std::filesystem;
    const std::string lock_path = (key_dir / ".space.lock").string();
    const int lock = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
    if (lock < 0) return;
    while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
    }
    std::map<std::string, uint64_t> shards;  // shard name -> bytes
    std::error_code ec;
    for (const auto& de : fs::directory_iterator(key_dir, ec)) {
      std::string name = de.path().filename().string();
      std::error_code e2;
      if (name.find(".stk") == std::string::npos || !de.is_regular_file(e2)) continue;
      const uint64_t size = de.file_size(e2);  // the file may have gone since it was listed
      if (e2) continue;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".part") == 0) name.resize(name.size() - 5);
      shards[name] = std::max(shards[name], size);
    }
    ::close(lock);
    uint64_t bytes = 0;
    for (const auto& [name, size] : shards) bytes += size;
    max_bytes = std::max(max_bytes, bytes);
    ++samples;
  }
  void run() {
    namespace fs = std::filesystem;
    while (!stop_) {
      std::error_code ec;
      for (const auto& de : fs::directory_iterator(dir_, ec))
        if (de.is_directory(ec)) sample(de.path());
      for (const auto& fd : fs::directory_iterator("/proc/self/fd", ec)) {
        std::error_code e2;
        const std::string target = fs::read_symlink(fd.path(), e2).string();
        if (!e2 && target.rfind(dir_, 0) == 0 && target.find(" (deleted)") != std::string::npos) {
          ++deleted_open;
          worst = target;
        }
      }
      std::this_thread::sleep_for(1ms);
    }
  }
  std::string dir_;
  std::atomic<bool> stop_{false};
  std::thread t_;
};

// Two epochs of `lo` and `ro` give the same batches while `ro`'s cache (a limit well
// below the dataset) is watched.
void expect_same_batches_in_a_small_cache(const LoaderOptions& lo, const LoaderOptions& ro) {
  CacheWatch watch(ro.cache_dir);
  {
    Loader local(lo), remote(ro);
    ASSERT_EQ(remote.num_batches(), local.num_batches());
    for (uint64_t e = 0; e < 2; ++e) expect_same_epoch(local, remote, e);
  }
  watch.stop();
  EXPECT_GT(watch.samples, 0u);
  EXPECT_LE(watch.max_bytes, ro.cache_limit) << "the cache held more shard bytes than its limit";
  EXPECT_GT(watch.max_bytes, 0u);
  EXPECT_EQ(watch.deleted_open, 0u) << "an evicted shard was still open: " << watch.worst;
}

TEST_F(RemoteLoader, ACacheOfTwoAndAHalfShardsGivesTheLocalBatchesForShardLocalAndGlobalOrders) {
  const uint64_t limit = largest_shard(manifest_) * 5 / 2;
  ASSERT_LT(limit, manifest_.total_bytes() / 2);
  struct Kind {
    const char* name;
    OrderOptions order;
  };
  std::vector<Kind> kinds;
  OrderOptions seq;
  seq.kind = OrderKind::kSequential;
  kinds.push_back({"sequential", seq});
  OrderOptions chunks;
  chunks.kind = OrderKind::kChunkLocal;
  chunks.chunk_size = 10;
  chunks.window_chunks = 3;
  chunks.seed = 5;
  kinds.push_back({"chunk_local", chunks});
  OrderOptions shuffled;
  shuffled.kind = OrderKind::kShuffled;
  shuffled.seed = 7;
  kinds.push_back({"shuffled", shuffled});  // whole shards, forced (auto reads records)
  for (const Kind& k : kinds) {
    SCOPED_TRACE(k.name);
    TempDir cache;
    LoaderOptions lo = options(root_.str("ds"));
    lo.order = k.order;
    lo.rank = 0;
    lo.world_size = 1;
    LoaderOptions ro = lo;
    ro.path = nginx_.url();
    ro.cache_dir = cache.str();
    ro.cache_limit = limit;
    ro.cache_prefetch = 4;  // more than the limit leaves room for: the window shrinks
    ro.remote.part_bytes = 64 << 10;
    ro.remote_reads = RemoteReads::kShards;
    expect_same_batches_in_a_small_cache(lo, ro);
  }
}

// The small-cache global shuffle: auto reads each record by a ranged GET, the
// same batches as the local dataset for every rank, each record fetched once an epoch
// (no shard downloaded whole, nothing but the MANIFEST in the cache), the shards'
// indexes fetched once for the loader's life.
TEST_F(RemoteLoader, AGlobalShuffleThroughACacheTooSmallReadsEachRecordOnceAnEpochByARangedGet) {
  const uint64_t limit = largest_shard(manifest_) * 5 / 2;
  const int shards = static_cast<int>(manifest_.shards.size());
  for (const auto& [rank, world] : {std::pair{0, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(world));
    TempDir cache;
    auto [lo, ro] = rank_options(cache, rank, world);
    ro.cache_limit = limit;
    Loader local(lo), remote(ro);
    ASSERT_EQ(remote.num_batches(), local.num_batches());
    uint64_t samples = 0;
    for (uint64_t e = 0; e < 2; ++e) {
      const int before = shard_requests(nginx_);
      expect_same_epoch(local, remote, e);
      if (HasFatalFailure()) return;
      const LoaderStats st = remote.stats();
      EXPECT_TRUE(st.network.record_reads) << "epoch " << e;
      EXPECT_EQ(st.network.hits + st.network.misses, 0u);
      samples = st.samples;
      const int asked = shard_requests(nginx_) - before;
      // A GET per record read (two records next to each other in a shard and in a batch
      // may share one), plus, in the first epoch, three small ones per shard's index and
      // the one that asks whether the server honours Range.
      const int indexes = e == 0 ? 3 * shards + 1 : 0;
      EXPECT_LE(asked, static_cast<int>(samples) + indexes) << "epoch " << e;
      EXPECT_GE(asked, static_cast<int>(samples) / 2) << "epoch " << e;
      // Record bytes and little more: nothing was downloaded whole.
      EXPECT_LE(st.network.bytes_fetched, st.record_bytes + (e == 0 ? 64u * 1024 * shards : 0)) << "epoch " << e;
    }
    EXPECT_GT(samples, 0u);
    for (const auto& de : std::filesystem::recursive_directory_iterator(cache.str()))
      EXPECT_EQ(de.path().string().find(".stk"), std::string::npos) << de.path() << " was cached";
  }
}

// Records by ranged GET behind a proxy that corrupts the first answer to every request
// (each index part and each record): every record is fetched again once and the
// batches are the local ones, byte for byte.
TEST_F(RemoteLoader, ARecordCorruptOnItsFirstFetchIsFetchedAgainAndTheBatchesAreRight) {
  testing::Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "1"}));
  TempDir cache;
  auto [lo, ro] = rank_options(cache, 0, 1, proxy.url());
  ro.remote_reads = RemoteReads::kRecords;
  Loader local(lo), remote(ro);
  expect_same_epoch(local, remote, 0);
  const LoaderStats st = remote.stats();
  EXPECT_EQ(st.skipped, 0u);
  // Each record twice (its first copy corrupt), and a little more for the indexes.
  EXPECT_GE(st.network.bytes_fetched, 2 * st.record_bytes);
}

// A mixture of two remote datasets: its network stage is both sources' fetches.
TEST_F(RemoteLoader, AMixtureOfTwoUrlsCountsTheFetchesOfBoth) {
  const Manifest second = write_dataset(root_.str("ds2"), 3);
  TempDir cache;
  LoaderOptions o = options(nginx_.url());
  o.sources = {nginx_.url(), nginx_.url("ds2")};
  o.weights = {1, 1};
  o.samples_per_epoch = 64;  // a few of each source's records: neither starts over
  o.cache_dir = cache.str();
  o.remote.part_bytes = 1 << 20;  // a GET per shard
  o.rank = 0;
  o.world_size = 1;
  const auto before = nginx_.requests();
  Loader l(o);
  l.set_epoch(0);
  while (l.next()) {
  }
  const NetworkStats n = l.stats().network;
  ASSERT_TRUE(n.remote);
  // The shards the server sent, of both datasets.
  uint64_t sent[2] = {0, 0};
  for (const auto& [ds, m] : {std::pair<int, const Manifest*>{0, &manifest_}, {1, &second}})
    for (const ShardEntry& e : m->shards) {
      const std::string path = std::string(ds ? "/ds2/" : "/ds/") + e.name;
      const auto it = before.find(path);
      const auto now = nginx_.requests();
      const auto at = now.find(path);
      if (at != now.end() && (it == before.end() || at->second > it->second)) sent[ds] += e.file_size;
    }
  ASSERT_GT(sent[0], 0u);
  ASSERT_GT(sent[1], 0u);
  EXPECT_GE(n.bytes_fetched, sent[0] + sent[1]);
  EXPECT_EQ(n.cache_limit, manifest_.total_bytes() + second.total_bytes());
}

TEST_F(RemoteLoader, RemoteReadsSaysWhichWayRecordsComeAndRecordsOfTokenDataIsANamedError) {
  auto reads = [&](RemoteReads r, OrderKind kind, uint64_t limit) {
    TempDir cache;
    LoaderOptions ro = options(nginx_.url());
    ro.cache_dir = cache.str();
    ro.cache_limit = limit;
    ro.order.kind = kind;
    ro.remote_reads = r;
    Loader l(ro);
    EXPECT_TRUE(l.next().has_value());
    return l.stats().network.record_reads;
  };
  const uint64_t small = largest_shard(manifest_) * 2;
  EXPECT_TRUE(reads(RemoteReads::kAuto, OrderKind::kShuffled, small));
  EXPECT_FALSE(reads(RemoteReads::kAuto, OrderKind::kShuffled, 0));  // the dataset fits
  EXPECT_FALSE(reads(RemoteReads::kAuto, OrderKind::kChunkLocal, small));
  EXPECT_FALSE(reads(RemoteReads::kShards, OrderKind::kShuffled, small));
  EXPECT_TRUE(reads(RemoteReads::kRecords, OrderKind::kSequential, 0));
  write_tokens(root_.str("tok"));
  TempDir cache;
  auto [lo, ro] = token_options(cache);
  ro.remote_reads = RemoteReads::kRecords;
  try {
    Loader l(ro);
    FAIL() << "remote_reads records opened token data";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("remote_reads"), std::string::npos) << e.what();
  }
  EXPECT_EQ(remote_reads_from_name("records"), RemoteReads::kRecords);
  EXPECT_STREQ(remote_reads_name(RemoteReads::kShards), "shards");
  EXPECT_THROW(remote_reads_from_name("ranged"), Error);
}

// What the README promises for a small cache: chunk_local with whole-shard chunks and a
// room of W shards and one more fetches each shard about once per epoch, like a
// sequential read; a global shuffle through the same cache fetches far more.
TEST_F(RemoteLoader, WholeShardChunksThroughASmallCacheFetchEachShardOncePerEpoch) {
  const uint64_t limit = largest_shard(manifest_) * 3 + largest_shard(manifest_) / 2;
  auto fetched_in_epoch_1 = [&](OrderOptions order) {
    TempDir cache;
    LoaderOptions ro = options(nginx_.url());
    ro.order = order;
    ro.rank = 0;
    ro.world_size = 1;
    ro.cache_dir = cache.str();
    ro.cache_limit = limit;
    ro.remote.part_bytes = 1 << 20;  // one GET per shard
    ro.remote_reads = RemoteReads::kShards;  // whole shards, as the comparison is about
    Loader l(ro);
    epoch_digests(l, 0);
    const int before = shard_requests(nginx_);
    epoch_digests(l, 1);
    return shard_requests(nginx_) - before;
  };
  OrderOptions chunks;
  chunks.kind = OrderKind::kChunkLocal;
  chunks.chunk_size = 1000;  // more than a shard's records: a chunk is a whole shard
  chunks.window_chunks = 2;
  chunks.seed = 3;
  const int shards = static_cast<int>(manifest_.shards.size());
  // About once each (shards epoch 0 left in the cache may not be fetched at all; a shard
  // the prefetch brought in for a later window can be evicted before its turn when the
  // readers run slowly, as under a sanitizer, and is then fetched again).
  const int chunk_fetches = fetched_in_epoch_1(chunks);
  EXPECT_LE(chunk_fetches, 2 * shards);
  EXPECT_GE(chunk_fetches, shards - 3);
  OrderOptions shuffled;
  shuffled.kind = OrderKind::kShuffled;
  shuffled.seed = 3;
  EXPECT_GT(fetched_in_epoch_1(shuffled), 3 * shards);
}

TEST_F(RemoteLoader, TokenRowsThroughACacheOfTwoAndAHalfShardsEqualTheLocalOnes) {
  const Manifest m = write_tokens(root_.str("tok"));
  ASSERT_GE(m.shards.size(), 6u);
  for (OrderKind kind : {OrderKind::kSequential, OrderKind::kShuffled}) {
    SCOPED_TRACE(order_kind_name(kind));
    TempDir cache;
    auto [lo, ro] = token_options(cache);
    lo.order.kind = ro.order.kind = kind;
    lo.order.window_chunks = ro.order.window_chunks = 8;
    ro.cache_limit = largest_shard(m) * 5 / 2;
    expect_same_batches_in_a_small_cache(lo, ro);
  }
}

// One decoder and room for a single shard, with a global shuffle whose every batch
// draws from most shards: the loader must let its own reads finish before it can hold
// the next shard, never wait for room it holds itself.
TEST_F(RemoteLoader, OneThreadAndRoomForOneShardFinishesWithTheLocalBatches) {
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 1200 && !done; ++i) std::this_thread::sleep_for(100ms);
    if (!done) {
      std::fprintf(stderr, "the loader made no progress in 120 s: deadlocked\n");
      std::abort();
    }
  });
  const Manifest tok = write_tokens(root_.str("tok"));
  {
    SCOPED_TRACE("images");
    TempDir cache;
    LoaderOptions lo = options(root_.str("ds"));
    lo.threads = 1;
    lo.slots = 2;
    lo.rank = 0;
    lo.world_size = 1;
    LoaderOptions ro = lo;
    ro.path = nginx_.url();
    ro.cache_dir = cache.str();
    ro.cache_limit = largest_shard(manifest_);
    ro.remote.part_bytes = 64 << 10;
    ro.remote_reads = RemoteReads::kShards;  // whole shards: records hold none
    expect_same_batches_in_a_small_cache(lo, ro);
  }
  {
    SCOPED_TRACE("tokens");
    TempDir cache;
    auto [lo, ro] = token_options(cache);
    lo.threads = ro.threads = 1;
    ro.cache_limit = largest_shard(tok);
    expect_same_batches_in_a_small_cache(lo, ro);
  }
  done = true;
  watchdog.join();
}

}  // namespace
}  // namespace stoker
