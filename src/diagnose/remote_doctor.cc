// The remote-dataset checks of `stoker doctor --dataset URL`.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/remote.h"

namespace stoker {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string fmt(const char* f, double a, double b = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

}  // namespace

std::vector<Check> check_remote_dataset(const std::string& url, uint64_t probe_bytes, RemoteOptions options) {
  Check reach, latency, bandwidth;
  reach.name = "remote_reachable";
  latency.name = "remote_latency";
  bandwidth.name = "remote_bandwidth";
  std::shared_ptr<RemoteStore> store;
  Manifest m;
  try {
    store = RemoteStore::open(url, options);
    const auto t0 = Clock::now();
    m = store->read_manifest();
    reach.status = CheckStatus::kOk;
    reach.reading = store->display_url() + ": " + std::to_string(m.shards.size()) + " shards, " +
                    fmt("%.1f MiB", static_cast<double>(m.total_bytes()) / (1 << 20)) +
                    fmt(", manifest in %.1f ms", ms_since(t0));
    reach.meaning = "the dataset answers and its manifest checks";
  } catch (const Error& e) {
    reach.status = CheckStatus::kFail;
    reach.reading = e.what();
    reach.meaning = "the loader cannot open this dataset";
    reach.advice = e.code() == ErrorCode::kNotFound
                       ? "check the URL: it names the dataset directory (the one holding MANIFEST)"
                       : "check the endpoint, network and credentials (AWS_* variables, ~/.aws)";
    latency.reading = bandwidth.reading = "not measured: the dataset is unreachable";
    return {reach, latency, bandwidth};
  }
  if (m.shards.empty()) {
    latency.reading = bandwidth.reading = "the dataset has no shards";
    return {reach, latency, bandwidth};
  }
  try {
    // Small reads on one connection, one after another: the round trip a record read
    // by ranged GET pays.
    const ShardEntry& e = m.shards[0];
    std::vector<uint8_t> buf(4096);
    std::vector<double> times;
    for (int i = 0; i < 7; ++i) {
      const uint64_t off = e.file_size > buf.size() ? (e.file_size - buf.size()) * static_cast<uint64_t>(i) / 7 : 0;
      const auto t0 = Clock::now();
      store->read(e.name, off, std::span<uint8_t>(buf).first(std::min<uint64_t>(buf.size(), e.file_size)),
                  "shard " + e.name);
      times.push_back(ms_since(t0));
    }
    if (!store->serves_ranges(e.name)) {
      // Each of those reads fetched the shard from its first byte: every read by range
      // (records, the parts of a download) would cost a whole object.
      latency.status = CheckStatus::kFail;
      latency.reading = store->display_url() + " ignores HTTP Range: a ranged GET of " + store->object_url(e.name) +
                        " was answered with the whole object (HTTP 200)";
      latency.meaning = "the loader falls back to whole-shard reads (one GET per shard, no records by ranged GET), "
                        "and a cache smaller than the dataset then refetches whole shards";
      latency.advice = "serve the dataset with a server that supports Range (nginx, Apache, an S3 store); "
                       "`python3 -m http.server` does not";
    } else {
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      latency.reading = fmt("median %.2f ms per 4 KiB ranged GET (min %.2f ms)", med, times.front());
      latency.status = med > 50 ? CheckStatus::kWarn : CheckStatus::kOk;
      latency.meaning = "a record read by ranged GET (global shuffle beyond the cache) waits this long; whole shards "
                        "through the cache do not";
      if (med > 50)
        latency.advice = "give the loader a cache (cache_dir, cache_limit) that holds the shards an epoch touches, "
                         "or a shard-local order";
    }
  } catch (const Error& e) {
    latency.status = CheckStatus::kFail;
    latency.reading = e.what();
    latency.meaning = "small reads fail";
  }
  try {
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<RemoteStore::Range> ranges;
    uint64_t total = 0;
    for (const ShardEntry& e : m.shards) {
      if (total >= probe_bytes) break;
      const uint64_t n = std::min(e.file_size, probe_bytes - total);
      bufs.emplace_back(n);
      total += n;
    }
    for (size_t i = 0; i < bufs.size(); ++i)
      ranges.push_back({m.shards[i].name, 0, bufs[i], "shard " + m.shards[i].name, {}});
    const auto t0 = Clock::now();
    store->read_many(ranges);
    const double s = ms_since(t0) / 1000;
    const double mbs = static_cast<double>(total) / 1e6 / std::max(s, 1e-9);
    bandwidth.reading = fmt("%.1f MB/s", mbs) + " over " + fmt("%.1f MiB", static_cast<double>(total) / (1 << 20)) +
                        " with " + std::to_string(store->options().connections) + " ranged GETs in flight";
    bandwidth.status = mbs < 100 ? CheckStatus::kWarn : CheckStatus::kOk;
    bandwidth.meaning = "a cold epoch is fed at most this fast; later epochs read the node-local cache";
    if (mbs < 100)
      bandwidth.advice = "size cache_limit to hold the dataset (then only the first epoch pays), or raise "
                         "connections if the store allows more parallel requests";
  } catch (const Error& e) {
    bandwidth.status = CheckStatus::kFail;
    bandwidth.reading = e.what();
    bandwidth.meaning = "bulk reads fail";
  }
  return {reach, latency, bandwidth};
}

}  // namespace stoker
