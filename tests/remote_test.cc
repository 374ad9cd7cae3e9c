// Remote datasets against real servers on loopback: nginx (a dataset directory over
// HTTP), s3rver (the S3 protocol: SigV4 headers, access key checked) and tests/util/fault_proxy.py in front of
// them (503, 429, resets, cut and stalled bodies, flipped bytes). Each test starts its
// servers on 127.0.0.1 at a free port and stops them; one that cannot start skips.
#include "stoker/remote.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "remote/remote_internal.h"
#include "stoker/diagnose.h"
#include "diagnose/doctor_checks.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/verify.h"
#include "util/datasets.h"
#include "util/test_servers.h"
#include "util/test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using namespace std::chrono_literals;

// ---- servers: tests/util/test_servers.h ---------------------------------------

using testing::Child;
using testing::free_port;
using testing::Nginx;
using testing::Proxy;
using testing::wait_port;

// ---- data --------------------------------------------------------------------------

// `shards` shards of about `shard_kib` KiB each, records of ~6 KiB random bytes.
Manifest write_dataset(const std::string& dir, int shards, int shard_kib = 200) {
  return testing::write_bytes_dataset(dir, {.count = shards * (shard_kib / 6),
                                            .shard_size = static_cast<uint64_t>(shard_kib) << 10,
                                            .size = [](int i) { return static_cast<size_t>(5000 + (i * 37) % 2000); }});
}

RemoteOptions fast_options() {
  RemoteOptions o;
  o.part_bytes = 64 << 10;  // several ranged GETs per shard
  o.backoff_base = 5ms;
  o.backoff_max = 50ms;
  o.connect_timeout = 2000ms;
  o.stall_timeout = 2000ms;
  return o;
}

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const std::string name = e.path().filename().string();
    if (name == kManifestName || name[0] == '.') continue;
    const uint64_t size = e.file_size(ec);
    if (!ec) n += size;  // a file evicted between listing and stat counts nothing
  }
  return n;
}

class RemoteHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = write_dataset(root_.str("ds"), 6);
    if (!nginx_.start(root_.str())) GTEST_SKIP() << "nginx (Debian nginx-light) could not start on 127.0.0.1";
  }
  std::string local(size_t s) const { return root_.str("ds") + "/" + manifest_.shards[s].name; }

  TempDir root_, cache_;
  Manifest manifest_;
  Nginx nginx_;
};

TEST_F(RemoteHttp, ShardsArriveByteForByteAndTheWarmCacheSendsNoRequest) {
  auto store = RemoteStore::open(nginx_.url(), fast_options());
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 0;
  auto cache = ShardCache::open(store, co);
  ASSERT_EQ(cache->manifest().shards, manifest_.shards);
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    auto pin = cache->acquire(s);
    EXPECT_EQ(testing::read_file(pin.path()), testing::read_file(local(s))) << s;
  }
  const CacheStats cold = cache->stats();
  EXPECT_EQ(cold.misses, manifest_.shards.size());
  EXPECT_EQ(cold.remote.bytes_fetched, manifest_.total_bytes() + manifest_.serialize().size());
  // The cached directory is a dataset the local path reads, record for record.
  auto remote_ds = Dataset::open(cache->local_dir());
  auto local_ds = Dataset::open(root_.str("ds"));
  ASSERT_EQ(remote_ds->record_count(), local_ds->record_count());
  for (uint64_t g = 0; g < local_ds->record_count(); g += 7) EXPECT_EQ(remote_ds->read(g).buffer, local_ds->read(g).buffer);
  // Epoch 2: every shard again, no request.
  for (size_t s = 0; s < manifest_.shards.size(); ++s) cache->acquire(s);
  const CacheStats warm = cache->stats();
  EXPECT_EQ(warm.remote.requests, cold.remote.requests);
  EXPECT_EQ(warm.hits, manifest_.shards.size());
  // A second process-life (new cache object on the same directory) finds them too.
  auto again = ShardCache::open(RemoteStore::open(nginx_.url(), fast_options()), co);
  for (size_t s = 0; s < manifest_.shards.size(); ++s) again->acquire(s);
  EXPECT_EQ(again->stats().remote.requests, 1u);  // the manifest only
  EXPECT_DOUBLE_EQ(again->stats().hit_rate(), 1.0);
}

