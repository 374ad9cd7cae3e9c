// The bottleneck verdict: which station of the input assembly line bounds the feed rate.
//
// A feed has four stations (five for a remote dataset, whose shards arrive over the
// network into the shard cache): storage (the IO engine's reads), decode (the stoker-dec
// threads: CRC, unpack, JPEG decode, transform), the host-to-device copy (a Stager's copy
// stream, when staging), and the consumer (the trainer, i.e. the GPU). diagnose() reads
// the per-stage figures of an interval (FeedFigures, built from a LoaderStats snapshot or
// the difference of two) and names the station that bounds the rate, with the numbers
// behind it and the next step:
//   consumer_starved  the consumer rarely waits for a batch but its thread waits for a
//             CPU (schedstat run delay) much of the time: the loader's threads take the
//             trainer's cores;
//   consumer  the consumer rarely waits for a batch (the desired state: the GPU is the
//             bottleneck, input keeps up);
//   copy      the copy stream is (nearly) always busy while the consumer waits;
//   decode    decode threads are (nearly) always busy, or records queue up for them,
//             while the consumer waits;
//   tokenize  the same, when the decode threads tokenise text (LoaderOptions::tokenizer);
//   network   a remote dataset: the consumer waits and the readers spend much of the
//             time blocked on shards that have not arrived in the cache yet (and neither
//             decode nor copy is saturated), or the first batch waited on fetches for
//             much of the interval (a cold epoch of a global shuffle, whose first
//             batches need nearly every shard);
//   storage   the consumer waits and the decoders are starved: reads do not arrive fast
//             enough (decoders busy less than half the time, or less than the IO engine).
// BottleneckTracker turns a stream of cumulative snapshots (a periodic report) into a
// smoothed verdict: thresholds have hysteresis around the current verdict and a new
// verdict must be seen on `confirm_intervals` consecutive intervals before it replaces
// the current one, so a steady workload does not flip-flop.
//
// Threading: diagnose() is a pure function of its inputs (thread-safe). A
// BottleneckTracker is not thread-safe: one thread (the reporter) calls update().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "stoker/feed_stats.h"

namespace stoker {

enum class Bottleneck { kUnknown, kStorage, kDecode, kCopy, kConsumer, kNetwork, kConsumerStarved, kTokenize };
/// "unknown", "storage", "decode", "copy", "consumer", "network", "consumer_starved", "tokenize".
const char* bottleneck_name(Bottleneck b) noexcept;
/// Inverse of bottleneck_name. Throws kInvalidArgument.
Bottleneck bottleneck_from_name(const std::string& name);

/// The per-stage figures of one interval of a feed. Cumulative counters (seconds,
/// counts) are for the interval; the *_avg fields are means over the interval.
struct FeedFigures : FeedCounters {
  double startup_s = 0;       ///< part of wall_s before the first batch (excluded from
                              ///< the consumer's wait fraction: a pipeline filling up)
  /// Host-to-device copy stage (a Stager's copy stream: threads = 1, busy_s = seconds
  /// with a copy in flight, wait_s = seconds waiting for host batches). Absent: no staging.
  std::optional<StageStats> copy;
  double io_engine_busy_s = 0;  ///< IoStats::busy_s (reads in flight); 0 when unknown
  std::string io_engine;        ///< "uring", "pread", "" when unknown
  bool io_direct = false;
  /// IoStats::queue_full_s: seconds with reads waiting for room in the engine's queue
  /// (its depth holds them back, not the storage).
  double io_queue_full_s = 0;

  /// The whole run a snapshot covers (startup_s = first_batch_s).
  static FeedFigures from(const LoaderStats& s);
  /// The interval between two snapshots of the same run. When `after` belongs to a new
  /// run (an epoch restarted: its clock or counters went backwards) it is `after` alone.
  static FeedFigures between(const LoaderStats& before, const LoaderStats& after);
  /// Same on figures that are cumulative (from()).
  static FeedFigures between(const FeedFigures& before, const FeedFigures& after);

