// `stoker bench io DATASET`: reads every record of a dataset through the IO engine, in
// sequential or shuffled order, without decoding, and reports records/s and GB/s.
// The number to hold next to fio (bench/fio_compare.sh): the storage side of the
// loader, with the loader's read planning (aligned ranges, coalesced neighbours).
// `stoker bench io URL --cache-dir DIR` measures the remote layer instead
// (src/cli/bench_remote_cmd.cc); the options of both are declared here.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cli.h"
#include "remote_cmd.h"
#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/shard.h"
// Internal (the tool links the library statically): the Json type, the one JSON writer
// and the library's reports as values (to_json_value), so --json prints the library's
// own JSON, measurements rounded as every report rounds them (figure).
#include "util/json.h"

namespace stoker::cli {
namespace {


struct IoArgs {
  std::string dataset, order = "shuffled", engine, max_request = "1MiB";
  int64_t qd = 64, seed = 0, limit = -1, threads = IoOptions{}.pread_threads;
  bool json = false, verify = false, buffered = false, drop_caches = false;
  // URL only.
  BenchRemoteArgs remote;
  std::string cache_limit;
  bool no_fsync = false;
};

int bench_io_cmd(const IoArgs& a) {
  const std::string& order = a.order;
  const int64_t qd = a.qd;
  const uint64_t seed = static_cast<uint64_t>(a.seed);
  const bool json = a.json, verify = a.verify;
  const uint64_t max_request = parse_size(a.max_request);

  if (a.drop_caches) {
    std::ofstream dc("/proc/sys/vm/drop_caches");
    dc << "3\n";
    dc.flush();
    if (!dc) std::cerr << "stoker: could not drop the page cache (needs root); continuing\n";
  }

  auto ds = Dataset::open(a.dataset);
  const uint64_t total = ds->record_count();
  const uint64_t n = a.limit < 0 ? total : std::min<uint64_t>(total, static_cast<uint64_t>(a.limit));
  std::vector<std::shared_ptr<const ShardReader>> shards(ds->shard_count());
  for (size_t s = 0; s < shards.size(); ++s) shards[s] = ds->shard(s);

  // The order: sequential, or a seeded Fisher-Yates permutation of global indices.
  std::vector<uint64_t> order_idx(total);
  std::iota(order_idx.begin(), order_idx.end(), 0);
  if (order == "shuffled") {
    std::mt19937_64 rng(seed);
    for (uint64_t i = total; i > 1; --i) {
      std::uniform_int_distribution<uint64_t> pick(0, i - 1);
      std::swap(order_idx[i - 1], order_idx[pick(rng)]);
    }
  }
  order_idx.resize(n);

  // Largest record decides the slab size: qd buffers of the largest planned read.
  IoOptions o;
  if (!a.engine.empty()) o.engine = io_engine_kind_from_name(a.engine);
  o.queue_depth = static_cast<unsigned>(qd);
  o.direct = !a.buffered;
  o.pread_threads = static_cast<unsigned>(a.threads);
  o.slab_bytes = 0;  // sized below, once the plan is known
  std::vector<RecordRange> ranges(n);
  std::vector<const RecordLocation*> locs(n);
  uint64_t payload = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const auto [s, i] = ds->locate(order_idx[k]);
    const RecordLocation& loc = shards[s]->location(i);
    locs[k] = &loc;
    ranges[k] = {static_cast<uint32_t>(s), loc.offset, loc.stored_size, shards[s]->file_size()};
    payload += loc.stored_size;
  }
  // Probe direct-ness with a throwaway engine on one shard so the plan matches.
  bool direct = false;
  {
    IoOptions probe = o;
    probe.slab_bytes = 0;
    auto e = make_io_engine(probe);
    if (ds->shard_count()) e->add_file(ds->shard_path(0));
    direct = e->direct();
  }
  PlanOptions po;
  po.alignment = direct ? kDirectAlignment : 1;
  po.max_request_bytes = max_request;
  const ReadPlan plan = plan_reads(ranges, po);
  const uint64_t slot_bytes = std::max<uint64_t>(kDirectAlignment, (plan.max_read_bytes + 4095) & ~4095ull);
  o.slab_bytes = static_cast<size_t>(std::min<uint64_t>(1ull << 30, slot_bytes * static_cast<uint64_t>(qd)));

