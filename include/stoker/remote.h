// Remote datasets: http(s):// and s3:// shards through a node-local cache.
//
// A remote dataset is the same directory a local one is (MANIFEST + shard files),
// served by a web server (`http://host/path/to/dataset`) or kept in an object store
// (`s3://bucket/prefix`). Three parts, usable on their own:
//
//  - RemoteStore fetches bytes of the dataset's objects with libcurl's multi interface:
//    many ranged GETs in flight at once, each retried on timeouts, connection resets,
//    5xx, 429 and cut bodies with exponential backoff and full jitter, a bounded number
//    of times (a cut body resumes where it stopped). A persistent failure throws an
//    Error naming the URL, the object and the HTTP status. s3:// requests are signed
//    with SigV4 (CURLOPT_AWS_SIGV4); credentials, region and endpoint come from
//    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (or
//    AWS_DEFAULT_REGION), AWS_ENDPOINT_URL and the profile AWS_PROFILE (default
//    "default") of ~/.aws/credentials and ~/.aws/config. With an endpoint, addressing
//    is path-style (endpoint/bucket/key); without, virtual-hosted AWS. Credentials
//    never appear in errors, logs or stats (userinfo in http URLs is shown as "***").
//
//  - ShardCache keeps whole shards in a node-local directory (`cache_dir`, NVMe)
//    within `cache_limit` bytes. A shard is downloaded by parallel ranged GETs into
//    `<name>.part`, every record's CRC is checked against the manifest (the same
//    verify_shard that `stoker verify` runs), and only then is it renamed to `<name>`:
//    a file under a shard's name is always whole and checked. A shard failing its CRCs
//    is fetched again once, then reported (kDataLoss). acquire() returns a Pin whose
//    path the normal local path (ShardReader, the io_uring engine) reads; while any Pin
//    or the prefetch window holds a shard it is never evicted. Eviction is least
//    recently used (file mtime, touched on each acquire).
//    Processes that share `cache_dir` (torchrun ranks on one node) coordinate through
//    flock(2) on per-shard lock files: a downloader holds the shard's lock exclusively,
//    readers and the prefetch window hold it shared, an evictor takes it exclusively
//    without waiting or skips the shard. Each shard is therefore fetched once per node,
//    no daemon runs, and a killed process leaves only lock files (its locks die with
//    it) and at worst a `.part` file that nothing reads and the next opener removes.
//    A cache_limit smaller than the largest shard is kInvalidArgument at open; a limit
//    smaller than the prefetch window shrinks the window (the window never takes the
//    room the next acquire() needs).
//
//  - RemoteShard reads single records by ranged GET (header, trailer and index once),
//    for a global shuffle whose working set the cache cannot hold. Every record's CRC
//    is checked before it is returned; a mismatch is fetched again once, then kDataLoss.
//
//    The limit counts the files of one dataset's cache directory (<dir>/<key>); each
//    dataset kept under one `dir` has its own limit. An evicted file's blocks are freed
//    when its last descriptor closes: close a shard's descriptors before its Pin goes.
//
// Loader integration: the loader opens a ShardCache, tells it the shard sequence of the
// epoch (prefetch(), a pure function of seed and epoch), opens Dataset on local_dir()
// (its MANIFEST is the remote one) and acquires a shard before reading it: the Pin
// keeps the file in place while io_uring reads it and the records are decoded. It then
// closes the shard's descriptors and lets the Pin go (keeping a few idle shards while
// the room allows), so a cache_limit of a few shards serves a dataset of any size.
// With LoaderOptions::remote_reads records (auto: a global shuffle whose shards the
// cache cannot all hold) it reads each record by its own ranged GET through the same
// RemoteStore instead, and the cache holds only the MANIFEST.
//
// Threading: RemoteStore, ShardCache and RemoteShard are safe to use from many threads.
// A Pin may be released on any thread. Stats are snapshots.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/shard.h"