  double samples_per_s() const noexcept { return wall_s > 0 ? samples / wall_s : 0; }
  /// consumer_wait_s / wall_s, both without the startup part, in [0, 1].
  double consumer_wait_frac() const noexcept;
  /// network.fetch_wait_s / wall_s, both without the startup part, in [0, 1]; 0 for a
  /// local dataset.
  double fetch_wait_frac() const noexcept;
};

/// Thresholds of the verdict. Defaults are documented next to each field.
struct DiagnoseOptions {
  /// The consumer is the bottleneck when it waits less than this fraction of the time.
  double consumer_wait_ok = 0.10;
  /// A stage whose threads are busy at least this fraction of the time is saturated.
  double busy_high = 0.80;
  /// Below busy_high, decoders busy at least this fraction still make the verdict decode
  /// (the larger share of the wait), unless the IO engine's reads were in flight for a
  /// larger fraction; below it they are starved and the verdict is storage.
  double starved_below = 0.5;
  /// Records queued per decode thread that mean "decode is behind" even below busy_high
  /// (decode threads descheduled by a busy machine still leave a backlog).
  double queue_per_thread_high = 2.0;
  /// Thresholds move this much in favour of the current verdict (hysteresis).
  double hysteresis = 0.05;
  /// A remote dataset: readers blocked on shards not yet fetched for at least this
  /// fraction of the interval after start-up, while the consumer waits and neither
  /// decode nor copy is saturated, or before the first batch for at least this fraction
  /// of the whole interval, make the verdict network.
  double fetch_wait_high = 0.3;
  /// The consumer's thread waiting for a CPU (FeedCounters::consumer_run_delay_s) at
  /// least this fraction of the interval, while it rarely waits for batches, makes the
  /// verdict consumer_starved.
  double consumer_run_delay_high = 0.2;
  /// Intervals with less than this many seconds after start-up (the first batch), or
  /// with no batch delivered, give kUnknown.
  double min_interval_s = 0.05;
  /// A tracker changes its verdict only after this many consecutive intervals agree.
  unsigned confirm_intervals = 2;
  /// CPUs the loader could use (for "more threads" advice); 0: the CPUs this process may
  /// keep busy (affinity mask, capped by the cgroup CPU quota).
  unsigned cpus_available = 0;
};

struct Verdict {
  Bottleneck bottleneck = Bottleneck::kUnknown;  ///< smoothed (tracker) or raw (diagnose)
  Bottleneck raw = Bottleneck::kUnknown;         ///< this interval's own verdict
  /// One line with the numbers: "decode bound: 8 threads 97% busy, consumer waited 31%,
  /// 0.2 of 4 slots ready, 12.0 records queued per thread".
  std::string evidence;
  /// The next step: "add decode threads (8 in use, 16 CPUs available)", ...
  std::string advice;
  FeedFigures figures;  ///< the interval the raw verdict was made on
  uint64_t intervals = 0;  ///< tracker: intervals seen so far
  /// {"bottleneck":"decode","raw":"decode","evidence":"...","advice":"...",
  ///  "samples_per_s":..,"interval_s":..,"consumer_wait_frac":..,"decode_busy_frac":..,
  ///  "decode_threads":..,"decode_queue_avg":..,"io_busy_frac":..,"io_engine_busy_frac":..,
  ///  "copy_busy_frac":.. (null without staging),"slots_ready_avg":..,"slots":..,
  ///  "network": null for a local dataset, else {"bytes_per_s":..,"requests_per_s":..,
  ///  "requests_in_flight_avg":..,"fetch_wait_frac":..,"hit_rate":.. (null: no shard
  ///  read),"cache_bytes":..,"cache_limit":..}}
  /// One object, no newline: one JSON line per report.
  std::string to_json() const;
  /// "decode bound: ... -> next: ..."
  std::string summary() const;
};

/// The verdict of one interval. `current`: the verdict in force (thresholds lean towards
/// it by options.hysteresis); kUnknown for none.
Verdict diagnose(const FeedFigures& f, const DiagnoseOptions& options = {},
                 Bottleneck current = Bottleneck::kUnknown);
/// Writes the verdict's bottleneck, evidence and advice into `s` (its JSON and Python's
/// stats() carry them).
void record_verdict(LoaderStats& s, const Verdict& v);

/// Smooths verdicts over a series of cumulative snapshots of one loader. The first
/// verdict is taken as it comes; later ones replace it only after confirm_intervals
/// consecutive intervals agree. A snapshot whose counters went backwards (new epoch)
/// starts a new interval series without dropping the verdict.
class BottleneckTracker {
 public:
  explicit BottleneckTracker(DiagnoseOptions options = {});
  /// Diagnoses the interval since the previous snapshot (the whole run for the first).
  const Verdict& update(const LoaderStats& cumulative);
  /// Same for cumulative figures (e.g. with a copy stage filled in).
  const Verdict& update(const FeedFigures& cumulative);
  /// The verdict in force (kUnknown before the first useful interval).
  const Verdict& current() const noexcept { return current_; }

 private:
  DiagnoseOptions options_;
  std::optional<FeedFigures> last_;
  Verdict current_;
  Bottleneck candidate_ = Bottleneck::kUnknown;
  unsigned candidate_count_ = 0;
  uint64_t intervals_ = 0;
};

}  // namespace stoker