TEST_F(RemoteHttp, PrefetchFetchesAheadInEpochOrder) {
  auto store = RemoteStore::open(nginx_.url(), fast_options());
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 3;
  auto cache = ShardCache::open(store, co);
  std::vector<size_t> order = {4, 1, 5, 0, 3, 2};
  cache->prefetch(order);
  // The first three arrive without being asked for.
  for (int i = 0; i < 500 && cache->stats().downloads < 3; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(cache->stats().downloads, 3u);
  for (size_t s : order) {
    auto pin = cache->acquire(s);
    ASSERT_EQ(testing::read_file(pin.path()), testing::read_file(local(s)));
    std::this_thread::sleep_for(20ms);  // a consumer's pace: the window moves ahead
  }
  const CacheStats st = cache->stats();
  EXPECT_EQ(st.downloads, order.size());
  EXPECT_GE(st.hits, 4u) << "prefetched shards should be in place when acquired";
}

TEST_F(RemoteHttp, TheCacheNeverExceedsItsLimit) {
  const uint64_t shard = manifest_.shards[0].file_size;
  auto store = RemoteStore::open(nginx_.url(), fast_options());
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = shard * 5 / 2 + 4096;  // two shards and a half
  co.prefetch = 4;
  auto cache = ShardCache::open(store, co);
  EXPECT_EQ(cache->stats().prefetch_window, 1u) << "the window shrinks to what the limit leaves";
  std::atomic<bool> done{false};
  std::atomic<uint64_t> peak{0};
  std::thread sampler([&] {
    while (!done) {
      peak = std::max<uint64_t>(peak, dir_bytes(cache->local_dir()));
      std::this_thread::sleep_for(200us);
    }
  });
  std::vector<size_t> order;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (size_t s = 0; s < manifest_.shards.size(); ++s) order.push_back((s * 5 + epoch) % manifest_.shards.size());
  cache->prefetch(order);
  for (size_t s : order) {
    auto pin = cache->acquire(s);
    ASSERT_EQ(testing::read_file(pin.path()), testing::read_file(local(s)));
  }
  done = true;
  sampler.join();
  EXPECT_LE(peak.load(), co.limit);
  EXPECT_GT(peak.load(), shard);
  EXPECT_GT(cache->stats().evictions, 0u);
}

TEST_F(RemoteHttp, ALimitBelowOneShardIsAnErrorAtOpen) {
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = manifest_.shards[0].file_size - 1;
  try {
    ShardCache::open(RemoteStore::open(nginx_.url(), fast_options()), co);
    FAIL() << "expected kInvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("smaller than the largest shard"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteHttp, PinnedShardsAreNotEvictedAndAFullCacheSaysSo) {
  const uint64_t shard = manifest_.shards[0].file_size;
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = shard * 2 + 100;
  co.prefetch = 0;
  co.wait_for_room = 300ms;
  auto cache = ShardCache::open(RemoteStore::open(nginx_.url(), fast_options()), co);
  auto a = cache->acquire(0);
  auto b = cache->acquire(1);
  try {
    cache->acquire(2);
    FAIL() << "two pinned shards fill the cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("cache_limit"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(a.path()));
  EXPECT_TRUE(fs::exists(b.path()));
  a.reset();
  auto c = cache->acquire(2);  // shard 0 goes now
  EXPECT_FALSE(fs::exists(root_.str() + "/none"));
  EXPECT_TRUE(fs::exists(b.path()));
  EXPECT_EQ(testing::read_file(c.path()), testing::read_file(local(2)));
  EXPECT_EQ(cache->stats().evictions, 1u);
}

TEST_F(RemoteHttp, TwoProcessesSharingACacheFetchEachShardOnce) {
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 2;
  std::vector<pid_t> kids;
  for (int k = 0; k < 2; ++k) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 0;
      try {
        auto cache = ShardCache::open(RemoteStore::open(nginx_.url(), fast_options()), co);
        std::vector<size_t> order;
        for (size_t s = 0; s < manifest_.shards.size(); ++s) order.push_back(k ? manifest_.shards.size() - 1 - s : s);
        cache->prefetch(order);
        for (size_t s : order) {
          auto pin = cache->acquire(s);
          if (testing::read_file(pin.path()) != testing::read_file(local(s))) rc = 2;
        }
      } catch (...) {
        rc = 3;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t p : kids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child exit " << status;
  }
  auto reqs = nginx_.requests();
  for (const ShardEntry& e : manifest_.shards) {
    const int parts = static_cast<int>((e.file_size + (64 << 10) - 1) / (64 << 10));
    EXPECT_EQ(reqs["/ds/" + e.name], parts) << e.name << " fetched more than once";
  }
}

TEST_F(RemoteHttp, ADownloadKilledMidwayLeavesNothingThatIsRead) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--rate", "200000"})) << "fault proxy did not start";
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 0;
  pid_t pid = ::fork();
  if (pid == 0) {
    try {
      auto cache = ShardCache::open(RemoteStore::open(proxy.url(), fast_options()), co);
      cache->acquire(3);
    } catch (...) {
    }
    ::_exit(0);
  }
  // Wait for the download to be under way, then kill it.
  std::string dir;
  for (int i = 0; i < 500 && dir.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    for (const auto& e : fs::directory_iterator(cache_.str()))
      if (fs::exists(e.path() / (manifest_.shards[3].name + ".part"))) dir = e.path().string();
  }
  ASSERT_FALSE(dir.empty()) << "no download started";
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(fs::exists(dir + "/" + manifest_.shards[3].name)) << "a half-written shard under its name";
  // The next run: the left-over part is removed, the shard fetched whole.
  auto cache = ShardCache::open(RemoteStore::open(proxy.url(), fast_options()), co);
  EXPECT_FALSE(fs::exists(dir + "/" + manifest_.shards[3].name + ".part"));
  auto pin = cache->acquire(3);
  EXPECT_EQ(testing::read_file(pin.path()), testing::read_file(local(3)));
  EXPECT_TRUE(verify_path(local(3)).ok());
}

TEST_F(RemoteHttp, TransientFaultsAreRetriedAndNoWrongByteGetsThrough) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--fail-first", "3", "--kinds", "503,reset,cut,429", "--corrupt-first", "0"}));
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 2;
  auto cache = ShardCache::open(RemoteStore::open(proxy.url(), fast_options()), co);
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    auto pin = cache->acquire(s);
    ASSERT_EQ(testing::read_file(pin.path()), testing::read_file(local(s))) << s;
  }
  // At least one per shard (curl itself re-sends some requests whose reused connection
  // the proxy reset, so not every injected fault reaches our retry loop).
  EXPECT_GE(cache->stats().remote.retries, manifest_.shards.size());
}

