// `stoker bench io URL --cache-dir DIR` (options parsed by bench_io_cmd.cc): what the remote layer alone feeds, next to a
// local read of the same shards. Each round, alternating in one run:
//   cold  - an empty cache: prefetch in order, acquire each shard, read it whole
//           (parallel ranged GETs, CRC check of every record, rename, then the read);
//   warm  - the same again: every shard in place;
//   local - the same files read directly, no cache API (the baseline).
//   local O_DIRECT - the same files read with O_DIRECT, as the loader reads local
//           shards: what the storage gives when the dataset is not in the page cache;
//   wire  - the shards fetched into memory by the same parallel ranged GETs, nothing
//           written or checked: what the server and the network give.
// Ratios are per round; the median is reported. Reads go through the page cache in
// cold, warm and local, so the local baseline is the fast case.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "remote_cmd.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/remote.h"
// Internal (the tool links the library statically): the Json type, the one JSON writer
// and the library's reports as values (to_json_value), so --json prints the library's
// own JSON, measurements rounded as every report rounds them (figure).
#include "util/json.h"
// Internal, header-only: the one RAII file descriptor.
#include "util/unique_fd.h"

namespace stoker::cli {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t read_whole(const std::string& path, std::vector<uint8_t>& buf) {
  internal::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + path, errno);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errno_error("read " + path, errno);
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
  }
  return total;
}

