// The IO engine: reads byte ranges of shard files into caller-provided buffers.
//
// The loader's first stage turns "read record r of shard s" into bytes in memory as
// fast as the storage allows, in any order. An IoEngine takes batches of reads
// (file id, offset, length, destination, tag), keeps up to `queue_depth` of them in
// flight, and hands back one completion per request carrying the request's tag.
//
// Two implementations:
//  - "uring": io_uring (liburing) with registered files, registered (fixed) buffers
//    from one aligned slab, O_DIRECT where the filesystem accepts it, batched submits;
//  - "pread": a few threads doing pread(2), used when io_uring is refused (ENOSYS,
//    EPERM under seccomp, RLIMIT_MEMLOCK) or when forced.
// Both continue short reads until the requested length or EOF, retry EINTR/EAGAIN, and
// report real errors per request, naming the file and offset. Every fallback (no
// io_uring, no O_DIRECT, no fixed buffers) is reported once per process on stderr and
// in IoStats::fallback_reason.
//
// Threading: an IoEngine is NOT thread-safe. One thread (the loader's `stoker-io`
// thread) calls add_file/submit/reap/cancel_all; construction and destruction may
// happen on another thread as long as calls do not overlap. IoBuffers may be released
// on any thread, also after the engine that allocated them is gone.
//
// O_DIRECT: when direct() is true, offset, length and buffer address of a request
// should be multiples of kDirectAlignment (use align_range / plan_reads and alloc());
// a request that is not is still served correctly, through a buffered descriptor of the
// same file, and counted in IoStats::unaligned_reads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace stoker {

namespace internal {
class SlabAllocator;
}

/// Alignment of O_DIRECT requests (offset, length, buffer address), in bytes.
inline constexpr uint32_t kDirectAlignment = 4096;

enum class IoEngineKind {
  kAuto,   ///< io_uring when the kernel allows it, else pread (reported); STOKER_IO overrides
  kUring,  ///< io_uring or fail (kUnavailable naming what refused it)
  kPread,  ///< the pread thread pool
};

const char* io_engine_kind_name(IoEngineKind kind) noexcept;  ///< "auto", "uring", "pread"
/// Parses "auto", "uring", "pread". Throws kInvalidArgument.
IoEngineKind io_engine_kind_from_name(const std::string& name);

struct IoOptions {
  /// Which engine. kAuto is overridden by the environment variable STOKER_IO=uring|pread
  /// (an explicit kUring/kPread is not).
  IoEngineKind engine = IoEngineKind::kAuto;
  /// uring: reads in the kernel at most (1..4096); requests beyond it wait inside the
  /// engine. The pread engine has pread_threads reads in flight instead.
  unsigned queue_depth = 64;
  /// Open files with O_DIRECT when the filesystem accepts it (probed per file with an
  /// aligned read); otherwise buffered, reported once. A Loader reads a dataset whose
  /// records average under one block (kDirectAlignment) through the page cache all the
  /// same (IoStats::unaligned_reads counts them).
  bool direct = true;
  /// Bytes of the aligned slab that alloc() carves buffers from (uring: registered as
  /// one fixed buffer, so reads into it use IORING_OP_READ_FIXED). Rounded up to 4 KiB;
  /// 0 disables the slab (alloc() then uses posix_memalign).
  size_t slab_bytes = 64u << 20;
  /// Worker threads of the pread engine (1..256): its effective queue depth. 4 keeps the
  /// fallback light; on fast NVMe a random-read workload wants about queue_depth threads.
  unsigned pread_threads = 4;
  /// Bytes per second the engine may read, 0 for no limit (>= 0, finite). A positive
  /// limit rehearses slower storage: requests are released so that bytes requested stay
  /// within it (a token bucket holding at most max(1 request, 1/10 s) of credit); a
  /// Loader then shows how its feed behaves when reads are the bottleneck.
  double limit_bytes_per_s = 0;
  /// Seconds each read takes at least, 0 for none (>= 0, at most 60). A positive latency
  /// rehearses storage whose reads are slow but run many at once (networked block
  /// storage, an object store): a read is handed back that long after it was issued, and
  /// the queue depth (or a lower queue limit) bounds how many are out, so the rate is at
  /// most queue_limit / latency reads per second.
  double read_latency_s = 0;
  /// A Loader's records under a block (those it reads through the page cache) are taken
  /// straight from a read-only mapping of their shard, with no read and no copy, when
  /// the shard is in the page cache at the run's start (99 % of its pages; asked once a
  /// run; a page missing is read back by the fault of the decoder that touches it).
  /// Other shards, remote datasets and rehearsed storage (limit_bytes_per_s,
  /// read_latency_s, LoaderOptions::wrap_io) are read by the engine. The mapped pages
  /// are the page cache's, shared and reclaimable, though the process's RSS counts
  /// those it touches. IoStats::mapped_records counts what was taken so.
  bool map_cached = true;
};

