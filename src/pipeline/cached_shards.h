// A loader over a remote dataset (LoaderOptions::path an http(s):// or s3:// URL):
// the dataset is opened on a ShardCache's local directory, and every shard the loader
// reads is acquired from the cache first.
//
// Pins: the loader's readers (Dataset's reader cache) and IO engine (add_file) keep a
// shard's descriptors open for the loader's lifetime, and a file evicted under an open
// descriptor keeps its blocks. So a shard, once acquired, stays pinned until the loader
// goes, and the cache must hold the whole dataset (checked at open).
//
// Threading: hold() may be called from any thread; prefetch_run() by the consumer
// thread at a run's start.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/order.h"
#include "stoker/remote.h"

namespace stoker::internal {

class CachedShards {
 public:
  /// Null when opt.path is not a URL. Throws kInvalidArgument without cache_dir or with
  /// a cache_limit below the dataset's size; what RemoteStore/ShardCache::open throw.
  static std::shared_ptr<CachedShards> open(const LoaderOptions& opt);

  /// The dataset directory to open (MANIFEST, shards as they arrive).
  const std::string& local_dir() const { return cache_->local_dir(); }

  /// Tells the cache this rank's shards in the order the run first reads them (each
  /// once: a shard read before stays pinned). `rows_of_records`: the order's units are
  /// rows of records (token data) rather than records.
  void prefetch_run(const EpochOrder& order, const RankSchedule& sched, const Dataset& dataset, bool rows_of_records);

  /// Shard s is in place, checked and pinned (downloaded first if it is not).
  void hold(size_t s);

  /// The cache's figures, with `hits` also counting, once per run, each shard a run
  /// read that this loader held already (hold() then asks the cache nothing).
  CacheStats stats() const {
    CacheStats s = cache_->stats();
    s.hits += held_hits_.load();
    return s;
  }

 private:
  std::shared_ptr<ShardCache> cache_;
  std::mutex mu_;
  std::vector<ShardCache::Pin> pins_;
  std::vector<uint64_t> touched_;  // the run that last read each shard
  // The run in progress: bumped by each prefetch_run() but the first, so shards held
  // while the loader opens (token data) count with its first run.
  uint64_t run_ = 1;
  bool first_run_ = true;
  std::atomic<uint64_t> held_hits_{0};
};

}  // namespace stoker::internal
