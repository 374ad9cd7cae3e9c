// The loader's adapter to a remote dataset (LoaderOptions::path an http(s):// or s3://
// URL): the dataset is opened on a ShardCache's local directory, and a shard is acquired from
// the cache (downloaded first when it is not there) before the loader reads it.
//
// Holding: the loader holds a shard (a ShardCache::Pin, the Dataset's cached reader and
// the IO engine's descriptor) only while it uses it, counted per record: use() when a
// read of one of its records is planned, release() once that record is decoded (or
// given up). A shard nobody uses is idle; idle shards stay held only while the room
// the prefetch window does not need allows (they are the likeliest to be read again
// soon), least recently used closed first. Closing a shard closes its descriptors
// first (IoEngine::remove_file, Dataset::close_shard), then lets the Pin go: a file
// evicted under an open descriptor would keep its blocks, and the cache would exceed
// its limit on disk. So the cache may evict everything but the shards in use, the
// prefetch window (the shards needed next) and a few idle ones, and cache_limit needs
// to hold only the largest shard (ShardCache::open checks that, naming both sizes).
//
// Room: as many shards fit as the limit holds of the largest ones. The loader holds at
// most that many (all of them when the whole dataset fits, idle ones never closed); the
// prefetch window (ShardCache shrinks it to fit) gives its room up to an acquire that
// needs it. When every shard the loader holds is in use and one more would not fit,
// use() returns false: the reader thread submits what it planned, reaps, lets the
// decoders finish, and asks again (never waiting for room while its own reads hold it).
// A shard read again later in the run (a shuffle) is acquired again, and downloaded
// again when it was evicted meanwhile.
//
// The MANIFEST is fetched once, when the adapter opens: the cache takes that copy, and
// the loader opens the dataset on it (manifest()).
//
// Records by ranged GET (LoaderOptions::remote_reads, chosen once the schema is known):
// no shard is held or prefetched; use() and release() do nothing; the reader thread
// reads through make_record_engine() and takes record locations from location(), each
// shard's index fetched (header, trailer, index: three small GETs) on its first use and
// kept for the loader's life.
//
// Threading: use() and the close callbacks on the run's reader thread; release() and
// location() on any thread; prefetch_run() and end_run() by the consumer thread with no
// run thread running; pin() and choose_reads() at open.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/io.h"
#include "stoker/order.h"
#include "stoker/remote.h"

namespace stoker::internal {

/// The loader's options for a remote dataset (LoaderOptions' of the same names).
struct CachedShardsOptions {
  std::string url;              ///< the dataset's URL (path)
  std::string cache_dir;        ///< required
  uint64_t cache_limit = 0;     ///< 0: the dataset's size
  unsigned cache_prefetch = 4;
  RemoteOptions remote;
  uint64_t max_record_bytes = 256ull << 20;
};

class CachedShards {
 public:
  /// Null when o.url is not a URL. Throws kInvalidArgument without cache_dir;
  /// what RemoteStore/ShardCache::open throw (a cache_limit below the largest shard is
  /// kInvalidArgument naming the limit and the shard's size).
  static std::shared_ptr<CachedShards> open(const CachedShardsOptions& o);

  /// The dataset directory to open (MANIFEST, shards as they arrive).
  const std::string& local_dir() const { return cache_->local_dir(); }
  /// The dataset's manifest, as fetched when the adapter opened.
  const Manifest& manifest() const noexcept { return cache_->manifest(); }

  /// Whole shards or records by ranged GET, as `asked` says, for a dataset of records
  /// (`tokens` false) or token data read in `order` (a global shuffle of records through
  /// a cache that cannot hold the dataset prefers records). kInvalidArgument: kRecords
  /// for token data.
  void choose_reads(RemoteReads asked, bool tokens, OrderKind order);
  bool record_reads() const noexcept { return records_; }
  /// Records by ranged GET: where record r of shard s lies (its index fetched on first
  /// use). Throws what RemoteShard::open throws (named URL, shard, reason).
  const RecordLocation& location(size_t s, uint64_t r);
  /// Records by ranged GET: record r of shard s's stored bytes fetched again, on their
  /// own (the first copy failed its checksum). Throws what RemoteStore::read throws.
  std::vector<uint8_t> fetch_record(size_t s, uint64_t r);
  /// Records by ranged GET: an IO engine whose files are the dataset's shard objects
  /// (add_file takes a shard's manifest name).
  std::unique_ptr<IoEngine> make_record_engine(unsigned queue_depth) const;
  /// Shard s as errors name it: its URL.
  std::string shard_url(size_t s) const { return store_->object_url(cache_->manifest().shards.at(s).name); }