  auto engine = make_io_engine(o);
  for (size_t s = 0; s < ds->shard_count(); ++s) engine->add_file(ds->shard_path(s));
  if (engine->direct() != direct) {
    throw_error(ErrorCode::kIoError, "O_DIRECT support differs between the shards of " + ds->dir());
  }
  std::vector<IoBuffer> slots(static_cast<size_t>(qd));
  std::vector<uint32_t> free_slots;
  for (size_t i = 0; i < slots.size(); ++i) {
    slots[i] = engine->alloc(slot_bytes);
    free_slots.push_back(static_cast<uint32_t>(slots.size() - 1 - i));
  }

  // Bytes each read must deliver: up to the end of its last record.
  std::vector<uint64_t> need(plan.reads.size(), 0);
  for (uint64_t k = 0; k < n; ++k) {
    auto& sl = plan.records[k];
    need[sl.read] = std::max(need[sl.read], sl.skip + ranges[k].length);
  }

  std::vector<ReadRequest> batch;
  std::vector<ReadCompletion> done;
  std::vector<uint32_t> slot_of(plan.reads.size());
  size_t next = 0, completed = 0;
  uint64_t read_bytes = 0, bad_crc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (completed < plan.reads.size()) {
    batch.clear();
    while (next < plan.reads.size() && !free_slots.empty()) {
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      const auto& rd = plan.reads[next];
      slot_of[next] = slot;
      batch.push_back({rd.file, rd.offset, static_cast<uint32_t>(rd.length), slots[slot].data(), next});
      ++next;
    }
    if (!batch.empty()) engine->submit(batch);
    done.clear();
    engine->reap(done, 1, std::chrono::milliseconds(10000));
    for (const ReadCompletion& c : done) {
      if (c.result < 0) throw_error(ErrorCode::kIoError, c.error);
      if (static_cast<uint64_t>(c.result) < need[c.tag]) {
        const auto& rd = plan.reads[c.tag];
        throw_error(ErrorCode::kDataLoss,
                    "read " + engine->file_path(rd.file) + " offset " + std::to_string(rd.offset) +
                        " returned " + std::to_string(c.result) + " bytes, the records need " +
                        std::to_string(need[c.tag]) + " (file shorter than its index says)");
      }
      read_bytes += static_cast<uint64_t>(c.result);
      if (verify) {
        const auto& rd = plan.reads[c.tag];
        for (uint32_t k = rd.first_record; k < rd.first_record + rd.record_count; ++k) {
          const uint8_t* b = slots[slot_of[c.tag]].data() + plan.records[k].skip;
          bad_crc += crc32c(b, locs[k]->stored_size) != locs[k]->crc;
        }
      }
      free_slots.push_back(slot_of[c.tag]);
      ++completed;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bad_crc) {
    throw_error(ErrorCode::kDataLoss,
                std::to_string(bad_crc) + " records read with a CRC mismatch in " + ds->dir());
  }
  const IoStats st = engine->stats();
  const double rps = secs > 0 ? static_cast<double>(n) / secs : 0;
  const double bps = secs > 0 ? static_cast<double>(payload) / secs : 0;
  const double rbps = secs > 0 ? static_cast<double>(read_bytes) / secs : 0;
  const double iops = secs > 0 ? static_cast<double>(plan.reads.size()) / secs : 0;
  std::printf("read %llu records (%s payload, %s read in %zu requests) in %.3f s\n",
              static_cast<unsigned long long>(n), format_bytes(static_cast<double>(payload)).c_str(),
              format_bytes(static_cast<double>(read_bytes)).c_str(), plan.reads.size(), secs);
  std::printf("%.0f records/s, %.3f GB/s payload (%.3f GB/s read, %.0f reads/s); engine %s%s, qd %lld, order %s%s\n",
              rps, bps / 1e9, rbps / 1e9, iops, st.engine.c_str(), st.direct ? " O_DIRECT" : " buffered",
              static_cast<long long>(qd), order.c_str(), verify ? ", CRCs verified" : "");
  if (!st.fallback_reason.empty()) std::printf("fallback: %s\n", st.fallback_reason.c_str());
  if (json) {
    const internal::Json j = {{"records", n},
                              {"payload_bytes", payload},
                              {"read_bytes", read_bytes},
                              {"reads", plan.reads.size()},
                              {"seconds", internal::figure(secs)},
                              {"records_per_s", internal::figure(rps)},
                              {"bytes_per_s", internal::figure(bps)},
                              {"read_bytes_per_s", internal::figure(rbps)},
                              {"reads_per_s", internal::figure(iops)},
                              {"engine", st.engine},
                              {"direct", st.direct},
                              {"qd", qd},
                              {"order", order},
                              {"fixed_buffers", st.fixed_buffers},
                              {"verified", verify},
                              {"fallback_reason", st.fallback_reason}};
    std::printf("%s\n", internal::json_text(j).c_str());
  }
  return 0;
}

void setup(CLI::App& tool) {
  CLI::App* bench = group(tool, "bench", "Measure the feed, its stages and the machine's limits.");
  auto a = std::make_shared<IoArgs>();
  CLI::App* c = bench->add_subcommand(
      "io", "Read every record of a dataset through the IO engine (no decode); print records/s and GB/s.");
  c->add_option("DATASET", a->dataset, "dataset (packed): a directory, or an http(s):// or s3:// URL")->required();
  c->add_option("--order", a->order, "read order")->check(CLI::IsMember({"sequential", "shuffled"}))->capture_default_str();
  c->add_option("--qd", a->qd, "reads in flight")->check(CLI::Range(1, 4096))->capture_default_str();
  c->add_option("--engine", a->engine, "IO engine (default: auto)")->check(named_by(io_engine_kind_from_name, "auto|uring|pread"));
  c->add_option("--seed", a->seed, "shuffle seed")->check(non_negative())->capture_default_str();
  c->add_option("--limit", a->limit, "read only the first N records of the order")->check(non_negative());
  c->add_option("--max-request", a->max_request, "largest read (neighbours coalesce up to it)")
      ->check(byte_size())->capture_default_str();
  c->add_option("--threads", a->threads, "threads of the pread engine")->check(CLI::Range(1, 256))->capture_default_str();
  c->add_flag("--buffered", a->buffered, "buffered reads (no O_DIRECT)");
  c->add_flag("--verify", a->verify, "check every record's CRC");
  c->add_flag("--drop-caches", a->drop_caches, "drop the page cache first (needs root)");
  c->add_flag("--json", a->json, "a JSON object after the text");
  // A URL: cold cache, warm cache, local, O_DIRECT and wire rates (bench_remote_cmd.cc).
  BenchRemoteArgs& r = a->remote;
  c->add_option("--cache-dir", r.cache_dir, "URL: the shard cache directory (required with a URL)");
  c->add_option("--cache-limit", a->cache_limit, "URL: cache size (default: the dataset's size)")->check(byte_size());
  c->add_option("--rounds", r.rounds, "URL: rounds of cold/warm/local/wire reads (median reported)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  c->add_option("--prefetch", r.prefetch, "URL: shards fetched ahead")->check(CLI::Range(0, 1024))->capture_default_str();
  c->add_option("--fetch-threads", r.fetch_threads, "URL: shards downloading at once")
      ->check(CLI::Range(1, 64))->capture_default_str();
  c->add_flag("--no-fsync", a->no_fsync, "URL: no fdatasync of a shard before it enters the cache");
  c->add_option("--local", r.local_dir, "URL: a local copy to read as the baseline (default: the cache's files)");
  add_remote_options(c, r.remote);
  on_run(c, [a, c] {
    if (!is_remote_url(a->dataset)) {
      reject_options(c, {"--cache-dir", "--cache-limit", "--rounds", "--prefetch", "--fetch-threads", "--no-fsync",
                         "--local", "--connections", "--part", "--profile"}, "without a URL");
      return bench_io_cmd(*a);
    }
    reject_options(c, {"--order", "--qd", "--engine", "--seed", "--limit", "--max-request", "--threads", "--buffered",
                       "--verify", "--drop-caches"}, "with a URL");
    if (a->remote.cache_dir.empty()) throw UsageError("a URL needs --cache-dir DIR");
    BenchRemoteArgs r = a->remote;
    r.url = a->dataset;
    r.cache_limit = a->cache_limit.empty() ? 0 : parse_size(a->cache_limit);
    r.fsync = !a->no_fsync;
    r.json = a->json;
    return bench_io_remote(r);
  });
}

}  // namespace

STOKER_COMMAND("bench io", setup);

}  // namespace stoker::cli
