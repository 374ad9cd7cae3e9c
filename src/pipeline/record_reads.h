// The IO engine as the producers use it: opened on a run's reader thread, kept across
// runs (a ring, a registered slab and open files cost tens of milliseconds to set up,
// which every epoch's start should not pay again), drained and dropped when a run is
// stopped with reads in flight. Its figures are published for stats() on any thread.
//
// Threading: everything but stats() is called by the run's reader thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/mapped_shards.h"
#include "pipeline/producer.h"
#include "stoker/io.h"

namespace stoker::internal {

class RecordReads {
 public:
  /// Bytes of IO slab one record's read takes, on average over `ds`'s records: what
  /// a producer's `slab_need` counts per record in flight.
  static uint64_t slab_bytes_per_record(const Dataset& ds);
  /// `slab_need`: bytes of reads the producer keeps in flight at most.
  RecordReads(const Context& ctx, uint64_t slab_need);
  /// Opens the engine if it is not open; a failure goes to run.fail (returns false).
  bool open(Run& run);
  IoEngine& engine() { return *engine_; }
  /// Sets the engine's queue limit to `n` unless it is 0 or already in force.
  void follow_queue_limit(unsigned n) {
    if (n == 0 || n == limit_) return;
    limit_ = n;
    engine_->set_queue_limit(n);
  }
  /// The record's range in the engine's terms (opens the shard lazily, checking it
  /// against the manifest: a missing or replaced shard throws, naming it).
  /// A remote dataset's shard is held from here until done(shard) (CachedShards::use):
  /// call it once the record is decoded or given up. nullopt when the shard cannot be
  /// held until uses end: submit what is planned, reap, wait_for_room(), ask again.
  std::optional<RecordRange> range(size_t shard, uint64_t record);
  /// Shard `shard`'s file mapped, when its records are taken from the mapping this run
  /// (IoOptions::map_cached; see io/mapped_shards.h); empty: read them through range().
  std::span<const uint8_t> mapped(size_t shard) {
    if (!maps_) return {};
    if (auto known = maps_->answered(shard)) return *known;
    return maps_->at(shard, ctx_.dataset->shard_path(shard));
  }
  /// `records` records of `bytes` in all were taken from a mapping (counted in stats()).
  void count_mapped(uint64_t records, uint64_t bytes) {
    mapped_records_ += records;
    mapped_bytes_ += bytes;
  }
  /// The use range() counted for a record of `shard` is over. Any thread.
  void done(size_t shard) const {
    if (ctx_.cached) ctx_.cached->release(shard);
  }
  /// Waits a little for a use to end (after range() said nullopt and nothing is in flight).
  void wait_for_room() const;
  PlanOptions plan_options() const;
  void publish();
  /// publish() at most every 20 ms: the tuner and the interval verdicts read the engine's
  /// figures (queued waits, busy time) while a run is going.
  void publish_if_due() {
    const auto now = Clock::now();
    if (now - published_ < std::chrono::milliseconds(20)) return;
    published_ = now;
    publish();
  }
  /// End of a run on the reader thread: publishes the figures; a run stopped with reads
  /// in flight cancels and drains them (no buffer freed under the kernel) and drops the
  /// engine, which the next run makes anew.
  void close_run();
  IoStats stats() const;

 private:
  const Context& ctx_;
  uint64_t slab_need_;
  uint64_t mean_record_bytes_;  // of the dataset's records, as stored
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<MappedShards> maps_;  // null: every record is read by the engine
  uint64_t mapped_records_ = 0, mapped_bytes_ = 0;
  unsigned limit_ = 0;  // the queue limit last set on engine_ (0: as it opened)
  Clock::time_point published_{};
  void close_shard(size_t shard);  // CachedShards' close callback
  std::vector<int64_t> file_ids_;  // shard -> engine file id
  CachedShards::CloseFn close_;
  mutable std::mutex stats_mu_;
  IoStats stats_;
};

/// What a read completion means for a record ending `need` bytes into the read: nothing
/// when its bytes are all there, else the error (without the record's name).
std::optional<Error> read_failure(const ReadCompletion& d, uint64_t need);

}  // namespace stoker::internal