TEST_F(RemoteHttp, AStalledBodyTimesOutAndIsRetried) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--fail-first", "1", "--kinds", "stall", "--stall-s", "4"}));
  RemoteOptions o = fast_options();
  o.stall_timeout = 1000ms;
  o.low_speed_bytes = 1000;
  auto store = RemoteStore::open(proxy.url(), o);
  std::vector<uint8_t> got(manifest_.shards[1].file_size);
  store->read(manifest_.shards[1].name, 0, got, "shard " + manifest_.shards[1].name);
  EXPECT_EQ(got, testing::read_file(local(1)));
  EXPECT_GE(store->stats().retries, 1u);
}

TEST_F(RemoteHttp, SlowAndRateLimitedBodiesArriveWhole) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--slow", "--rate", "2000000"}));
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 1;
  auto cache = ShardCache::open(RemoteStore::open(proxy.url(), fast_options()), co);
  for (size_t s : {0, 5}) {
    auto pin = cache->acquire(s);
    EXPECT_EQ(testing::read_file(pin.path()), testing::read_file(local(s))) << s;
  }
  EXPECT_EQ(cache->stats().remote.retries, 0u) << "a slow body is not a fault";
}

TEST_F(RemoteHttp, ACorruptShardIsFetchedAgainOnceThenReported) {
  {
    Proxy proxy;
    ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "1"}));
    CacheOptions co;
    co.dir = cache_.str();
    co.limit = 1ull << 30;
    co.prefetch = 0;
    auto cache = ShardCache::open(RemoteStore::open(proxy.url(), fast_options()), co);
    auto pin = cache->acquire(0);
    EXPECT_EQ(testing::read_file(pin.path()), testing::read_file(local(0)));
    EXPECT_EQ(cache->stats().refetches, 1u);
  }
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "100"}));
  CacheOptions co;
  co.dir = cache_.str() + "/other";
  co.limit = 1ull << 30;
  co.prefetch = 0;
  auto cache = ShardCache::open(RemoteStore::open(proxy.url(), fast_options()), co);
  try {
    cache->acquire(1);
    FAIL() << "a shard corrupt on every fetch must be reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    const std::string m = e.what();
    EXPECT_NE(m.find(manifest_.shards[1].name), std::string::npos) << m;
    EXPECT_NE(m.find("127.0.0.1:" + std::to_string(proxy.port)), std::string::npos) << m;
    EXPECT_NE(m.find("checksum"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(cache->local_dir() + "/" + manifest_.shards[1].name));
  EXPECT_EQ(cache->stats().refetches, 1u);
}

TEST_F(RemoteHttp, PersistentFaultsAreNamedWithURLShardAndStatus) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--always", "503"}));
  RemoteOptions o = fast_options();
  o.max_attempts = 3;
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 0;
  auto cache = ShardCache::open(RemoteStore::open(proxy.url(), o), co);
  try {
    cache->acquire(2);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kIoError);
    EXPECT_NE(m.find(proxy.url() + "/" + manifest_.shards[2].name), std::string::npos) << m;
    EXPECT_NE(m.find("shard " + manifest_.shards[2].name), std::string::npos) << m;
    EXPECT_NE(m.find("HTTP 503"), std::string::npos) << m;
    EXPECT_NE(m.find("after 3 attempts"), std::string::npos) << m;
  }
  try {
    RemoteStore::open(nginx_.url(), o)->get("no-such-object");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("HTTP 404"), std::string::npos) << e.what();
  }
}