/// One read: `length` bytes of file `file` (an id from add_file) at `offset` into `buf`.
/// `buf` must stay valid until the request's completion was reaped (or the engine was
/// destroyed). `tag` is returned in the completion untouched.
struct ReadRequest {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  void* buf = nullptr;
  uint64_t tag = 0;
};

struct ReadCompletion {
  uint64_t tag = 0;
  /// Bytes read (== length unless the file ended first) or -errno. -ECANCELED for
  /// requests dropped by cancel_all() before they reached the kernel.
  int64_t result = 0;
  /// When result < 0: "read /data/shard-00003.stk offset 123 length 4096: Input/output
  /// error (errno 5)". Empty otherwise.
  std::string error;
};

struct IoStats {
  uint64_t requests = 0;     ///< requests completed (any result)
  uint64_t bytes = 0;        ///< bytes read by completed requests
  uint64_t retries = 0;      ///< resubmissions after EINTR/EAGAIN
  uint64_t short_reads = 0;  ///< partial transfers that were continued
  uint64_t errors = 0;       ///< completions with result < 0 (cancellations excluded)
  uint64_t cancelled = 0;    ///< completions with -ECANCELED
  uint64_t fixed_reads = 0;  ///< uring: reads issued as READ_FIXED (buffer in the slab)
  uint64_t unaligned_reads = 0;  ///< reads served buffered although the file is O_DIRECT
  double busy_s = 0;         ///< seconds with at least one request in flight
  unsigned max_inflight = 0; ///< most requests in the kernel/workers at once
  std::string engine;        ///< "uring" or "pread" (a wrapping engine keeps the inner name)
  bool direct = false;       ///< every file so far is read with O_DIRECT
  bool fixed_buffers = false;   ///< uring: the slab is registered
  bool registered_files = false;  ///< uring: files are registered
  unsigned queue_depth = 0;
  unsigned queue_limit = 0;     ///< reads allowed in flight now (set_queue_limit), <= queue_depth
  /// Seconds during which reads waited in the engine for room in its queue (queue_limit
  /// of them in flight): a large share of the time says the limit, not the storage,
  /// holds the reads back (the tuner of threads="auto" raises it then).
  double queue_full_s = 0;
  /// A Loader's records taken from a mapping of their cached shard instead of read
  /// (IoOptions::map_cached), their bytes, and the size of the shards mapped now.
  uint64_t mapped_records = 0;
  uint64_t mapped_bytes = 0;
  uint64_t mapped_shard_bytes = 0;
  std::string fallback_reason;  ///< why something slower is used; empty when nothing is
};

/// A buffer from IoEngine::alloc(): kDirectAlignment-aligned, size rounded up to it.
/// Move-only; null when default-constructed or moved from. Frees itself (back to the
/// slab, or free()) on any thread, also after its engine is gone.
class IoBuffer {
 public:
  IoBuffer() noexcept = default;
  IoBuffer(IoBuffer&& other) noexcept;
  IoBuffer& operator=(IoBuffer&& other) noexcept;
  IoBuffer(const IoBuffer&) = delete;
  IoBuffer& operator=(const IoBuffer&) = delete;
  ~IoBuffer();

  uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  std::span<uint8_t> span() const noexcept { return {data_, size_}; }
  explicit operator bool() const noexcept { return data_ != nullptr; }
  /// True when the buffer lies in the engine's slab (uring: fixed-buffer reads).
  bool in_slab() const noexcept { return slab_ != nullptr; }
  void reset() noexcept;

  /// posix_memalign'd buffer not tied to any engine. Throws kResourceExhausted.
  static IoBuffer aligned(size_t bytes, size_t alignment = kDirectAlignment);

 private:
  friend class internal::SlabAllocator;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<internal::SlabAllocator> slab_;  // null: malloc'd
};

class IoEngine {
 public:
  /// Cancels what is in flight and waits for the kernel/workers to let go of every
  /// buffer before freeing anything. Completions not reaped are dropped.
  virtual ~IoEngine();

  /// Opens `path` read-only (O_DIRECT if asked and accepted) and registers it.
  /// Returns its id: the lowest id a remove_file freed, else 0, 1, 2, ... in call order.
  /// The file stays open until remove_file or the engine's destruction. Throws
  /// kNotFound / kIoError / kResourceExhausted naming the path.
  virtual uint32_t add_file(const std::string& path) = 0;
  /// Closes file `file` (an io_uring engine clears its registered slot first) and frees
  /// its id for a later add_file. No read of it may be queued or in flight (reap them
  /// first). A remote dataset's loader closes a shard this way before the cache may
  /// evict it: an unlinked file keeps its blocks while a descriptor is open. Throws
  /// kInvalidArgument for an unknown or removed id.
  virtual void remove_file(uint32_t file) = 0;
  /// Size of file `file` when it was added.
  virtual uint64_t file_size(uint32_t file) const = 0;
  /// Path of file `file`.
  virtual const std::string& file_path(uint32_t file) const = 0;