// The same with O_DIRECT (how the loader reads local shards): the storage, not the page
// cache. Returns 0 when the filesystem refuses O_DIRECT.
uint64_t read_whole_direct(const std::string& path, uint8_t* buf, size_t size) {
  internal::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  if (!fd) return 0;
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::pread(fd.get(), buf, size, static_cast<off_t>(total));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 0;
    total += static_cast<uint64_t>(n);
    if (static_cast<size_t>(n) < size) break;
  }
  return total;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int bench_io_remote(const BenchRemoteArgs& a) {
  const RemoteOptions ro = a.remote.options();
  auto store = RemoteStore::open(a.url, ro);
  const Manifest m = store->read_manifest();
  CacheOptions co;
  co.dir = a.cache_dir;
  co.limit = a.cache_limit ? a.cache_limit : m.total_bytes() + 1;
  co.prefetch = a.prefetch;
  co.fetch_threads = a.fetch_threads;
  co.fsync = a.fsync;
  const int rounds = a.rounds;
  const std::string& local_dir = a.local_dir;

  std::vector<size_t> order(m.shards.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::vector<uint8_t> buf(4u << 20);
  const double total = static_cast<double>(m.total_bytes());
  std::vector<double> cold_r, warm_r, local_r, wire_r, direct_r, cold_ratio, warm_ratio, cold_wire, cold_direct,
      fetch_r;
  IoBuffer direct_buf = IoBuffer::aligned(4u << 20);
  uint64_t max_shard = 0;
  for (const ShardEntry& e : m.shards) max_shard = std::max(max_shard, e.file_size);
  std::vector<std::vector<uint8_t>> wire_bufs(std::max(1u, co.fetch_threads), std::vector<uint8_t>(max_shard));
  CacheStats last{};
  for (int r = 0; r < rounds; ++r) {
    std::string dir;
    {
      auto c = ShardCache::open(store, co);
      dir = c->local_dir();
    }
    std::filesystem::remove_all(dir);  // cold: nothing of this dataset cached
    auto cache = ShardCache::open(store, co);
    const RemoteStats before = store->stats();
    auto epoch = [&] {
      cache->prefetch(order);
      const auto t0 = Clock::now();
      for (size_t s : order) {
        auto pin = cache->acquire(s);
        read_whole(pin.path(), buf);
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    const double cold = epoch();
    const RemoteStats after = store->stats();
    const double warm = epoch();
    const auto t0 = Clock::now();
    for (size_t s : order)
      read_whole((local_dir.empty() ? cache->local_dir() : local_dir) + "/" + m.shards[s].name, buf);
    const double local = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto w0 = Clock::now();
    for (size_t s = 0; s < m.shards.size(); s += wire_bufs.size()) {
      std::vector<RemoteStore::Range> ranges;
      for (size_t k = 0; k < wire_bufs.size() && s + k < m.shards.size(); ++k)
        ranges.push_back({m.shards[s + k].name, 0, std::span<uint8_t>(wire_bufs[k]).first(m.shards[s + k].file_size),
                          "shard " + m.shards[s + k].name, {}});
      store->read_many(ranges);
    }
    const double wire = std::chrono::duration<double>(Clock::now() - w0).count();
    const auto d0 = Clock::now();
    uint64_t direct_bytes = 0;
    for (size_t s : order)
      direct_bytes += read_whole_direct((local_dir.empty() ? cache->local_dir() : local_dir) + "/" + m.shards[s].name,
                                        direct_buf.data(), direct_buf.size());
    const double direct = std::chrono::duration<double>(Clock::now() - d0).count();
    if (direct_bytes == m.total_bytes()) {
      direct_r.push_back(total / direct);
      cold_direct.push_back(direct / cold);
    }
    wire_r.push_back(total / wire);
    cold_wire.push_back(wire / cold);
    cold_r.push_back(total / cold);
    warm_r.push_back(total / warm);
    local_r.push_back(total / local);
    cold_ratio.push_back(local / cold);
    warm_ratio.push_back(local / warm);
    fetch_r.push_back(static_cast<double>(after.bytes_fetched - before.bytes_fetched) /
                      std::max(1e-9, after.busy_s - before.busy_s));
    last = cache->stats();
    std::fprintf(stderr, "round %d: cold %.1f MB/s, warm %.1f MB/s, local %.1f MB/s, wire %.1f MB/s\n", r + 1,
                 total / cold / 1e6, total / warm / 1e6, total / local / 1e6, total / wire / 1e6);
  }
  const RemoteStats rs = store->stats();
  std::printf("%s: %zu shards, %s, %d round%s (median)\n", store->display_url().c_str(), m.shards.size(),
              format_bytes(total).c_str(), rounds, rounds == 1 ? "" : "s");
  std::printf("cold  %.1f MB/s  (%.3f of local)   fetch %.1f MB/s while requests were in flight\n",
              median(cold_r) / 1e6, median(cold_ratio), median(fetch_r) / 1e6);
  std::printf("warm  %.1f MB/s  (%.3f of local)   hit rate %.2f\n", median(warm_r) / 1e6, median(warm_ratio),
              last.hit_rate());
  std::printf("local %.1f MB/s\n", median(local_r) / 1e6);
  std::printf("wire  %.1f MB/s  (cold is %.3f of it)\n", median(wire_r) / 1e6, median(cold_wire));
  if (!direct_r.empty())
    std::printf("local O_DIRECT %.1f MB/s  (cold is %.3f of it)\n", median(direct_r) / 1e6, median(cold_direct));
  else
    std::printf("local O_DIRECT: refused by the filesystem\n");
  std::printf("requests %llu, retries %llu, %s fetched, %u connections, part %s, window %u shards, fsync %s\n",
              static_cast<unsigned long long>(rs.requests), static_cast<unsigned long long>(rs.retries),
              format_bytes(static_cast<double>(rs.bytes_fetched)).c_str(), ro.connections,
              format_bytes(static_cast<double>(ro.part_bytes)).c_str(), last.prefetch_window, co.fsync ? "on" : "off");
  if (a.json) {
    const internal::Json o = {{"url", store->display_url()},
                              {"shards", m.shards.size()},
                              {"bytes", m.total_bytes()},
                              {"rounds", rounds},
                              {"cold_bytes_per_s", internal::figure(median(cold_r))},
                              {"warm_bytes_per_s", internal::figure(median(warm_r))},
                              {"local_bytes_per_s", internal::figure(median(local_r))},
                              {"cold_over_local", internal::figure(median(cold_ratio))},
                              {"warm_over_local", internal::figure(median(warm_ratio))},
                              {"fetch_bytes_per_s", internal::figure(median(fetch_r))},
                              {"wire_bytes_per_s", internal::figure(median(wire_r))},
                              {"cold_over_wire", internal::figure(median(cold_wire))},
                              {"local_direct_bytes_per_s", internal::figure(median(direct_r))},
                              {"cold_over_local_direct", internal::figure(median(cold_direct))},
                              {"requests", rs.requests},
                              {"retries", rs.retries},
                              {"hit_rate", internal::figure(last.hit_rate())}};
    std::printf("%s\n", internal::json_text(o).c_str());
  }
  return 0;
}

}  // namespace stoker::cli