  /// fn(record) for each record a unit of the order reads.
  using UnitRecords = std::function<void(uint64_t unit, const std::function<void(uint64_t record)>& fn)>;
  /// Tells the cache this rank's shards in the order the run reads them (a shard read
  /// again after others have been read since is listed again). `rows_of_records`: the
  /// order's units are rows of records (token data) rather than records. `records_of`
  /// (when set): the units are made of records from anywhere (packed rows, padded
  /// batches), each unit's records as it says.
  void prefetch_run(const EpochOrder& order, const RankSchedule& sched, const Dataset& dataset, bool rows_of_records,
                    const UnitRecords& records_of = nullptr);

  /// At open, outside any run: shard s in place and pinned while the Pin lives (close
  /// the Dataset's reader of it before letting the Pin go).
  ShardCache::Pin pin(size_t s) { return cache_->acquire(s); }

  /// Closes a held shard's descriptors (the IO engine's file, the Dataset's reader).
  using CloseFn = std::function<void(size_t shard)>;
  /// One more use of shard s (a read of one of its records planned), holding it first
  /// when it is not held; idle shards past the room are closed with `close` first. False
  /// when s is not held and every shard held is in use at the most the limit allows:
  /// let uses finish (release) and ask again. Throws what ShardCache::acquire throws.
  bool use(size_t s, const CloseFn& close);
  /// One use of shard s is over. Any thread.
  void release(size_t s);
  /// Waits until a release() or `timeout`.
  void wait_release(std::chrono::milliseconds timeout);
  /// No run thread running: uses a stopped run left (reads and decodes it dropped) are
  /// over; its shards are idle.
  void end_run();

  /// Shards the loader holds at most (as many of the largest as fit, at least 1).
  size_t max_held() const noexcept { return hard_; }
  /// Shards held now (tests, stats).
  size_t held() const;

  /// The cache's figures, with `hits` also counting, once per run, each shard a run
  /// used that this loader held already (use() then asks the cache nothing).
  CacheStats stats() const {
    CacheStats s = cache_->stats();
    s.hits += held_hits_.load();
    s.wait_s += static_cast<double>(record_wait_ns_->load()) / 1e9;
    return s;
  }

 private:
  struct Shard {
    ShardCache::Pin pin;
    uint64_t uses = 0;
    uint64_t idle_since = 0;  // tick_ when its last use ended: least recently used first
    uint64_t used_in_run = 0;  // run_ when last used
  };
  /// mu_ held: closes the least recently used idle shard other than `keep`; false when
  /// there is none.
  bool close_lru_idle_locked(size_t keep, const CloseFn& close);

  std::string url_;  // redacted: for messages
  std::shared_ptr<RemoteStore> store_;
  std::shared_ptr<ShardCache> cache_;
  ShardReaderOptions reader_opt_;
  // Records by ranged GET: the shard indexes fetched so far (index_mu_), and the time the
  // reader blocked on record fetches (the fetch wait of stats()).
  bool records_ = false;
  mutable std::mutex index_mu_;
  std::vector<std::shared_ptr<const RemoteShard>> indexes_;
  std::shared_ptr<std::atomic<uint64_t>> record_wait_ns_ = std::make_shared<std::atomic<uint64_t>>(0);
  size_t soft_ = 1;  // held shards beyond which idle ones are closed (room less the window)
  size_t hard_ = 1;  // held shards at most (room)
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::vector<Shard> shards_;
  std::vector<size_t> held_;  // shards with a pin
  size_t idle_ = 0;           // held shards with no use
  uint64_t tick_ = 0;
  uint64_t releases_ = 0;
  // The run in progress: bumped by each prefetch_run() but the first.
  uint64_t run_ = 1;
  bool first_run_ = true;
  std::atomic<uint64_t> held_hits_{0};
};

}  // namespace stoker::internal
