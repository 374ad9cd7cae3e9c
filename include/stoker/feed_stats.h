// A feed's figures: the busy and wait accounting of each stage, the network stage of a
// remote dataset, and a Loader's stats over its run.
//
// Promises: every figure is a plain value, counted over the run the struct says (a
// LoaderStats snapshot covers the epoch's pipeline so far); visit() names each figure
// once, and to_json() and the Python binding's stats() are made from it. The structs
// are values: copy them freely, from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/io.h"
#include "stoker/stats.h"

namespace stoker {

/// Busy/wait accounting of one stage.
struct StageStats {
  unsigned threads = 0;
  double busy_s = 0;   ///< summed over threads
  double wait_s = 0;   ///< summed over threads: blocked on input or on a free slot
  uint64_t items = 0;  ///< records (io), samples (decode)
  /// busy_s / (threads * wall), in [0, 1].
  double busy_frac(double wall_s) const noexcept {
    return threads && wall_s > 0 ? busy_s / (threads * wall_s) : 0;
  }
};

/// The network stage of a remote dataset (LoaderOptions::path a URL): its fetches and
/// its shard cache, counted over the same run as LoaderStats' other figures (the first
/// run includes opening the dataset), except requests_in_flight, cache_bytes and
/// cache_limit, which are values now. No credential is ever part of it.
struct NetworkStats {
  bool remote = false;          ///< false: a local dataset (everything below is 0)
  uint64_t bytes_fetched = 0;   ///< response body bytes received
  uint64_t requests = 0;        ///< requests finished (any outcome)
  uint64_t retries = 0;         ///< requests that were tried again
  double busy_s = 0;            ///< seconds with at least one request in flight
  double request_s = 0;         ///< requests in flight integrated over time (RemoteStats::request_s)
  uint64_t requests_in_flight = 0;  ///< now
  /// Seconds the readers blocked on shards not in the cache yet (their download, or a
  /// prefetch thread's), summed over the reading threads.
  double fetch_wait_s = 0;
  /// Of fetch_wait_s, the part before the run's first batch: a cold epoch in a global
  /// shuffle, whose first batches touch every shard, waits here for most of them.
  double startup_fetch_wait_s = 0;
  uint64_t hits = 0;    ///< shards the run read that were in place (in the cache, or held already)
  uint64_t misses = 0;  ///< shards the run read that it had to wait for
  /// Records come by their own ranged GETs (LoaderOptions::remote_reads), not shards
  /// through the cache: hits and misses stay 0.
  bool record_reads = false;
  /// The server ignores Range (RemoteStats::range_ignored): shards come by one whole GET
  /// each and records are not read by ranged GET; whole_fetches counts those GETs.
  bool range_ignored = false;
  uint64_t whole_fetches = 0;
  uint64_t cache_bytes = 0;  ///< bytes of this dataset in the cache directory (last scanned)
  uint64_t cache_limit = 0;  ///< the cache's limit in bytes
  /// hits / (hits + misses); 0 when the run read no shard.
  double hit_rate() const noexcept {
    return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
  }
  /// bytes_fetched / wall_s, requests / wall_s, request_s / wall_s (mean requests in
  /// flight), fetch_wait_s / wall_s, for the `wall_s` the figures were counted over.
  double bytes_per_s(double wall_s) const noexcept { return wall_s > 0 ? bytes_fetched / wall_s : 0; }
  double requests_per_s(double wall_s) const noexcept { return wall_s > 0 ? requests / wall_s : 0; }
  double mean_in_flight(double wall_s) const noexcept { return wall_s > 0 ? request_s / wall_s : 0; }
  /// Adds the counts of `n` (a later run, another source of a mixture): bytes,
  /// requests, retries, busy and request seconds, fetch waits, hits, misses; `remote`
  /// and `record_reads` when n has them. The values that are "now" (requests in flight,
  /// cache bytes and limit) are the caller's to set.
  void add_counts(const NetworkStats& n) noexcept;
  /// "fetched 48.1 MB/s, 12.0 requests/s, 6.0 requests in flight, cache hit rate 12% (3
  /// of 25 shards in place), cache 120.0 MB of 1000.0 MB", the rates over `wall_s`.
  std::string summary(double wall_s) const;
  /// The figures by name (stats.h), the rates over `wall_s`: bytes_fetched, bytes_per_s,
  /// requests, requests_per_s, retries, requests_in_flight_avg, fetch_wait_s,
  /// fetch_wait_frac (the given share of the interval the readers waited on fetches),
  /// reads ("records" | "shards"), range_ignored, whole_fetches, hits, misses, hit_rate
  /// (none before any shard was read), cache_bytes, cache_limit.
  void visit(StatsVisitor& v, double wall_s, double fetch_wait_frac) const;
};

/// The counters a feed's figures and a Loader's stats share (both derive from it, so
/// the verdict's figures are made from a LoaderStats without copying field by field).
struct FeedCounters {
  double wall_s = 0;          ///< since the epoch's pipeline started (the interval's length)
  uint64_t batches = 0, samples = 0;
  uint64_t bytes_read = 0;    ///< by the IO engine (aligned ranges included)
  bool tokens = false;        ///< token data: samples are rows, "decode" is zstd + row copies
  bool tokenize = false;      ///< text tokenised in the loader: "decode" is tokenising (and packing rows)
  /// The dataset's JPEGs were packed with --fast-crop (manifest meta): advice never
  /// proposes that repack again.
  bool fast_crop = false;
  StageStats io, decode;
  /// Seconds the final consumer (the trainer) waited for a batch: the loader's next(),
  /// or the Stager's next() when staging.
  double consumer_wait_s = 0;
  /// Seconds the consumer's thread (the one calling next()) was ready to run but waited
  /// for a CPU (/proc/self/task/<tid>/schedstat run delay); 0 when unknown.
  double consumer_run_delay_s = 0;
  double decode_queue_avg = 0;    ///< mean records waiting for a decoder (sampled)
  double slots_ready_avg = 0;     ///< mean slots decoded and not yet taken (sampled)
  double slots_free_avg = 0;      ///< mean slots free for the IO stage (sampled)
  unsigned slots = 0;             ///< ring size now (grows when the consumer holds slots)
  std::string slot_memory;        ///< "host", "pinned", ...
  /// A remote dataset's fetches and cache (network.remote false: a local dataset).
  NetworkStats network;
};

/// The autotuner of threads="auto" (LoaderOptions::threads): its knobs now and their
/// changes. Not reset by a new epoch: the tuner's settings carry over.
struct TuneStats {
  bool enabled = false;         ///< threads="auto"
  bool settled = false;         ///< the tuner made its last move
  unsigned threads = 0, threads_max = 0;  ///< decode threads at work, and the CPU budget
  unsigned slots = 0, slots_max = 0;      ///< ring slots in use, and what the memory budget holds
  unsigned queue_depth = 0, queue_depth_max = 0;  ///< IO reads in flight at most, and the engine's depth
  uint64_t memory_budget = 0;   ///< bytes the ring may take
  double noise = 0;             ///< the relative rate change a move must beat
  double last_change_s = 0;     ///< seconds of feed (tuned intervals) at the last change; 0: none
  /// Changes so far, oldest first ("batch 40 (2.1 s): threads 1 -> 2 (decode bound: ...)"),
  /// the undoing of a trial included. JSON (to_json) and Python's stats() list them;
  /// visit() gives their count and the last one.
  std::vector<std::string> changes;
  /// enabled, settled, threads, threads_max, slots, slots_max, queue_depth,
  /// queue_depth_max, memory_budget_bytes, noise,
  /// changes (the count), last_change_s, last_change ("" before any).
  void visit(StatsVisitor& v) const;
};

/// A Loader's figures over its run (Loader::stats()).
struct LoaderStats : FeedCounters {
  double first_batch_s = 0;   ///< start -> first batch handed out
  uint64_t record_bytes = 0;  ///< stored bytes of the records delivered
  uint64_t skipped = 0;       ///< samples dropped by OnError::kSkip (token data: rows)
  /// Packed samples (LoaderOptions::seq_len): padding positions in the rows delivered;
  /// and, for the whole dataset's plan, tokens cut off by LongSamples::kTruncate and
  /// samples left out for having no tokens.
  uint64_t padding_tokens = 0, truncated_tokens = 0, empty_samples = 0;
  /// Seconds the Loader's opening spent on the plan's sample lengths, and for text
  /// (LoaderOptions::tokenizer) the documents it tokenised to count them: all of them, or
  /// 0 when it read the counts an earlier run kept (token_counts_dir). 0 otherwise.
  double plan_s = 0;
  uint64_t plan_tokenised = 0;
  IoStats io_engine;
  std::string cpu_explanation;
  /// Which stage bounds the feed over the whole run ("network", "storage", "decode",
  /// "copy", "consumer", "unknown" before enough data), the numbers behind it and the next step
  /// (diagnose.h). The periodic reports use interval verdicts instead.
  std::string bottleneck = "unknown";
  std::string evidence;
  std::string advice;
  TuneStats tune;
  /// The figures by name (stats.h), in this order: wall_s, first_batch_s, batches,
  /// samples, samples_per_s, bytes_read, record_bytes, skipped, padding_tokens,
  /// truncated_tokens, empty_samples, plan_s, plan_tokenised, tokens, the groups io and
  /// decode (threads, busy_s, wait_s, items, busy_frac), consumer_wait_s,
  /// consumer_wait_frac, consumer_run_delay_s, decode_queue_avg, slots, slots_ready_avg, slots_free_avg,
  /// io_engine, io_direct, io_fallback, the group network (NetworkStats::visit, then
  /// requests_in_flight and busy_frac; none for a local dataset), slot_memory, cpus,
  /// bottleneck, evidence, advice, the group tune (TuneStats::visit).
  void visit(StatsVisitor& v) const;
  /// One JSON object (no newline): visit()'s figures, measurements to 6 significant digits.
  std::string to_json() const;
  /// One line: "1234 samples/s, decode 8 threads 97% busy, consumer waited 31% ...",
  /// with the figures `evidence` gives (the consumer's wait after its first batch, busy
  /// fractions capped at 100 %), and for a remote dataset the network stage: "network
  /// 48.1 MB/s fetched, 12 requests/s, 6.0 in flight, cache hit rate 12%, ...".
  std::string summary() const;
  /// The consumer's wait after the first batch over the time since: the figure of the
  /// verdict's evidence, summary() and to_json()'s consumer_wait_frac. In [0, 1].
  double consumer_wait_frac() const;
};

}  // namespace stoker