// A persistent fault is given up on within RemoteOptions::timeout, however many requests
// wait behind each other (a batch's records, each with its own retries).
TEST_F(RemoteHttp, APersistentFaultFailsWithinTheTimeoutWhateverTheRequests) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--always", "503"}));
  RemoteOptions o = fast_options();
  o.max_attempts = 100;  // the budget, not the attempt count, ends it
  o.backoff_base = 100ms;
  o.backoff_max = 400ms;
  o.connections = 2;  // 16 reads queue behind each other
  o.timeout = 2s;
  auto store = RemoteStore::open(proxy.url(), o);
  std::vector<std::vector<uint8_t>> bufs(16, std::vector<uint8_t>(4096));
  std::vector<RemoteStore::Range> ranges;
  for (size_t i = 0; i < bufs.size(); ++i)
    ranges.push_back({manifest_.shards[i % manifest_.shards.size()].name, 4096 * i, bufs[i], "record", {}});
  const auto t0 = std::chrono::steady_clock::now();
  try {
    store->read_many(ranges);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kIoError);
    EXPECT_NE(m.find(proxy.url() + "/"), std::string::npos) << m;
    EXPECT_NE(m.find("HTTP 503"), std::string::npos) << m;
    EXPECT_NE(m.find("remote timeout 2 s"), std::string::npos) << m;
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 1900ms);
  EXPECT_LT(took, 4s);
  // A second call in the same failing spell fails at its first failure.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_THROW(store->read_many(ranges), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 1s);
}