namespace stoker {

// diagnose.h (which the doctor's callers include) holds Check; it includes loader.h,
// which includes this header for RemoteOptions.
struct Check;

/// True for "http://", "https://" and "s3://" locations.
bool is_remote_url(std::string_view location);

/// `url` with any userinfo ("user:pass@") replaced by "***@": safe to print.
std::string redact_url(std::string_view url);

/// How a remote dataset's records are fetched (LoaderOptions::remote_reads).
enum class RemoteReads { kAuto, kShards, kRecords };
const char* remote_reads_name(RemoteReads r) noexcept;  ///< "auto", "shards", "records"
RemoteReads remote_reads_from_name(const std::string& s);  ///< throws kInvalidArgument

struct RemoteOptions {
  /// Ranged GETs in flight at once per fetch call (1..256).
  unsigned connections = 16;
  /// Bytes per ranged GET when a shard is downloaded (>= 64 KiB).
  uint64_t part_bytes = 4ull << 20;
  /// Tries per request, the first included (1..100).
  unsigned max_attempts = 8;
  /// Backoff before retry n (1-based): uniform in [0.5, 1) * min(backoff_max,
  /// backoff_base * 2^(n-1)).
  std::chrono::milliseconds backoff_base{100};
  std::chrono::milliseconds backoff_max{5000};
  std::chrono::milliseconds connect_timeout{5000};
  /// A transfer slower than low_speed_bytes/s for this long is a timeout (retried).
  std::chrono::milliseconds stall_timeout{15000};
  uint64_t low_speed_bytes = 1024;
  /// The retry budget, all requests of the store together: once nothing has succeeded
  /// for this long, a failing request is given up on (no more retries) and its error
  /// (URL, status or fault) thrown, however many requests are in flight or queued. A
  /// persistent fault (every request 503, reset or cut) so surfaces within about this
  /// long, whatever the batch size. >= 1 s.
  std::chrono::milliseconds timeout{60000};
  /// Writes (open_dataset_store): an object larger than this is uploaded in parts of
  /// this size (multipart), each retried on its own; >= 5 MiB, S3's least part.
  uint64_t upload_part_bytes = 32ull << 20;
  /// s3://: the profile of ~/.aws/{credentials,config}; "" = $AWS_PROFILE or "default".
  std::string aws_profile;
};

struct RemoteStats {
  uint64_t bytes_fetched = 0;    ///< body bytes received (all requests)
  uint64_t requests = 0;         ///< requests finished (any outcome)
  uint64_t retries = 0;          ///< requests that were tried again
  uint64_t failures = 0;         ///< requests given up on
  uint64_t requests_in_flight = 0;  ///< now
  double busy_s = 0;             ///< seconds with at least one request in flight
  /// Requests in flight integrated over time (request-seconds): over an interval,
  /// its growth divided by the interval's length is the mean number in flight.
  double request_s = 0;
  /// The server answered a ranged GET with the whole object (HTTP 200, as `python3 -m
  /// http.server` does): ranges are then read by whole-object GETs (cut short once the
  /// range is in) and shards downloaded by one GET each; a warning said so once.
  bool range_ignored = false;
  /// GETs of a whole object where a range was wanted (counted once range_ignored).
  uint64_t whole_fetches = 0;
  double bytes_per_s() const noexcept { return busy_s > 0 ? bytes_fetched / busy_s : 0; }
};

/// Fetches objects of one remote dataset location. Thread-safe.
class RemoteStore {
 public:
  /// Parses `url` and, for s3://, loads credentials/region/endpoint. Sends nothing.
  /// Throws kInvalidArgument for an unsupported or malformed URL or bad options.
  static std::shared_ptr<RemoteStore> open(const std::string& url, RemoteOptions options = {});
  virtual ~RemoteStore() = default;

  /// The dataset location as given, redacted.
  virtual const std::string& display_url() const = 0;
  /// Printable URL of object `name` (no credentials).
  virtual std::string object_url(const std::string& name) const = 0;

  /// A whole (small) object, e.g. the MANIFEST. Throws kNotFound (404) / kIoError.
  virtual std::string get(const std::string& name) = 0;
  /// Reads `length` bytes at `offset` of object `name` into `dst`, in parallel parts of
  /// part_bytes. `what` names the object in errors ("shard shard-00003.stk").
  virtual void read(const std::string& name, uint64_t offset, std::span<uint8_t> dst,
                    const std::string& what) = 0;
  /// Several ranges (of any objects) at once: ranges[i] lands in dsts[i].
  struct Range {
    std::string name;
    uint64_t offset = 0;
    std::span<uint8_t> dst;
    std::string what;
    /// Called on the calling thread as soon as this range's bytes are all in (before
    /// read_many returns or throws): a caller may use them while others still arrive.
    std::function<void()> on_done;
  };
  virtual void read_many(std::span<const Range> ranges) = 0;
  /// Writes bytes [0, size) of object `name` into `fd` (at the same offsets) by
  /// parallel ranged GETs.
  virtual void download(const std::string& name, uint64_t size, int fd, const std::string& what) = 0;
  /// Reads the manifest (`MANIFEST`), checking its CRC.
  virtual Manifest read_manifest() = 0;
  /// Whether the server honours Range: the first call asks for 16 bytes of `name` (an
  /// object of the dataset), later ones answer from what every request has seen. A
  /// server that answers ranges with whole objects makes reading records by ranged GET
  /// cost a whole shard each: the loader then reads whole shards (with a warning).
  virtual bool serves_ranges(const std::string& name) = 0;