  /// Queues reads. Never waits for completions: up to queue_depth go to the kernel now,
  /// the rest as earlier ones complete (during reap). Throws kInvalidArgument for an
  /// unknown file id or a null buffer with a non-zero length.
  virtual void submit(std::span<const ReadRequest> reqs) = 0;
  /// Appends completions to `out` until at least `min_complete` arrived (fewer when
  /// fewer are outstanding) or `timeout` passed. Returns how many were appended.
  virtual size_t reap(std::vector<ReadCompletion>& out, size_t min_complete,
                      std::chrono::milliseconds timeout) = 0;
  /// Completes every queued request with -ECANCELED and asks the kernel to cancel the
  /// reads in flight; those still complete (with data or -ECANCELED) through reap().
  virtual void cancel_all() = 0;
  /// Requests submitted and not yet reaped.
  virtual size_t inflight() const = 0;
  /// Lets at most `n` reads be in flight from now on (clamped to 1..queue_depth; the
  /// pread engine: also to pread_threads): reads beyond it wait in the engine, as they
  /// do beyond queue_depth. Lowering it lets the reads already in flight finish. Returns
  /// the limit in force (IoStats::queue_limit). The default, for an engine that cannot
  /// change it, changes nothing and returns 0; a wrapping engine forwards the call.
  virtual unsigned set_queue_limit(unsigned n);
  virtual IoStats stats() const = 0;
  /// True when files are read with O_DIRECT: callers should send aligned ranges.
  virtual bool direct() const = 0;
  /// An aligned buffer of at least `bytes`: from the slab when it has room (fixed-buffer
  /// reads on uring), posix_memalign otherwise. Throws kResourceExhausted.
  virtual IoBuffer alloc(size_t bytes) = 0;
};

/// Makes the engine `options` ask for. kAuto (and STOKER_IO unset) tries io_uring and
/// falls back to pread with one plain report (stderr once per process, and
/// stats().fallback_reason): what was refused, by what, what is used instead, how to
/// enable the fast path. A forced kUring that is refused throws kUnavailable with that
/// report. A positive limit_bytes_per_s wraps the engine in that rate limit. Throws
/// kInvalidArgument for out-of-range options or a bad STOKER_IO.
std::unique_ptr<IoEngine> make_io_engine(const IoOptions& options = {});

/// Why io_uring cannot be used in this process ("" when it can): the same sentence
/// make_io_engine reports. Probes with a small ring.
std::string io_uring_unavailable_reason();

// ---- aligned range planning --------------------------------------------------------

/// An aligned read covering a record: read [offset, offset+length); the record's bytes
/// start at `skip` inside it.
struct AlignedRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t skip = 0;
};

/// The `alignment`-aligned range enclosing [offset, offset+len), not extending past
/// `file_size` rounded up to `alignment` (a read of it may come back short at EOF but
/// always holds the record). alignment must be a power of two (1 = no alignment).
/// Throws kInvalidArgument when the record does not fit in the file.
AlignedRange align_range(uint64_t offset, uint64_t len, uint64_t file_size,
                         uint32_t alignment);

/// A record to read: bytes [offset, offset+length) of file `file` (size file_size).
struct RecordRange {
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t file_size = 0;
};

struct PlanOptions {
  uint32_t alignment = kDirectAlignment;  ///< 1 for buffered engines
  /// Merge neighbours (adjacent in the given order, same file, forward on disk) into
  /// one read while it stays at most this long; 0 disables coalescing.
  uint64_t max_request_bytes = 1u << 20;
  /// Largest hole between two merged records that is read and thrown away.
  uint64_t max_gap_bytes = 64u << 10;
};

/// Reads that fetch a sequence of records, in the same order.
struct ReadPlan {
  struct Read {
    uint32_t file = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint32_t first_record = 0;  ///< index into the input of its first record
    uint32_t record_count = 0;  ///< records first_record .. first_record+count-1
  };
  struct Slice {
    uint32_t read = 0;  ///< index into reads
    uint64_t skip = 0;  ///< where the record starts inside that read's buffer
  };
  std::vector<Read> reads;
  std::vector<Slice> records;  ///< one per input record
  uint64_t max_read_bytes = 0;
};

/// Plans aligned, coalesced reads for `records` in order. A record longer than
/// max_request_bytes gets a read of its own.
ReadPlan plan_reads(std::span<const RecordRange> records, const PlanOptions& options = {});

}  // namespace stoker