TEST_F(RemoteHttp, AServerThatIgnoresRangeIsDetectedAndShardsComeByOneGetEach) {
  testing::PlainHttpServer plain;
  if (!plain.start(root_.str())) GTEST_SKIP() << "python3 -m http.server could not start";
  auto nginx_store = RemoteStore::open(nginx_.url(), fast_options());
  EXPECT_TRUE(nginx_store->serves_ranges(manifest_.shards[0].name));
  EXPECT_FALSE(nginx_store->stats().range_ignored);

  auto store = RemoteStore::open(plain.url(), fast_options());  // 64 KiB parts: several per shard
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 0;
  co.fsync = false;
  auto cache = ShardCache::open(store, co);
  uint64_t total = 0;
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    auto pin = cache->acquire(s);
    EXPECT_EQ(testing::read_file(pin.path()), testing::read_file(local(s))) << s;
    total += manifest_.shards[s].file_size;
  }
  const RemoteStats st = cache->stats().remote;
  EXPECT_TRUE(st.range_ignored);
  EXPECT_FALSE(store->serves_ranges(manifest_.shards[0].name));
  // The first shard: its first part, then the rest by one GET; every other shard by one.
  EXPECT_EQ(st.whole_fetches, manifest_.shards.size() + 1);
  EXPECT_LT(st.bytes_fetched, total + manifest_.shards[0].file_size + (1 << 20)) << "overfetch";

  // doctor: the remote check fails and says why.
  const std::vector<Check> checks = check_remote_dataset(plain.url(), 1 << 20, fast_options());
  const Check& latency = checks.at(1);
  EXPECT_EQ(latency.name, "remote_latency");
  EXPECT_EQ(latency.status, CheckStatus::kFail);
  EXPECT_NE(latency.reading.find("ignores HTTP Range"), std::string::npos) << latency.reading;
  // The fast_crop check reads a URL's MANIFEST too ("no dataset given" before).
  EXPECT_EQ(internal::check_fast_crop(plain.url()).reading, "not a JPEG dataset");
}

// Requests the proxy saw for `path` (its /__stats, fetched with our own client).
int proxy_requests(const Proxy& proxy, const std::string& path) {
  const std::string stats = RemoteStore::open(proxy.url(""), fast_options())->get("__stats");
  const std::string key = "\"" + path + "\": ";
  const size_t at = stats.find(key);
  return at == std::string::npos ? 0 : std::atoi(stats.c_str() + at + key.size());
}

TEST_F(RemoteHttp, AFailedPrefetchIsReportedByAcquireAndNotAskedAgainAndAgain) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--always", "503"}));
  RemoteOptions o = fast_options();
  o.max_attempts = 2;
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  co.prefetch = 3;
  auto cache = ShardCache::open(RemoteStore::open(proxy.url(), o), co);
  cache->prefetch({0, 1, 2});
  const std::string path = "/ds/" + manifest_.shards[1].name;
  for (int i = 0; i < 300 && proxy_requests(proxy, path) < 2; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(300ms);
  const int settled = proxy_requests(proxy, path);
  EXPECT_GE(settled, 2);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(proxy_requests(proxy, path), settled) << "the workers keep asking for a shard that fails";
  try {
    cache->acquire(1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 503"), std::string::npos) << e.what();
  }
}

TEST_F(RemoteHttp, RecordsByRangedGetEqualTheLocalOnes) {
  Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "1"}));
  auto store = RemoteStore::open(proxy.url(), fast_options());
  auto local_ds = Dataset::open(root_.str("ds"));
  auto shard = RemoteShard::open(store, manifest_.shards[2]);
  std::vector<uint64_t> idx = {5, 0, 3, 3, shard->record_count() - 1};
  auto recs = shard->read_records(idx);
  for (size_t k = 0; k < idx.size(); ++k)
    EXPECT_EQ(recs[k].buffer, local_ds->read(local_ds->shard_begin(2) + idx[k]).buffer) << idx[k];
}

TEST_F(RemoteHttp, UserinfoInAURLNeverAppearsInErrors) {
  const std::string url = "http://alice:hunter2secret@127.0.0.1:" + std::to_string(nginx_.port) + "/missing";
  auto store = RemoteStore::open(url, fast_options());
  EXPECT_EQ(store->display_url().find("hunter2secret"), std::string::npos);
  try {
    store->read_manifest();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter2secret"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("***@127.0.0.1"), std::string::npos) << e.what();
  }
}

// ---- S3 ------------------------------------------------------------------------------

using testing::ScopedEnv;

class RemoteS3 : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = write_dataset(root_.str("ds"), 3, 150);
    port_ = free_port();
    s3_ = Child({"s3rver", "-d", data_.str(), "-a", "127.0.0.1", "-p", std::to_string(port_), "--silent",
                 "--configure-bucket", "stoker-bucket"});
    if (!wait_port(port_, s3_)) GTEST_SKIP() << "s3rver (npm) could not start on 127.0.0.1";
    // Upload with the curl tool, signed the same way (s3rver checks SigV4 signatures).
    for (const auto& e : fs::directory_iterator(root_.str("ds"))) {
      const std::string cmd = "curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user " + key_ + ":" + secret_ +
                              " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T " + e.path().string() +
                              " http://127.0.0.1:" + std::to_string(port_) + "/stoker-bucket/train/ds/" +
                              e.path().filename().string() + " >/dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << "upload " << e.path();
    }
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  const std::string key_ = "S3RVER", secret_ = "S3RVER";  // s3rver's built-in account
  TempDir root_, data_, cache_;
  Manifest manifest_;
  int port_ = 0;
  Child s3_;
};