  virtual RemoteStats stats() const = 0;
  virtual const RemoteOptions& options() const = 0;
};

struct CacheOptions {
  std::string dir;          ///< cache directory (created); datasets live in <dir>/<key>/
  uint64_t limit = 0;       ///< bytes of shard files (and downloads) kept at most; > 0
  unsigned prefetch = 4;    ///< shards fetched ahead of the last acquire (0 = none)
  unsigned fetch_threads = 2;  ///< shards downloading at once in the background (1..64)
  /// fdatasync each shard before it is renamed into place, so that after a power loss
  /// no file under a shard's name holds unwritten blocks. Off: the fill runs at page
  /// cache speed instead of the disk's durable-write speed, and a machine crash (not a
  /// process kill: that is safe either way) may leave a shard that must be removed.
  bool fsync = true;
  /// How long acquire() waits for room (other pins) before kResourceExhausted.
  std::chrono::milliseconds wait_for_room{120000};
};

struct CacheStats {
  uint64_t hits = 0;        ///< acquire() found the shard in place
  uint64_t misses = 0;      ///< acquire() had to download or wait for a download
  uint64_t downloads = 0;   ///< shards this process downloaded
  uint64_t refetches = 0;   ///< downloads repeated after a CRC failure
  uint64_t evictions = 0;   ///< shard files this process removed for room
  uint64_t bytes_cached = 0;   ///< bytes under the cache's key when last scanned
  uint64_t limit = 0;          ///< CacheOptions::limit
  unsigned prefetch_window = 0;  ///< shards the window may hold (after shrinking)
  /// Seconds acquire() blocked for shards that were not in place (a download of its
  /// own or one in flight on a prefetch thread), summed over the calling threads.
  double wait_s = 0;
  RemoteStats remote;
  double hit_rate() const noexcept {
    return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
  }
};

class ShardCache {
 public:
  /// Holds shard `shard` in place while alive. Move-only; release on any thread.
  class Pin {
   public:
    Pin() = default;
    const std::string& path() const;
    size_t shard() const noexcept { return shard_; }
    explicit operator bool() const noexcept { return held_ != nullptr; }
    void reset() noexcept { held_.reset(); }

   private:
    friend class ShardCache;
    std::shared_ptr<const void> held_;
    const std::string* path_ = nullptr;
    size_t shard_ = 0;
  };

  /// Reads the remote manifest (unless the caller has it already: `manifest`, as read
  /// from `store`), stores it as <dir>/<key>/MANIFEST, removes stale `.part` files.
  /// Throws kInvalidArgument when limit < the largest shard.
  static std::shared_ptr<ShardCache> open(std::shared_ptr<RemoteStore> store, CacheOptions options,
                                          std::optional<Manifest> manifest = std::nullopt);
  ~ShardCache();

  const Manifest& manifest() const noexcept;
  /// <dir>/<key>: the cached dataset directory (MANIFEST + shards present).
  const std::string& local_dir() const noexcept;
  RemoteStore& store() noexcept;

  /// The shard sequence the caller will acquire, in order (may repeat shards; replaces
  /// any earlier sequence). Background threads fetch ahead of the last acquired
  /// position within the window and the limit.
  void prefetch(std::vector<size_t> order);
  /// Blocks until shard s is in place and checked; pins it. Throws what the fetch threw
  /// (named URL, shard, status), kDataLoss after a failed refetch, kResourceExhausted
  /// when no room frees up within wait_for_room.
  Pin acquire(size_t s);

  CacheStats stats() const;

 private:
  struct Impl;
  explicit ShardCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The store a dataset is written to and its parts committed in (dataset_store.h): a
/// local directory, or an s3:// prefix, whose objects are written by (multipart) PUT
/// with SigV4, the retries and the redaction of the reads. http(s):// is refused
/// (kInvalidArgument): it is read-only.
std::shared_ptr<DatasetStore> open_dataset_store(const std::string& where, RemoteOptions options = {});

/// One remote shard read record by record (ranged GETs), without the cache.
class RemoteShard {
 public:
  /// Fetches header, trailer and index of manifest entry `entry`, checks them (index
  /// CRC against the manifest too). Throws kDataLoss / kIoError / kNotFound.
  static std::shared_ptr<const RemoteShard> open(std::shared_ptr<RemoteStore> store, const ShardEntry& entry,
                                                 ShardReaderOptions options = {});
  const Schema& schema() const noexcept { return header_.schema; }
  const ShardHeader& header() const noexcept { return header_; }
  uint64_t record_count() const noexcept { return locations_.size(); }
  const RecordLocation& location(uint64_t i) const { return locations_.at(i); }
  /// Records `indices` fetched in parallel, CRCs checked, in the order asked.
  std::vector<Record> read_records(std::span<const uint64_t> indices) const;
  Record read_record(uint64_t i) const;

 private:
  RemoteShard() = default;
  void load();
  std::shared_ptr<RemoteStore> store_;
  ShardEntry entry_;
  ShardHeader header_;
  std::vector<RecordLocation> locations_;
  ShardReaderOptions options_;
};

// ---- doctor -----------------------------------------------------------------------

/// `stoker doctor --dataset URL`: three checks on a remote dataset, in order:
///  - remote_reachable: the MANIFEST arrives and parses (reading: shards, bytes, time);
///  - remote_latency: median time of small ranged GETs on a warm connection (what each
///    record costs when read by ranged GET instead of through the cache); it fails when
///    the server ignores Range (answers with whole objects);
///  - remote_bandwidth: parallel ranged GETs over up to `probe_bytes` of the shards
///    (what a cold epoch can be fed at, at most).
/// Never throws for network trouble: a failure is a kFail check naming it.
std::vector<Check> check_remote_dataset(const std::string& url, uint64_t probe_bytes = 128ull << 20,
                                        RemoteOptions options = {});

}  // namespace stoker