TEST_F(RemoteS3, SignedRequestsFetchTheDatasetFromEnvironmentCredentials) {
  ScopedEnv a("AWS_ACCESS_KEY_ID", key_), b("AWS_SECRET_ACCESS_KEY", secret_), c("AWS_ENDPOINT_URL", endpoint()),
      d("AWS_REGION", "us-east-1"), e("AWS_SESSION_TOKEN", "");
  auto store = RemoteStore::open("s3://stoker-bucket/train/ds", fast_options());
  EXPECT_EQ(store->display_url(), "s3://stoker-bucket/train/ds");
  CacheOptions co;
  co.dir = cache_.str();
  co.limit = 1ull << 30;
  auto cache = ShardCache::open(store, co);
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    auto pin = cache->acquire(s);
    EXPECT_EQ(testing::read_file(pin.path()),
              testing::read_file(root_.str("ds") + "/" + manifest_.shards[s].name));
  }
}

TEST_F(RemoteS3, CredentialsComeFromTheProfileFiles) {
  TempDir home;
  fs::create_directories(home.str(".aws"));
  std::ofstream(home.str(".aws/credentials")) << "[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n"
                                              << "[train]\naws_access_key_id = " << key_ << "\naws_secret_access_key = "
                                              << secret_ << "\n";
  std::ofstream(home.str(".aws/config")) << "[profile train]\nregion = us-east-1\nendpoint_url = " << endpoint() << "\n";
  ScopedEnv h("HOME", home.str()), p("AWS_PROFILE", "train");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  ::unsetenv("AWS_ENDPOINT_URL");
  ::unsetenv("AWS_REGION");
  auto store = RemoteStore::open("s3://stoker-bucket/train/ds", fast_options());
  EXPECT_EQ(store->read_manifest().shards, manifest_.shards);
}

// s3rver checks the access key (not V4 signatures): an unknown key is its 403, and its
// error body echoes the key back, which must not reach the message.
TEST_F(RemoteS3, AnUnknownKeyIsAnErrorThatNamesNoCredential) {
  const std::string bad_key = "AKIAEXAMPLEUNKNOWNKEY";
  const std::string bad_secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYzzzzSECRET";
  const std::string token = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN";
  ScopedEnv a("AWS_ACCESS_KEY_ID", bad_key), b("AWS_SECRET_ACCESS_KEY", bad_secret), c("AWS_ENDPOINT_URL", endpoint()),
      d("AWS_SESSION_TOKEN", token);
  auto store = RemoteStore::open("s3://stoker-bucket/train/ds", fast_options());
  std::string message;
  try {
    store->read_manifest();
    FAIL();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("HTTP 403"), std::string::npos) << message;
  EXPECT_NE(message.find("s3://stoker-bucket/train/ds/MANIFEST"), std::string::npos) << message;
  EXPECT_NE(message.find("InvalidAccessKeyId"), std::string::npos) << message;
  for (const std::string& secret : {bad_secret, token, bad_key})
    EXPECT_EQ(message.find(secret), std::string::npos) << "credential in: " << message;
}

// A Loader over s3:// signs with the credentials and prints none of them: not in its
// stats (C++, JSON, the summary, the verdict), not in its periodic reports (text, JSON).
TEST_F(RemoteS3, TheLoadersStatsAndReportsNameNoCredential) {
  // s3rver checks the access key only: the secret and the token may be anything, and
  // are told apart from every other text.
  const std::string secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYLOADERSECRET", token = "FwoGZXIvYXdzLOADERSESSIONTOKEN";
  ScopedEnv a("AWS_ACCESS_KEY_ID", key_), b("AWS_SECRET_ACCESS_KEY", secret), c("AWS_ENDPOINT_URL", endpoint()),
      d("AWS_REGION", "us-east-1"), e("AWS_SESSION_TOKEN", token);
  for (bool json : {false, true}) {
    SCOPED_TRACE(json ? "JSON reports, whole shards" : "text reports, records by ranged GET");
    TempDir cache;
    LoaderOptions o;
    o.remote_reads = json ? RemoteReads::kShards : RemoteReads::kRecords;
    o.path = "s3://stoker-bucket/train/ds";
    o.cache_dir = cache.str();
    o.batch_size = 8;
    o.threads = 2;
    o.rank = 0;
    o.world_size = 1;
    o.remote = fast_options();
    o.report_interval_s = 0.01;
    o.report_json = json;
    std::vector<std::string> texts;
    o.report_sink = [&](const std::string& line) { texts.push_back(line); };
    Loader l(o);
    uint64_t batches = 0;
    while (l.next()) ++batches;
    ASSERT_GT(batches, 0u);
    const LoaderStats st = l.stats();
    ASSERT_TRUE(st.network.remote);
    EXPECT_EQ(st.network.record_reads, !json);
    // Whole shards, or every record (signed GETs all the same).
    EXPECT_GE(st.network.bytes_fetched, json ? manifest_.total_bytes() : st.record_bytes);
    ASSERT_FALSE(texts.empty()) << "no report";
    texts.push_back(st.to_json());
    texts.push_back(st.summary());
    texts.push_back(st.evidence + " " + st.advice);
    EXPECT_NE(st.to_json().find("\"network\":{"), std::string::npos) << st.to_json();
    for (const std::string& t : texts)
      for (const std::string& credential : {key_, secret, token})
        EXPECT_EQ(t.find(credential), std::string::npos) << "credential in: " << t;
  }
}

// ---- locations -------------------------------------------------------------------------

TEST(RemoteLocation, TheSchemeGivesTheKindAndOnlyS3IsSigned) {
  using internal::LocationKind;
  EXPECT_EQ(internal::location_kind_of("http://h/ds"), LocationKind::kHttp);
  EXPECT_EQ(internal::location_kind_of("https://h/ds"), LocationKind::kHttps);
  EXPECT_EQ(internal::location_kind_of("s3://bucket/ds"), LocationKind::kS3);
  EXPECT_EQ(internal::location_kind_of("/data/ds"), LocationKind::kFile);
  EXPECT_EQ(internal::location_kind_of("ftp://h/ds"), LocationKind::kFile);
  EXPECT_FALSE(is_remote_url("/data/ds"));
  EXPECT_TRUE(is_remote_url("s3://bucket"));
  EXPECT_TRUE(internal::scheme_row(LocationKind::kS3).aws_signed);
  EXPECT_FALSE(internal::scheme_row(LocationKind::kHttps).aws_signed);
  EXPECT_FALSE(internal::scheme_row(LocationKind::kHttp).aws_signed);

  const internal::Location h = internal::parse_location("https://u:pw@host/a/ds/", "");
  EXPECT_EQ(h.kind, LocationKind::kHttps);
  EXPECT_EQ(h.base, "https://u:pw@host/a/ds");
  EXPECT_EQ(h.display, "https://***@host/a/ds");
  EXPECT_EQ(h.secret, "pw");

  ScopedEnv key("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), secret("AWS_SECRET_ACCESS_KEY", "s3cr3tvalue"),
      region("AWS_REGION", "eu-west-1"), endpoint("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9/"),
      config("AWS_CONFIG_FILE", "/nonexistent"), creds("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent");
  const internal::Location s = internal::parse_location("s3://bucket/pre/fix", "");
  EXPECT_EQ(s.kind, LocationKind::kS3);
  EXPECT_EQ(s.base, "http://127.0.0.1:9/bucket/pre/fix");
  EXPECT_EQ(s.display, "s3://bucket/pre/fix");
  EXPECT_EQ(s.region, "eu-west-1");
  EXPECT_EQ(s.key_id, "AKIDEXAMPLE");

  std::string msg;
  EXPECT_EQ(testing::error_code_of([] { internal::parse_location("/data/ds", ""); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("is not an http://, https:// or s3:// URL"), std::string::npos) << msg;
}

}  // namespace
}  // namespace stoker
