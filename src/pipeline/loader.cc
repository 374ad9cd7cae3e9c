#include "stoker/loader.h"

#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <set>
#include <unordered_map>

#include "stoker/cpu.h"
#include "stoker/crc32c.h"
#include "stoker/dataset.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/json_text.h"

namespace stoker {

const char* on_error_name(OnError e) noexcept { return e == OnError::kSkip ? "skip" : "error"; }

OnError on_error_from_name(const std::string& s) {
  if (s == "error") return OnError::kError;
  if (s == "skip") return OnError::kSkip;
  throw_error(ErrorCode::kInvalidArgument, "on_error must be 'error' or 'skip', got '" + s + "'");
}

namespace {

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline uint64_t nanos(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

ElemType pixel_elem_type(PixelFormat f) {
  switch (f) {
    case PixelFormat::kU8HWC: case PixelFormat::kU8CHW: return ElemType::kUint8;
    case PixelFormat::kF32CHW: case PixelFormat::kF32HWC: return ElemType::kFloat32;
    case PixelFormat::kF16CHW: case PixelFormat::kF16HWC: return ElemType::kFloat16;
  }
  return ElemType::kUint8;
}
bool pixel_is_chw(PixelFormat f) {
  return f == PixelFormat::kU8CHW || f == PixelFormat::kF32CHW || f == PixelFormat::kF16CHW;
}
ElemType elem_of_dtype(DType d) {
  switch (d) {
    case DType::kUint16: return ElemType::kUint16;
    case DType::kUint32: return ElemType::kUint32;
    case DType::kInt32: return ElemType::kInt32;
    case DType::kInt64: return ElemType::kInt64;
    case DType::kNone: break;
  }
  return ElemType::kUint8;
}

// Where each tensor lives inside a slot's single allocation.
struct TensorLayout {
  std::string name;
  ElemType dtype;
  std::vector<int64_t> sample_shape;  // without the batch dimension
  size_t sample_bytes = 0;
  size_t offset = 0;  // in the slot
};

// Ring slots. Shared with the leases handed out in batches, so a slot's memory lives
// until the last lease on it is gone, even after the Loader.
struct Ring : std::enable_shared_from_this<Ring> {
  enum class State { kFree, kFilling, kReady, kLeased };
  struct Slot {
    uint8_t* mem = nullptr;
    State state = State::kFree;
  };
  std::mutex mu;
  // Two, so a batch being ready does not wake the producers and a slot coming back does
  // not wake the consumer: on a small machine every needless wake-up is a context switch
  // taken from the decoders.
  std::condition_variable cv;           // consumer side: batch ready, run failed, stop
  std::condition_variable producer_cv;  // producer side: slot freed, work queued, stop
  uint64_t consumer_waits_for = UINT64_MAX;  // the batch the consumer sleeps on, if any
  std::shared_ptr<SlotAllocator> alloc;
  size_t slot_bytes = 0;
  std::vector<std::unique_ptr<Slot>> slots;

  ~Ring() {
    for (auto& s : slots)
      if (s->mem) alloc->deallocate(s->mem, slot_bytes);
  }
  size_t add_slot_locked() {
    auto s = std::make_unique<Slot>();
    s->mem = static_cast<uint8_t*>(alloc->allocate(slot_bytes));
    slots.push_back(std::move(s));
    return slots.size() - 1;
  }
  void give_back(size_t id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      slots[id]->state = State::kFree;
    }
    producer_cv.notify_one();  // one producer can use one slot
  }
};

class RingLease final : public SlotLease {
 public:
  RingLease(std::shared_ptr<Ring> ring, size_t id) : ring_(std::move(ring)), id_(id) {}
  ~RingLease() override { ring_->give_back(id_); }

 private:
  std::shared_ptr<Ring> ring_;
  size_t id_;
};

struct Chunk;

// A token batch's row to copy: row `src_row` of one of its records into sample `j`.
struct RowCopy {
  uint32_t src_row, j;
};

struct Job {
  uint64_t k = 0;
  size_t slot = 0;
  uint8_t* mem = nullptr;  // the slot's memory, taken with the slot (the ring's list may grow meanwhile)
  std::vector<uint64_t> samples;
  std::mutex mu;
  std::exception_ptr error;
  std::atomic<uint64_t> record_bytes{0};  // images: added per sample; tokens: set when planned
  std::vector<uint8_t> bad;   // OnError::kSkip: samples dropped (set before `remaining` hits 0)
  bool any_bad = false;
  uint64_t taken_front = 0;   // consumer only: good samples moved into an earlier batch
  bool ready = false;         // guarded by Ring::mu
  // Token batches: the row copies grouped by record (q, the record's index in the claim's
  // list): those from record q are copies[chunk_begin[q] .. chunk_begin[q + 1]), so the
  // worker handing over one record's rows reads one short run, not the whole batch.
  std::vector<RowCopy> copies;
  std::vector<uint32_t> chunk_begin;
  // Hand-overs left. On a line of its own: the workers that hand rows over count it down
  // in turn, and the fields above, which they only read, then stay cached on both sides.
  alignas(64) std::atomic<uint64_t> remaining{0};
  void mark_bad(size_t j) {
    std::lock_guard<std::mutex> lock(mu);
    bad[j] = 1;
    any_bad = true;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = std::move(e);
  }
};

// A token batch being claimed by a worker: the records its rows come from, the last
// window it reaches (the next one is read ahead), and the records already loaded (rows
// to copy in now). Kept by the worker from claim to claim, so the vectors are reused.
struct TokenClaim {
  struct Need {
    uint64_t record, retire_at;
  };
  std::shared_ptr<Job> job;
  std::vector<Need> needs;
  std::vector<uint32_t> row_chunk;   // per sample: its record's index in `needs`
  std::vector<uint32_t> src_row;     // per sample: its row in that record
  std::vector<uint32_t> fill;        // per record: next free place in the job's copies
  uint64_t last_window = 0;
  std::vector<std::pair<uint32_t, std::shared_ptr<Chunk>>> loaded;
};

struct DecodeTask {
  std::shared_ptr<Job> job;
  uint32_t j = 0;              // sample within the batch
  std::shared_ptr<IoBuffer> buf;
  uint64_t skip = 0;
  size_t shard = 0;
  uint64_t record = 0;
  std::string io_error;        // non-empty: the read failed
  ErrorCode io_code = ErrorCode::kIoError;
};

// Buffers for decompressed token records, recycled: a fresh 256 KiB allocation per
// record is an mmap, page faults and a zero-fill that cost more than the zstd itself.
struct ChunkBufferPool {
  std::mutex mu;
  std::vector<std::unique_ptr<uint8_t[]>> free;
  size_t capacity = 0;  // every buffer holds this many bytes (the largest record)
  std::unique_ptr<uint8_t[]> take() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!free.empty()) {
        auto b = std::move(free.back());
        free.pop_back();
        return b;
      }
    }
    return std::unique_ptr<uint8_t[]>(new uint8_t[capacity]);  // not zero-filled
  }
  void give(std::unique_ptr<uint8_t[]> b) {
    std::lock_guard<std::mutex> lock(mu);
    free.push_back(std::move(b));
  }
};

// A token record (one compressed chunk of rows), read and decompressed once per epoch.
// The worker that decompresses it copies each row straight into the slots of the batches
// already claimed that draw it (`waiters`), while the rows are hot in its cache; a copy
// of the rows stays in `raw` only when batches not claimed yet may still draw from it.
// `state`, `waiters` and the hand-over of `stored` are guarded by Ring::mu; the thread
// that moved the chunk into kReading or kUnpacking owns its buffers until it moves it on.
struct Chunk {
  // kQueued: to read. kReading: read in flight. kRead: stored bytes here (or `error`), to
  // decompress. kUnpacking: a worker decompresses it and hands its rows out. kDone: the
  // rows went to the waiters; `raw` holds them if later batches may need them, or
  // `error` says why there are none.
  enum class State { kQueued, kReading, kRead, kUnpacking, kDone };
  State state = State::kQueued;
  uint64_t record = 0;
  uint64_t retire_at = 0;  // the rank's batches starting at or past this position never need it
  std::shared_ptr<IoBuffer> stored;  // the read, until decompressed
  uint64_t skip = 0;                 // where the record starts in `stored`
  std::shared_ptr<ChunkBufferPool> pool;
  std::unique_ptr<uint8_t[]> raw;
  size_t raw_size = 0;
  const uint8_t* rows = nullptr;  // first row of the token field inside `raw`
  std::exception_ptr error;
  // Batches waiting for its rows, each with the record's index in that batch's claim. A
  // plain pointer: a batch outlives its waits (the consumer takes it only once they are
  // all handed over, and a stopped run joins its workers before dropping its batches).
  std::vector<std::pair<struct Job*, uint32_t>> waiters;
  // The work queue it sits in, if any: a chunk read ahead that a batch comes to need
  // moves to the front queue without leaving a stale copy behind.
  std::list<std::shared_ptr<Chunk>>* queue = nullptr;
  std::list<std::shared_ptr<Chunk>>::iterator queue_pos;
  ~Chunk() {
    if (raw) pool->give(std::move(raw));
  }
};
using ChunkQueue = std::list<std::shared_ptr<Chunk>>;

// `e` naming the record it is about: `record` in front, unless the message names it.
Error naming(const Error& e, const std::string& record) {
  const std::string what = e.what();
  return what.find(record) == std::string::npos ? Error(e.code(), record + ": " + what) : e;
}

// What a read completion means for a record ending `need` bytes into the read: nothing
// when its bytes are all there, else the error (without the record's name).
std::optional<Error> read_failure(const ReadCompletion& d, uint64_t need) {
  if (d.result < 0)
    return Error(d.result == -ECANCELED ? ErrorCode::kCancelled : ErrorCode::kIoError,
                 d.error.empty() ? std::string(std::strerror(static_cast<int>(-d.result))) : d.error);
  if (static_cast<uint64_t>(d.result) < need)
    return Error(ErrorCode::kDataLoss, "short read: got " + std::to_string(d.result) + " bytes of a range needing " +
                                           std::to_string(need) + " (file truncated or replaced?)");
  return std::nullopt;
}

// Appends `ch` to `q`, taking it out of the queue it was in.
void enqueue(ChunkQueue& q, const std::shared_ptr<Chunk>& ch) {
  if (ch->queue == &q) return;
  if (ch->queue) {
    q.splice(q.end(), *ch->queue, ch->queue_pos);
  } else {
    ch->queue_pos = q.insert(q.end(), ch);
  }
  ch->queue = &q;
}
std::shared_ptr<Chunk> dequeue(ChunkQueue& q) {
  if (q.empty()) return nullptr;
  auto ch = std::move(q.front());
  q.pop_front();
  ch->queue = nullptr;
  return ch;
}
void clear_queue(ChunkQueue& q) {
  for (auto& ch : q) ch->queue = nullptr;
  q.clear();
}

struct Counters {
  std::atomic<uint64_t> io_busy_ns{0}, io_wait_ns{0}, io_records{0};
  std::atomic<uint64_t> dec_busy_ns{0}, dec_wait_ns{0}, dec_samples{0};
  std::atomic<uint64_t> consumer_wait_ns{0};
  std::atomic<uint64_t> queue_sum{0}, ready_sum{0}, free_sum{0}, samples_n{0};
  std::atomic<uint64_t> skipped{0};
  void reset() {
    for (auto* a : {&io_busy_ns, &io_wait_ns, &io_records, &dec_busy_ns, &dec_wait_ns, &dec_samples,
                    &consumer_wait_ns, &queue_sum, &ready_sum, &free_sum, &samples_n, &skipped})
      a->store(0);
  }
};

}  // namespace

struct Loader::Impl {
  LoaderOptions opt;
  std::shared_ptr<Dataset> dataset;
  bool tokens = false;
  int jpeg_field = -1, label_field = -1, token_field = -1;
  uint32_t seq_len = 0;
  size_t token_row_bytes = 0;
  uint64_t largest_stored = 0;  // token data: the largest record as stored (sizes the read slab)
  OrderOptions order_opt;  // effective (token data: kTokenWindow when shuffled)
  std::shared_ptr<const UnitLayout> layout;
  RankInfo rank;
  CpuPlan cpu;
  unsigned threads = 1;
  std::vector<TensorLayout> tensors;
  int image_t = -1, label_t = -1, index_t = -1, tokens_t = -1, targets_t = -1;  // positions in `tensors`
  bool decode_images = true;  // false with ImageTransform::kNone: read and check only
  size_t image_bytes = 0;
  std::shared_ptr<Ring> ring;
  std::atomic<bool> warned_grow{false};

  // ---- the current epoch's run ----
  uint64_t epoch = 0;
  uint64_t start_consumed = 0;
  std::unique_ptr<EpochOrder> order;
  std::unique_ptr<RankSchedule> sched;
  bool running = false;
  uint64_t next_deliver = 0;   // consumer side
  uint64_t next_start = 0;     // io side (guarded by ring->mu)
  std::map<uint64_t, std::shared_ptr<Job>> jobs;  // guarded by ring->mu
  std::exception_ptr fatal;                       // guarded by ring->mu
  std::exception_ptr delivered_error;             // consumer side: sticky after a throw
  std::atomic<bool> stop{false};
  std::thread io_thread;
  std::vector<std::thread> decoders;
  std::unique_ptr<IoEngine> engine;  // used by the stoker-io thread only; kept across runs
  std::vector<int64_t> file_ids;     // shard -> engine file id
  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<DecodeTask> queue;
  // Token data (all guarded by ring->mu). The decode workers schedule themselves, with
  // no hand-off per batch: a worker claims the next batch when a slot is free (copying in
  // the rows of records already decompressed), else decompresses a record that has been
  // read (those a claimed batch waits for first) and copies its rows into the claimed
  // batches that draw them; a batch is ready when its last row is in. The IO thread
  // reads records through the engine (O_DIRECT where it can: no copy on the CPUs), those
  // a claimed batch waits for first, then the next window's, read ahead of need.
  std::unordered_map<uint64_t, std::shared_ptr<Chunk>> chunks;  // record -> chunk, live windows only
  ChunkQueue read_needed, read_ahead;      // kQueued
  ChunkQueue unpack_needed, unpack_ahead;  // kRead
  std::condition_variable read_cv;  // the token IO thread's: reads queued, stop
  uint64_t prefetch_from = 0;       // windows below this have been read ahead (or needed) already
  uint64_t min_retire_at = UINT64_MAX;  // no chunk retires before this (the next eviction scan)
  std::set<uint64_t> claims_open;   // batches claimed whose records are not registered yet
  std::shared_ptr<ChunkBufferPool> chunk_pool = std::make_shared<ChunkBufferPool>();

  Counters c;
  // Reporting: interval verdicts, smoothed so a steady feed does not flip-flop.
  double report_interval_s = 0;
  bool report_json = false;
  std::unique_ptr<BottleneckTracker> tracker;
  Clock::time_point last_report{};
  void report(bool epoch_end);
  bool reported_epoch_end = false;
  LoaderStats snapshot() const;
  Clock::time_point run_start{};
  double first_batch_s = 0;
  uint64_t batches_out = 0, samples_out = 0, record_bytes_out = 0;
  mutable std::mutex io_stats_mu;
  IoStats io_stats;
  std::atomic<uint64_t> io_bytes{0};

  void setup();
  void start_run();
  void stop_run();
  void io_main();
  void decode_main(unsigned id);
  void process(DecodeTask& t, ImageDecoder& dec, std::vector<uint8_t>& scratch, std::vector<uint8_t>& pixels);
  bool open_engine();       // false: failed, `fatal` says why
  void close_engine_run();  // keeps the engine's stats; drains and drops it when stopped mid-run
  void publish_io_stats();  // the IO thread's engine stats, for stats() while it runs
  void token_worker_main(unsigned id);
  void token_io_main();
  void clear_token_state();
  /// Decompresses a chunk the caller moved to kUnpacking (ring->mu held on entry and
  /// exit, released meanwhile) and copies its rows into the batches waiting for them.
  void unpack_and_deliver(const std::shared_ptr<Chunk>& ch, std::vector<uint8_t>& scratch,
                          std::unique_lock<std::mutex>& lock);
  /// ring->mu held: the first position any batch not yet registered can hold
  /// (UINT64_MAX when every batch is registered).
  uint64_t registration_horizon_locked() const;
  /// ring->mu held: whether a batch not yet registered may still draw rows from `ch`.
  bool later_batches_need_locked(const Chunk& ch) const;
  /// ring->mu held: claims the next batches while slots are free, registers the records
  /// they need and copies in the rows already loaded; false when there is nothing to
  /// claim. Unlocks while working out the batches' rows and copying.
  bool claim_token_batches(std::unique_lock<std::mutex>& lock, std::vector<TokenClaim>& claims);
  /// Works out a claimed batch's rows, the records they come from and its `index` field.
  void plan_token_batch(TokenClaim& claim);
  /// ring->mu held: registers the batch with the records it needs (reading those not
  /// read yet); true when reads were queued.
  bool register_token_batch_locked(TokenClaim& claim);
  /// ring->mu held: forgets the records no batch still to register can need.
  void evict_chunks_locked();
  /// ring->mu held: the chunk of `record`, created (and queued for reading on `queue`)
  /// if new.
  std::shared_ptr<Chunk> chunk_for(uint64_t record, uint64_t retire_at, ChunkQueue& queue, bool* created = nullptr);
  /// Checks and decompresses a record that has been read into `scratch`; returns its
  /// first row, or nullptr with the error kept in the chunk.
  const uint8_t* unpack_chunk(Chunk& ch, std::vector<uint8_t>& scratch);
  /// Copies the batch's rows drawn from its `q`-th record (first row at `rows`, or the
  /// chunk's error for each of them) into the batch's slot; returns the rows copied.
  uint64_t deliver_rows(Job& job, uint32_t q, const Chunk& ch, const uint8_t* rows);
  void finish_one(Job& job);
  /// ring->mu held: whether the consumer, asleep on a batch, should be woken now.
  bool consumer_should_wake_locked() const;
  /// A sample could not be read, checked or decoded: stop (kError) or drop it (kSkip).
  void sample_failed(Job& job, uint32_t j, std::exception_ptr e);
  std::mutex skip_log_mu;
  std::set<std::string> skip_logged;  // records already reported (each is logged once)
  /// Consumer side of kSkip: moves the good samples of the batch in `job`'s slot to the
  /// front and fills it up from the following batches; returns the sample count.
  uint64_t compact_batch(const std::shared_ptr<Job>& job, std::unique_lock<std::mutex>& lock);
  /// Waits (ring->mu held) until batch k is decoded; grows the ring when the consumer
  /// holds every slot. Rethrows an IO-stage failure.
  std::shared_ptr<Job> wait_job(uint64_t k, std::unique_lock<std::mutex>& lock);
  /// next() and try_next(): with `block` false, returns nullopt and sets *would_wait
  /// instead of waiting for batch next_deliver.
  std::optional<Batch> next_batch(bool block, bool* would_wait);
  /// Whether a decoded batch of n samples must be compacted (compact_batch) before it
  /// goes out: samples were dropped from it or moved out of it, or it is short under kSkip.
  bool needs_compaction(const Job& job, uint64_t n) const {
    return job.any_bad || job.taken_front > 0 || (opt.on_error == OnError::kSkip && n < opt.batch_size);
  }
  Batch make_batch(const std::shared_ptr<Job>& job, uint64_t n, std::shared_ptr<RingLease> lease);
  void move_sample(const Job& from, uint64_t j, const Job& to, uint64_t i);
  std::string record_name(size_t shard, uint64_t rec) const {
    return dataset->shard_path(shard) + ": record " + std::to_string(rec);
  }
  uint8_t* tensor_ptr(const Job& job, int t) const { return job.mem + tensors[static_cast<size_t>(t)].offset; }
};

void Loader::Impl::setup() {
  if (opt.batch_size == 0) throw_error(ErrorCode::kInvalidArgument, "batch_size must be >= 1");
  ShardReaderOptions ro;
  ro.max_record_bytes = opt.max_record_bytes;
  dataset = Dataset::open(opt.path, ro);
  const Schema& schema = dataset->schema();
  jpeg_field = -1;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& f = schema.fields[i];
    if (f.kind == FieldKind::kJpeg && jpeg_field < 0) jpeg_field = static_cast<int>(i);
    if (f.kind == FieldKind::kInt64 && label_field < 0) label_field = static_cast<int>(i);
    if (f.kind == FieldKind::kTokens && token_field < 0) token_field = static_cast<int>(i);
  }
  tokens = jpeg_field < 0 && token_field >= 0;
  if (jpeg_field < 0 && token_field < 0)
    throw_error(ErrorCode::kInvalidArgument, opt.path + ": schema " + schema.to_string() +
                                                 " has neither a jpeg nor a tokens field; the loader needs one");

  // Rank and world size: explicit, else torchrun's environment.
  if (opt.rank >= 0 || opt.world_size >= 0) {
    if (opt.rank < 0 || opt.world_size < 1 || opt.rank >= opt.world_size)
      throw_error(ErrorCode::kInvalidArgument, "rank " + std::to_string(opt.rank) + " / world_size " +
                                                   std::to_string(opt.world_size) + " is not a valid pair");
    rank = RankInfo{static_cast<uint32_t>(opt.rank), static_cast<uint32_t>(opt.world_size)};
  } else {
    rank = rank_from_env();
  }

  order_opt = opt.order;
  std::vector<uint64_t> groups;
  if (tokens) {
    const Field& f = schema.fields[token_field];
    seq_len = f.seq_len;
    token_row_bytes = (static_cast<size_t>(seq_len) + 1) * dtype_size(f.dtype);
    // Units are rows; groups are records (one per compressed chunk).
    for (size_t s = 0; s < dataset->shard_count(); ++s) {
      auto r = dataset->shard(s);
      for (uint64_t i = 0; i < r->record_count(); ++i) {
        const RecordLocation& loc = r->location(i);
        groups.push_back(loc.field_sizes[token_field] / token_row_bytes);
        chunk_pool->capacity = std::max<size_t>(chunk_pool->capacity, loc.raw_size);
        largest_stored = std::max<uint64_t>(largest_stored, loc.stored_size);
      }
    }
    if (order_opt.kind == OrderKind::kShuffled || order_opt.kind == OrderKind::kChunkLocal)
      order_opt.kind = OrderKind::kTokenWindow;
  } else {
    for (const ShardEntry& s : dataset->manifest().shards) groups.push_back(s.records);
  }
  layout = std::make_shared<UnitLayout>(groups);

  // Every shard may end up with two descriptors (the reader's and the IO engine's
  // O_DIRECT one). Datasets of thousands of shards outgrow the usual soft limit of 1024:
  // raise it towards the hard limit, and say so when even that is short.
  {
    const uint64_t need = 2 * dataset->shard_count() + 256;
    struct rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need) {
      struct rlimit want = rl;
      want.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min<rlim_t>(rl.rlim_max, need);
      if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
      if (rl.rlim_cur < need)
        std::fprintf(stderr,
                     "stoker: warning: %zu shards may need %llu file descriptors but the limit is %llu (hard %llu); "
                     "raise it with `ulimit -n` or pack into fewer, larger shards\n",
                     dataset->shard_count(), static_cast<unsigned long long>(need),
                     static_cast<unsigned long long>(rl.rlim_cur), static_cast<unsigned long long>(rl.rlim_max));
    }
  }
  report_interval_s = opt.report_interval_s;
  report_json = opt.report_json;
  if (report_interval_s <= 0) {
    if (const char* env = std::getenv("STOKER_REPORT"); env && *env) {
      std::string v(env);
      double mul = 1;
      if (v.size() > 2 && v.substr(v.size() - 2) == "ms") { mul = 1e-3; v.resize(v.size() - 2); }
      else if (!v.empty() && v.back() == 's') v.pop_back();
      try {
        report_interval_s = std::stod(v) * mul;
      } catch (const std::exception&) {
        throw_error(ErrorCode::kInvalidArgument, "STOKER_REPORT='" + std::string(env) + "' is not a duration like 10s");
      }
    }
  }
  if (const char* env = std::getenv("STOKER_REPORT_JSON"); env && std::string(env) == "1") report_json = true;
  if (report_interval_s > 0) tracker = std::make_unique<BottleneckTracker>();

  cpu = plan_cpus(opt.gpu_pci_bus_id);
  if (!opt.cpus.empty()) {
    cpu.cpus = opt.cpus;
    cpu.explanation = "threads pinned to the configured CPUs " + format_cpu_list(opt.cpus);
  }
  threads = opt.threads ? opt.threads : cpu.threads;

  // Slot layout.
  const size_t B = opt.batch_size;
  auto add = [&](std::string name, ElemType t, std::vector<int64_t> shape) {
    TensorLayout l{std::move(name), t, std::move(shape), 0, 0};
    size_t n = 1;
    for (int64_t d : l.sample_shape) n *= static_cast<size_t>(d);
    l.sample_bytes = n * elem_size(t);
    tensors.push_back(std::move(l));
    return static_cast<int>(tensors.size() - 1);
  };
  if (!tokens) {
    const int S = opt.transform.size;
    // kNone: records are read and checked but not decoded (isolates storage + IO).
    decode_images = opt.transform.kind != ImageTransform::Kind::kNone;
    if (decode_images) {
      if (S < 1 || S > 8192) throw_error(ErrorCode::kInvalidArgument, "image size must be 1..8192");
      if (pixel_is_chw(opt.pixel_format)) image_t = add("image", pixel_elem_type(opt.pixel_format), {3, S, S});
      else image_t = add("image", pixel_elem_type(opt.pixel_format), {S, S, 3});
      image_bytes = tensors.back().sample_bytes;
    }
    label_t = add("label", ElemType::kInt64, {});
    index_t = add("index", ElemType::kInt64, {});
  } else {
    ElemType tt = opt.token_type_is_stored ? elem_of_dtype(schema.fields[token_field].dtype) : opt.token_type;
    if (tt != ElemType::kUint16 && tt != ElemType::kUint32 && tt != ElemType::kInt32 && tt != ElemType::kInt64)
      throw_error(ErrorCode::kInvalidArgument, "token_type must be uint16, uint32, int32 or int64");
    tokens_t = add("tokens", tt, {static_cast<int64_t>(seq_len)});
    if (opt.targets) targets_t = add("targets", tt, {static_cast<int64_t>(seq_len)});
    index_t = add("index", ElemType::kInt64, {});
  }
  size_t off = 0;
  for (auto& t : tensors) {
    t.offset = off;
    off += (t.sample_bytes * B + 255) / 256 * 256;
  }
  ring = std::make_shared<Ring>();
  ring->alloc = opt.slot_allocator ? opt.slot_allocator : host_slot_allocator();
  ring->slot_bytes = off;
  if (opt.slots == 0) {
    // Small batches (token rows) take tens of microseconds each, less than the few
    // milliseconds the scheduler may keep a woken consumer waiting on a busy machine:
    // the ring must hold more of them for the decoders to keep working meanwhile.
    // Large ones (images) need few. Either way the ring stays within kAutoRingBytes.
    constexpr size_t kAutoRingBytes = 32u << 20;
    opt.slots = static_cast<unsigned>(std::clamp<size_t>(kAutoRingBytes / std::max<size_t>(1, off), 4, 64));
  }
  for (unsigned i = 0; i < opt.slots; ++i) ring->add_slot_locked();
}

void Loader::Impl::start_run() {
  order = std::make_unique<EpochOrder>(order_opt, layout, epoch);
  sched = std::make_unique<RankSchedule>(order->size(), opt.batch_size, rank.world_size, rank.rank, opt.drop_last,
                                         start_consumed);
  stop = false;
  next_deliver = 0;
  next_start = 0;
  jobs.clear();
  fatal = nullptr;
  delivered_error = nullptr;
  queue.clear();
  clear_token_state();
  c.reset();
  io_bytes = 0;
  first_batch_s = 0;
  batches_out = samples_out = record_bytes_out = 0;
  run_start = Clock::now();
  reported_epoch_end = false;
  running = true;
  if (tokens) {
    io_thread = std::thread([this] { token_io_main(); });
    for (unsigned i = 0; i < threads; ++i) decoders.emplace_back([this, i] { token_worker_main(i); });
    return;
  }
  io_thread = std::thread([this] { io_main(); });
  for (unsigned i = 0; i < threads; ++i) decoders.emplace_back([this, i] { decode_main(i); });
}

void Loader::Impl::clear_token_state() {
  // Waiters are weak and jobs are dropped with the run, so nothing here keeps a cycle.
  chunks.clear();
  for (ChunkQueue* q : {&read_needed, &read_ahead, &unpack_needed, &unpack_ahead}) clear_queue(*q);
  prefetch_from = 0;
  min_retire_at = UINT64_MAX;
  claims_open.clear();
}

void Loader::Impl::stop_run() {
  if (!running) return;
  {
    // Under both locks, so a thread between checking `stop` and waiting cannot miss it.
    std::scoped_lock lock(qmu, ring->mu);
    stop = true;
  }
  qcv.notify_all();
  ring->cv.notify_all();
  ring->producer_cv.notify_all();
  read_cv.notify_all();
  if (io_thread.joinable()) io_thread.join();
  for (auto& t : decoders) t.join();
  decoders.clear();
  std::lock_guard<std::mutex> lock(ring->mu);
  for (auto& s : ring->slots)
    if (s->state == Ring::State::kFilling || s->state == Ring::State::kReady) s->state = Ring::State::kFree;
  jobs.clear();
  queue.clear();
  clear_token_state();
  running = false;
}

bool Loader::Impl::consumer_should_wake_locked() const {
  const uint64_t k = ring->consumer_waits_for;
  if (k == UINT64_MAX) return false;
  // A consumer that outruns the producers would otherwise be woken for every batch, and
  // on a small machine each wake-up is a context switch taken from the decoders: let it
  // sleep until a run of batches is ready, unless the producers cannot go on without it.
  const size_t want = std::clamp<size_t>(ring->slots.size() / 2, 1, 8);
  size_t run = 0;
  for (auto it = jobs.find(k); it != jobs.end() && it->first == k + run && it->second->ready && run < want; ++it) ++run;
  if (run == 0) return false;
  if (run >= want) return true;
  const bool more_to_start = next_start < sched->num_batches();
  for (const auto& s : ring->slots)
    if (s->state == Ring::State::kFilling || (s->state == Ring::State::kFree && more_to_start))
      return false;  // more is coming
  return true;  // nothing more comes until the consumer takes some
}

void Loader::Impl::finish_one(Job& job) {
  if (job.remaining.fetch_sub(1) != 1) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    job.ready = true;
    ring->slots[job.slot]->state = Ring::State::kReady;
    wake = consumer_should_wake_locked();
  }
  if (wake) ring->cv.notify_all();
}

void Loader::Impl::sample_failed(Job& job, uint32_t j, std::exception_ptr e) {
  if (opt.on_error == OnError::kError) {
    job.fail(std::move(e));
    return;
  }
  job.mark_bad(j);
  c.skipped++;
  std::string what = "unknown error";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    what = ex.what();
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(skip_log_mu);
  if (skip_logged.insert(what).second)
    std::fprintf(stderr, "stoker: skipping %s (on_error=skip)\n", what.c_str());
}

void Loader::Impl::move_sample(const Job& from, uint64_t j, const Job& to, uint64_t i) {
  if (&from == &to && i == j) return;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const size_t n = tensors[t].sample_bytes;
    std::memmove(tensor_ptr(to, static_cast<int>(t)) + i * n, tensor_ptr(from, static_cast<int>(t)) + j * n, n);
  }
}

std::shared_ptr<Job> Loader::Impl::wait_job(uint64_t k, std::unique_lock<std::mutex>& lock) {
  for (;;) {
    auto it = jobs.find(k);
    if (it != jobs.end() && it->second->ready) return it->second;
    if (fatal) std::rethrow_exception(fatal);
    // The consumer holds every slot and waits for a batch that cannot start: grow.
    if (it == jobs.end()) {
      bool any_busy = false;
      for (auto& s : ring->slots) any_busy |= s->state != Ring::State::kLeased;
      if (!any_busy) {
        if (!opt.grow_when_held)
          throw_error(ErrorCode::kResourceExhausted, "every batch slot (" + std::to_string(ring->slots.size()) +
                                                         ") is held by the caller; release batches or enable grow_when_held");
        if (!warned_grow.exchange(true))
          std::fprintf(stderr,
                       "stoker: warning: the caller holds all %zu batch slots; adding slots so the loader can go "
                       "on (memory now grows with the batches kept; release batches to keep it bounded)\n",
                       ring->slots.size());
        ring->add_slot_locked();
        ring->producer_cv.notify_all();
      }
    }
    ring->consumer_waits_for = k;
    ring->cv.wait_for(lock, std::chrono::milliseconds(50));
    ring->consumer_waits_for = UINT64_MAX;
  }
}

uint64_t Loader::Impl::compact_batch(const std::shared_ptr<Job>& job, std::unique_lock<std::mutex>& lock) {
  // Output batches are the rank's sample stream with the dropped samples taken out, cut
  // into batches of B: a function of which records are bad, not of timing. Batch d is
  // assembled in place in its own slot: its remaining good samples move to the front,
  // then the first good samples of the next batches fill it up.
  uint64_t n = 0, skip = job->taken_front;
  for (uint64_t j = 0; j < job->samples.size(); ++j) {
    if (job->bad[j]) continue;
    if (skip) { --skip; continue; }
    move_sample(*job, j, *job, n++);
  }
  const uint64_t B = opt.batch_size, nb = sched->num_batches();
  for (uint64_t q = job->k + 1; n < B && q < nb; ++q) {
    std::shared_ptr<Job> next = wait_job(q, lock);
    uint64_t skip_q = next->taken_front;
    for (uint64_t j = 0; j < next->samples.size() && n < B; ++j) {
      if (next->bad[j]) continue;
      if (skip_q) { --skip_q; continue; }
      move_sample(*next, j, *job, n++);
      next->taken_front++;
    }
    if (n < B) continue;  // `next` is used up; keep filling from the one after
  }
  return n;
}

bool Loader::Impl::open_engine() {
  // The engine (ring, registered slab, open files) lives across epochs: setting it up
  // costs tens of milliseconds that a restart at every epoch should not pay again.
  try {
    if (!engine) {
      IoOptions io = opt.io;
      // The slab only needs to hold the reads in flight: the batches of the ring (images)
      // or the records of about three windows (tokens: the next window is read ahead).
      uint64_t need;
      if (tokens) {
        const uint64_t window = order_opt.kind == OrderKind::kTokenWindow ? std::max<uint64_t>(1, order_opt.window_chunks) : 4;
        need = (3 * window + opt.slots) * (largest_stored + 2 * kDirectAlignment);
      } else {
        const uint64_t records = std::max<uint64_t>(1, dataset->record_count());
        const uint64_t mean = dataset->manifest().total_bytes() / records;
        need = static_cast<uint64_t>(opt.slots + 1) * opt.batch_size * (mean + 2 * kDirectAlignment);
      }
      io.slab_bytes = static_cast<size_t>(std::min<uint64_t>(io.slab_bytes, std::max<uint64_t>(need, 4u << 20)));
      engine = make_io_engine(io);
      if (opt.wrap_io) engine = opt.wrap_io(std::move(engine));
      file_ids.assign(dataset->shard_count(), -1);
    }
    return true;
  } catch (...) {
    std::lock_guard<std::mutex> lock(ring->mu);
    fatal = std::current_exception();
    ring->cv.notify_all();
    return false;
  }
}

void Loader::Impl::publish_io_stats() {
  std::lock_guard<std::mutex> lock(io_stats_mu);
  io_stats = engine->stats();
}

void Loader::Impl::close_engine_run() {
  if (!engine) return;
  publish_io_stats();
  if (engine->inflight() == 0) return;
  // Stopped mid-epoch: cancel and drain so no buffer is freed under the kernel, then
  // drop the engine (a cancelled ring is not reused; the next run makes a new one).
  try {
    engine->cancel_all();
    std::vector<ReadCompletion> done;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (engine->inflight() > 0 && Clock::now() < deadline) {
      done.clear();
      engine->reap(done, 1, std::chrono::milliseconds(5));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoker: warning: draining the IO engine at shutdown: %s\n", e.what());
  }
  engine.reset();
}

void Loader::Impl::io_main() {
  pin_and_name_this_thread(cpu.cpus, "stoker-io");
  if (!open_engine()) return;
  struct ReadCtx {
    std::shared_ptr<Job> job;
    std::shared_ptr<IoBuffer> buf;
    struct Rec {
      uint32_t j;
      size_t shard;
      uint64_t record;
      uint64_t skip;
      uint32_t stored;
    };
    std::vector<Rec> recs;
  };
  std::unordered_map<uint64_t, ReadCtx> pending;
  uint64_t next_tag = 1;
  std::vector<ReadCompletion> done;
  const uint64_t nb = sched->num_batches();

  auto push_tasks = [&](std::vector<DecodeTask>& tasks) {
    if (tasks.empty()) return;
    {
      std::lock_guard<std::mutex> lock(qmu);
      for (auto& t : tasks) queue.push_back(std::move(t));
    }
    tasks.clear();
    qcv.notify_all();
  };

  auto start_job = [&](uint64_t k, size_t slot, uint8_t* slot_mem) {
    auto job = std::make_shared<Job>();
    job->k = k;
    job->slot = slot;
    job->mem = slot_mem;
    const uint64_t len = sched->batch_length(k);
    job->samples.resize(len);
    job->bad.assign(len, 0);
    for (uint64_t j = 0; j < len; ++j) job->samples[j] = order->at(sched->position(k, j));
    {
      std::lock_guard<std::mutex> lock(ring->mu);
      jobs[k] = job;
    }
    job->remaining = len;
    std::vector<RecordRange> ranges;
    std::vector<std::pair<size_t, uint64_t>> where;
    std::vector<uint32_t> js;  // batch position of each planned record
    for (uint64_t j = 0; j < len; ++j) {
      auto [s, r] = dataset->locate(job->samples[j]);
      try {
        auto reader = dataset->shard(s);  // opens lazily; checks the shard against the manifest
        if (file_ids[s] < 0) file_ids[s] = engine->add_file(dataset->shard_path(s));
        const RecordLocation& loc = reader->location(r);
        ranges.push_back(RecordRange{static_cast<uint32_t>(file_ids[s]), loc.offset, loc.stored_size,
                                     engine->file_size(static_cast<uint32_t>(file_ids[s]))});
        where.emplace_back(s, r);
        js.push_back(static_cast<uint32_t>(j));
      } catch (const Error& e) {
        // A missing or replaced shard: this record fails like a bad read would.
        sample_failed(*job, static_cast<uint32_t>(j), std::make_exception_ptr(naming(e, record_name(s, r))));
        finish_one(*job);
      }
    }
    PlanOptions po;
    po.alignment = engine->direct() ? kDirectAlignment : 1;
    ReadPlan plan = plan_reads(ranges, po);
    std::vector<ReadRequest> reqs;
    reqs.reserve(plan.reads.size());
    for (size_t i = 0; i < plan.reads.size(); ++i) {
      const auto& rd = plan.reads[i];
      ReadCtx ctx;
      ctx.job = job;
      ctx.buf = std::make_shared<IoBuffer>(engine->alloc(rd.length));
      for (uint32_t q = rd.first_record; q < rd.first_record + rd.record_count; ++q)
        ctx.recs.push_back({js[q], where[q].first, where[q].second, plan.records[q].skip,
                           static_cast<uint32_t>(ranges[q].length)});
      const uint64_t tag = next_tag++;
      reqs.push_back(ReadRequest{rd.file, rd.offset, static_cast<uint32_t>(rd.length), ctx.buf->data(), tag});
      pending.emplace(tag, std::move(ctx));
    }
    engine->submit(reqs);
  };

  try {
    while (!stop) {
      auto t0 = Clock::now();
      bool progressed = false;
      // Start the next batch when a slot is free.
      if (next_start < nb) {  // this thread is the only writer: reading it unlocked is safe
        std::optional<size_t> slot;
        uint8_t* slot_mem = nullptr;
        uint64_t k = 0;
        {
          // Advanced under the lock: the decoders read it (consumer_should_wake_locked).
          std::lock_guard<std::mutex> lock(ring->mu);
          for (size_t i = 0; i < ring->slots.size(); ++i)
            if (ring->slots[i]->state == Ring::State::kFree) {
              ring->slots[i]->state = Ring::State::kFilling;
              slot = i;
              slot_mem = ring->slots[i]->mem;
              k = next_start++;
              break;
            }
        }
        if (slot) {
          start_job(k, *slot, slot_mem);
          progressed = true;
        }
      }
      if (engine && engine->inflight() > 0) {
        done.clear();
        auto w0 = Clock::now();
        engine->reap(done, progressed ? 0 : 1, std::chrono::milliseconds(progressed ? 0 : 2));
        c.io_wait_ns += nanos(Clock::now() - w0);
        std::vector<DecodeTask> tasks;
        for (ReadCompletion& d : done) {
          auto it = pending.find(d.tag);
          if (it == pending.end()) continue;
          ReadCtx ctx = std::move(it->second);
          pending.erase(it);
          if (d.result > 0) io_bytes += static_cast<uint64_t>(d.result);
          for (const auto& r : ctx.recs) {
            DecodeTask t{ctx.job, r.j, ctx.buf, r.skip, r.shard, r.record, {}, ErrorCode::kIoError};
            if (auto bad = read_failure(d, r.skip + r.stored)) {
              t.io_error = bad->what();
              t.io_code = bad->code();
            }
            tasks.push_back(std::move(t));
            c.io_records++;
          }
        }
        push_tasks(tasks);
        progressed = progressed || !done.empty();
      } else if (!progressed) {
        if (next_start >= nb) break;  // everything submitted and read
        // Waiting for the consumer to hand back a slot.
        auto w0 = Clock::now();
        std::unique_lock<std::mutex> lock(ring->mu);
        ring->producer_cv.wait_for(lock, std::chrono::milliseconds(20), [&] {
          if (stop) return true;
          for (auto& s : ring->slots)
            if (s->state == Ring::State::kFree) return true;
          return false;
        });
        c.io_wait_ns += nanos(Clock::now() - w0);
        continue;
      }
      c.io_busy_ns += nanos(Clock::now() - t0);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(ring->mu);
    fatal = std::current_exception();
    ring->cv.notify_all();
  }
  close_engine_run();
}

namespace {
// Stored tokens are little-endian. On a little-endian host each one is a plain load,
// which the compiler vectorises (uint16 -> int64, what torch gets by default, is ~8x
// faster than assembling every token from its bytes).
template <typename In, typename Out>
void widen_native(const uint8_t* src, size_t n, Out* out) {
  for (size_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, src + sizeof(In) * i, sizeof(In));
    out[i] = static_cast<Out>(v);
  }
}

template <typename Out>
void widen_row(const uint8_t* src, DType dt, size_t n, Out* out) {
  if constexpr (std::endian::native == std::endian::little) {
    switch (dt) {
      case DType::kUint16: widen_native<uint16_t>(src, n, out); return;
      case DType::kUint32: widen_native<uint32_t>(src, n, out); return;
      case DType::kInt32: widen_native<int32_t>(src, n, out); return;
      case DType::kInt64: widen_native<int64_t>(src, n, out); return;
      case DType::kNone: return;
    }
  }
  switch (dt) {
    case DType::kUint16: for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(internal::get_u16(src + 2 * i)); break;
    case DType::kUint32: for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(internal::get_u32(src + 4 * i)); break;
    case DType::kInt32: for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(static_cast<int32_t>(internal::get_u32(src + 4 * i))); break;
    case DType::kInt64: for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(static_cast<int64_t>(internal::get_u64(src + 8 * i))); break;
    case DType::kNone: break;
  }
}
void copy_tokens(const uint8_t* src, DType dt, size_t n, ElemType out_t, uint8_t* dst) {
  if (elem_of_dtype(dt) == out_t) {
    std::memcpy(dst, src, n * dtype_size(dt));
    return;
  }
  switch (out_t) {
    case ElemType::kUint16: widen_row(src, dt, n, reinterpret_cast<uint16_t*>(dst)); break;
    case ElemType::kUint32: widen_row(src, dt, n, reinterpret_cast<uint32_t*>(dst)); break;
    case ElemType::kInt32: widen_row(src, dt, n, reinterpret_cast<int32_t*>(dst)); break;
    case ElemType::kInt64: widen_row(src, dt, n, reinterpret_cast<int64_t*>(dst)); break;
    default: break;
  }
}
}  // namespace

std::shared_ptr<Chunk> Loader::Impl::chunk_for(uint64_t record, uint64_t retire_at, ChunkQueue& queue,
                                               bool* was_created) {
  auto [it, created] = chunks.try_emplace(record);
  if (was_created) *was_created = created;
  if (created) {
    auto ch = std::make_shared<Chunk>();
    ch->record = record;
    ch->retire_at = retire_at;
    ch->pool = chunk_pool;
    min_retire_at = std::min(min_retire_at, retire_at);
    it->second = ch;
    enqueue(queue, ch);
  }
  return it->second;
}

const uint8_t* Loader::Impl::unpack_chunk(Chunk& ch, std::vector<uint8_t>& scratch) {
  auto [s, r] = dataset->locate(ch.record);
  const uint8_t* rows = nullptr;
  try {
    const RecordLocation& loc = dataset->shard(s)->location(r);
    if (loc.raw_size > chunk_pool->capacity)
      throw Error(ErrorCode::kDataLoss, "raw size " + std::to_string(loc.raw_size) + " exceeds what the shard index promised");
    // Into the worker's own buffer, reused record after record: zstd writing into lines
    // already in this core's cache runs ~1.3x faster than into a recycled cold buffer.
    scratch.resize(chunk_pool->capacity);
    auto fields = unpack_record_into(dataset->schema(), loc, {ch.stored->data() + ch.skip, loc.stored_size},
                                     scratch, record_name(s, r));
    rows = fields[static_cast<size_t>(token_field)].data();
    ch.raw_size = loc.raw_size;
  } catch (const Error& e) {
    ch.error = std::make_exception_ptr(naming(e, record_name(s, r)));
  } catch (...) {
    ch.error = std::current_exception();
  }
  ch.stored.reset();  // the read buffer goes back to the engine's slab
  return rows;
}

uint64_t Loader::Impl::registration_horizon_locked() const {
  // The rank's positions only grow with the batch number: a batch claimed but not
  // registered yet starts no earlier than the oldest open claim, one not claimed yet no
  // earlier than the next batch to claim.
  if (!claims_open.empty()) return sched->position(*claims_open.begin(), 0);
  if (next_start < sched->num_batches()) return sched->position(next_start, 0);
  return UINT64_MAX;
}

bool Loader::Impl::later_batches_need_locked(const Chunk& ch) const {
  return ch.retire_at > registration_horizon_locked();
}

void Loader::Impl::unpack_and_deliver(const std::shared_ptr<Chunk>& ch, std::vector<uint8_t>& scratch,
                                      std::unique_lock<std::mutex>& lock) {
  // Decided now, not after decompressing: no batch registering later can start to need
  // the record, so deciding early only errs towards keeping a copy nobody reads.
  const bool keep = !ch->error && later_batches_need_locked(*ch);
  lock.unlock();
  const auto b0 = Clock::now();
  const uint8_t* rows = ch->error ? nullptr : unpack_chunk(*ch, scratch);
  if (rows && keep) {
    // Later batches copy their rows from here.
    ch->raw = chunk_pool->take();
    std::memcpy(ch->raw.get(), scratch.data(), ch->raw_size);
    ch->rows = ch->raw.get() + (rows - scratch.data());
  }
  lock.lock();
  auto waiters = std::move(ch->waiters);
  ch->waiters.clear();
  ch->state = Chunk::State::kDone;
  lock.unlock();
  uint64_t delivered = 0;
  for (auto& [job, q] : waiters) {
    delivered += deliver_rows(*job, q, *ch, rows);
    finish_one(*job);
  }
  c.dec_samples += delivered;
  c.dec_busy_ns += nanos(Clock::now() - b0);
  lock.lock();
}

void Loader::Impl::token_io_main() {
  pin_and_name_this_thread(cpu.cpus, "stoker-io");
  if (!open_engine()) return;
  struct Pending {
    std::shared_ptr<Chunk> chunk;
    std::shared_ptr<IoBuffer> buf;
    uint64_t skip = 0;
    uint64_t need = 0;  // skip + stored size: what a complete read returns at least
  };
  std::unordered_map<uint64_t, Pending> pending;
  uint64_t next_tag = 1;
  std::vector<ReadCompletion> done;
  const size_t depth = std::max<size_t>(1, opt.io.queue_depth);
  std::unique_lock<std::mutex> lock(ring->mu);
  try {
    while (!stop) {
      std::vector<std::shared_ptr<Chunk>> to_read;
      while (pending.size() + to_read.size() < depth) {
        auto ch = dequeue(read_needed);
        if (!ch) ch = dequeue(read_ahead);
        if (!ch) break;
        ch->state = Chunk::State::kReading;
        to_read.push_back(std::move(ch));
      }
      if (to_read.empty() && pending.empty()) {
        const auto w0 = Clock::now();
        read_cv.wait(lock);
        c.io_wait_ns += nanos(Clock::now() - w0);
        continue;
      }
      lock.unlock();
      const auto t0 = Clock::now();
      uint64_t waited = 0;
      std::vector<std::shared_ptr<Chunk>> finished;  // read (kRead) or failed (error set)
      std::vector<ReadRequest> reqs;
      for (auto& ch : to_read) {
        auto [s, r] = dataset->locate(ch->record);
        try {
          auto reader = dataset->shard(s);  // opens lazily; checks the shard against the manifest
          if (file_ids[s] < 0) file_ids[s] = engine->add_file(dataset->shard_path(s));
          const uint32_t fid = static_cast<uint32_t>(file_ids[s]);
          const RecordLocation& loc = reader->location(r);
          const RecordRange range{fid, loc.offset, loc.stored_size, engine->file_size(fid)};
          PlanOptions po;
          po.alignment = engine->direct() ? kDirectAlignment : 1;
          const ReadPlan plan = plan_reads({&range, 1}, po);
          const auto& rd = plan.reads.at(0);
          Pending pd{ch, std::make_shared<IoBuffer>(engine->alloc(rd.length)), plan.records.at(0).skip, 0};
          pd.need = pd.skip + loc.stored_size;
          const uint64_t tag = next_tag++;
          reqs.push_back(ReadRequest{rd.file, rd.offset, static_cast<uint32_t>(rd.length), pd.buf->data(), tag});
          pending.emplace(tag, std::move(pd));
        } catch (const Error& e) {
          // A missing or replaced shard: the record fails like a bad read would.
          ch->error = std::make_exception_ptr(naming(e, record_name(s, r)));
          finished.push_back(ch);
        }
      }
      if (!reqs.empty()) engine->submit(reqs);
      if (engine->inflight() > 0) {
        done.clear();
        const auto w0 = Clock::now();
        // Nothing new to submit: wait a little for a completion (new work is noticed
        // within the timeout).
        engine->reap(done, reqs.empty() ? 1 : 0, std::chrono::milliseconds(reqs.empty() ? 1 : 0));
        waited = nanos(Clock::now() - w0);
        for (ReadCompletion& d : done) {
          auto it = pending.find(d.tag);
          if (it == pending.end()) continue;
          Pending pd = std::move(it->second);
          pending.erase(it);
          Chunk& ch = *pd.chunk;
          if (auto bad = read_failure(d, pd.need)) {
            auto [s, r] = dataset->locate(ch.record);
            ch.error = std::make_exception_ptr(Error(bad->code(), record_name(s, r) + ": " + bad->what()));
          } else {
            io_bytes += static_cast<uint64_t>(d.result);
            c.io_records++;
            ch.stored = std::move(pd.buf);
            ch.skip = pd.skip;
          }
          finished.push_back(std::move(pd.chunk));
        }
      }
      c.io_wait_ns += waited;
      const uint64_t spent = nanos(Clock::now() - t0);
      c.io_busy_ns += spent - std::min(waited, spent);
      lock.lock();
      // The token IO thread lives until the run stops, past the epoch's last read: its
      // engine's figures are published with every read handed on, so stats() taken at
      // the end of an epoch has all of them.
      if (!finished.empty()) publish_io_stats();
      bool any_read = false;
      for (auto& ch : finished) {
        // A failed read goes the same way: the worker hands the error to the batches.
        ch->state = Chunk::State::kRead;
        enqueue(ch->waiters.empty() ? unpack_ahead : unpack_needed, ch);
        any_read = true;
      }
      if (any_read) ring->producer_cv.notify_all();
    }
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    if (!fatal) fatal = std::current_exception();
    ring->cv.notify_all();
  }
  if (lock.owns_lock()) lock.unlock();
  close_engine_run();  // before `pending` goes: no buffer is freed under the kernel
}

void Loader::Impl::plan_token_batch(TokenClaim& cl) {
  Job& job = *cl.job;
  const uint64_t k = job.k;
  const uint64_t len = sched->batch_length(k);
  const bool windowed = order->windowed();
  job.samples.resize(len);
  job.bad.assign(len, 0);
  // Every row is delivered unless its record fails (deliver_rows takes those back out):
  // counted once here, not by every hand-over.
  job.record_bytes.store(len * token_row_bytes, std::memory_order_relaxed);
  cl.row_chunk.resize(len);
  cl.src_row.resize(len);
  cl.needs.clear();
  // A rank's positions grow with j: the batch spans [position(k, 0), position(k, len-1)].
  cl.last_window = windowed && len ? order->window_of(sched->position(k, len - 1)) : 0;
  std::unordered_map<uint64_t, size_t> need_index;
  if (len) order->at_strided(sched->position(k, 0), sched->world_size(), len, job.samples.data());
  for (uint64_t j = 0; j < len; ++j) {
    const uint64_t pos = sched->position(k, j);
    auto [rec, r] = layout->locate(job.samples[j]);
    cl.src_row[j] = static_cast<uint32_t>(r);
    // A batch draws from about min(B, window) records: a short list, searched from the
    // most recent entry; a map only for wide windows.
    auto& needs = cl.needs;
    size_t q = needs.size();
    if (needs.size() <= 32) {
      for (size_t i = needs.size(); i-- > 0;)
        if (needs[i].record == rec) {
          q = i;
          break;
        }
    } else {
      if (need_index.empty())
        for (size_t i = 0; i < needs.size(); ++i) need_index.emplace(needs[i].record, i);
      if (auto f = need_index.find(rec); f != need_index.end()) q = f->second;
    }
    if (q == needs.size()) {
      if (!need_index.empty()) need_index.emplace(rec, q);
      const uint64_t retire_at = windowed ? order->window_positions(order->window_of(pos)).second
                                          : layout->group_begin(rec) + layout->group_size(rec);  // sequential: positions are rows
      needs.push_back({rec, retire_at});
    }
    cl.row_chunk[j] = static_cast<uint32_t>(q);
  }
  job.chunk_begin.assign(cl.needs.size() + 1, 0);
  for (uint64_t j = 0; j < len; ++j) job.chunk_begin[cl.row_chunk[j] + 1]++;
  for (size_t i = 0; i < cl.needs.size(); ++i) job.chunk_begin[i + 1] += job.chunk_begin[i];
  job.copies.resize(len);
  cl.fill.assign(job.chunk_begin.begin(), job.chunk_begin.end() - 1);
  for (uint64_t j = 0; j < len; ++j)
    job.copies[cl.fill[cl.row_chunk[j]]++] = RowCopy{cl.src_row[j], static_cast<uint32_t>(j)};
  uint8_t* idx = tensor_ptr(job, index_t);
  for (uint64_t j = 0; j < len; ++j) {
    const int64_t gi = static_cast<int64_t>(job.samples[j]);
    std::memcpy(idx + j * 8, &gi, 8);
  }
}

bool Loader::Impl::register_token_batch_locked(TokenClaim& cl) {
  const std::shared_ptr<Job>& job = cl.job;
  bool reads_queued = false;
  uint32_t q = 0;
  uint64_t waiting = 0;
  cl.loaded.clear();
  for (const TokenClaim::Need& n : cl.needs) {
    bool created = false;
    auto ch = chunk_for(n.record, n.retire_at, read_needed, &created);
    reads_queued |= created;
    // Read ahead and now needed: move it up.
    if (!created && ch->state == Chunk::State::kQueued) {
      enqueue(read_needed, ch);
      reads_queued = true;
    }
    if (!created && ch->state == Chunk::State::kRead) enqueue(unpack_needed, ch);
    if (ch->state != Chunk::State::kDone) {
      ch->waiters.emplace_back(job.get(), q);
      waiting++;
    } else {
      cl.loaded.emplace_back(q, std::move(ch));
    }
    ++q;
  }
  job->remaining += waiting;
  // Claims register out of order: a window is read ahead once, by whichever gets there
  // first (its records are listed only then, not by every claim).
  const uint64_t ahead = cl.last_window + 1;
  if (order->windowed() && !job->samples.empty() && ahead < order->window_count() && ahead >= prefetch_from) {
    prefetch_from = ahead + 1;
    const uint64_t retire_at = order->window_positions(ahead).second;
    for (uint64_t chunk_id : order->window_chunks(ahead)) {
      bool created = false;
      chunk_for(order->chunk_group(chunk_id), retire_at, read_ahead, &created);
      reads_queued |= created;
    }
  }
  claims_open.erase(job->k);
  return reads_queued;
}

void Loader::Impl::evict_chunks_locked() {
  // Records whose last position is behind the first position of every batch still to
  // register are done with (registered batches got or will get their rows handed over).
  const uint64_t horizon = registration_horizon_locked();
  if (horizon < min_retire_at) return;
  min_retire_at = UINT64_MAX;
  for (auto it = chunks.begin(); it != chunks.end();) {
    if (it->second->retire_at <= horizon && it->second->state == Chunk::State::kDone) {
      it = chunks.erase(it);
    } else {
      min_retire_at = std::min(min_retire_at, it->second->retire_at);
      ++it;
    }
  }
}

bool Loader::Impl::claim_token_batches(std::unique_lock<std::mutex>& lock, std::vector<TokenClaim>& claims) {
  // Several batches per claim when slots are free: one pass through the ring's lock for
  // them all, not two per batch (on a small machine a waiter on that lock is a context
  // switch and an idle core).
  constexpr size_t kMaxClaim = 4;
  size_t n = 0;
  for (size_t i = 0; i < ring->slots.size() && n < kMaxClaim && next_start < sched->num_batches(); ++i) {
    if (ring->slots[i]->state != Ring::State::kFree) continue;
    ring->slots[i]->state = Ring::State::kFilling;
    if (claims.size() <= n) claims.emplace_back();
    auto job = std::make_shared<Job>();
    job->k = next_start++;
    job->slot = i;
    job->mem = ring->slots[i]->mem;
    job->remaining = 1;  // the claim's own hold, until the rows already loaded are in
    jobs[job->k] = job;
    claims_open.insert(job->k);
    claims[n++].job = std::move(job);
  }
  if (n == 0) return false;
  // Records read and waiting to be decompressed, as each claimed row sees them (the
  // image path's figure is per sample too).
  for (size_t i = 0; i < n; ++i) c.queue_sum += sched->batch_length(claims[i].job->k) * unpack_needed.size();
  lock.unlock();
  for (size_t i = 0; i < n; ++i) plan_token_batch(claims[i]);
  lock.lock();
  bool reads_queued = false;
  for (size_t i = 0; i < n; ++i) reads_queued |= register_token_batch_locked(claims[i]);
  if (reads_queued) read_cv.notify_one();
  evict_chunks_locked();
  lock.unlock();
  for (size_t i = 0; i < n; ++i) {
    TokenClaim& cl = claims[i];
    uint64_t delivered = 0;
    for (const auto& [q, ch] : cl.loaded) delivered += deliver_rows(*cl.job, q, *ch, ch->rows);
    if (delivered) c.dec_samples += delivered;
    cl.loaded.clear();
    finish_one(*cl.job);
    cl.job.reset();
  }
  lock.lock();
  return true;
}

uint64_t Loader::Impl::deliver_rows(Job& job, uint32_t q, const Chunk& ch, const uint8_t* rows) {
  if (!rows && !ch.error)
    throw std::logic_error("token record " + std::to_string(ch.record) +
                           " was released while a batch still draws from it");
  const Field& f = dataset->schema().fields[token_field];
  const size_t tsize = dtype_size(f.dtype);
  uint8_t* tok = tensor_ptr(job, tokens_t);
  uint8_t* tgt = targets_t >= 0 ? tensor_ptr(job, targets_t) : nullptr;
  const TensorLayout& tl = tensors[tokens_t];
  uint64_t n = 0;
  for (uint32_t i = job.chunk_begin[q]; i < job.chunk_begin[q + 1]; ++i) {
    const auto [src_row, j] = job.copies[i];
    if (ch.error) {
      if (opt.on_error == OnError::kError) {
        job.fail(ch.error);
        return 0;
      }
      sample_failed(job, j, ch.error);  // every row of a bad record is skipped
      job.record_bytes.fetch_sub(token_row_bytes, std::memory_order_relaxed);
      continue;
    }
    const uint8_t* src = rows + src_row * token_row_bytes;
    copy_tokens(src, f.dtype, seq_len, tl.dtype, tok + j * tl.sample_bytes);
    if (tgt) copy_tokens(src + tsize, f.dtype, seq_len, tl.dtype, tgt + j * tl.sample_bytes);
    n++;
  }
  return n;
}

void Loader::Impl::token_worker_main(unsigned id) {
  pin_and_name_this_thread(cpu.cpus, "stoker-dec/" + std::to_string(id));
  std::vector<uint8_t> scratch;  // this worker's decompression buffer, kept hot
  std::vector<TokenClaim> claims;
  std::unique_lock<std::mutex> lock(ring->mu);
  try {
    while (!stop) {
      if (claim_token_batches(lock, claims)) continue;
      auto ch = dequeue(unpack_needed);
      if (!ch) ch = dequeue(unpack_ahead);
      if (ch) {
        ch->state = Chunk::State::kUnpacking;
        unpack_and_deliver(ch, scratch, lock);
        continue;
      }
      const auto w0 = Clock::now();
      ring->producer_cv.wait(lock);
      c.dec_wait_ns += nanos(Clock::now() - w0);
    }
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    if (!fatal) fatal = std::current_exception();
    ring->cv.notify_all();
  }
}

void Loader::Impl::process(DecodeTask& t, ImageDecoder& dec, std::vector<uint8_t>& scratch,
                           std::vector<uint8_t>& pixels) {
  Job& job = *t.job;
  const std::string where = record_name(t.shard, t.record);
  if (!t.io_error.empty()) throw Error(t.io_code, where + ": " + t.io_error);
  auto reader = dataset->shard(t.shard);
  const RecordLocation& loc = reader->location(t.record);
  std::span<const uint8_t> stored(t.buf->data() + t.skip, loc.stored_size);
  std::vector<std::span<const uint8_t>> fields;
  if (loc.flags & kRecordZstd) {
    scratch.resize(loc.raw_size);
    fields = unpack_record_into(dataset->schema(), loc, stored, scratch, where);
  } else {
    // Zero-copy: check the CRC and slice the fields out of the IO buffer.
    const uint32_t crc = crc32c(stored.data(), stored.size());
    if (crc != loc.crc) {
      char b[96];
      std::snprintf(b, sizeof b, ": checksum mismatch (stored 0x%08x, computed 0x%08x)", loc.crc, crc);
      throw Error(ErrorCode::kDataLoss, where + b);
    }
    size_t off = 0;
    for (uint32_t fs : loc.field_sizes) {
      fields.emplace_back(stored.data() + off, fs);
      off += fs;
    }
  }
  const uint64_t sample = job.samples[t.j];
  const uint64_t seed = sample_seed(order_opt.seed, epoch, sample);
  try {
    uint8_t* img = decode_images ? tensor_ptr(job, image_t) + t.j * image_bytes : nullptr;
    if (!decode_images) {
      // read and checked only
    } else if (opt.pixel_format == PixelFormat::kU8HWC) {
      dec.decode(fields[jpeg_field], opt.transform, seed, img, image_bytes);
    } else {
      const int S = opt.transform.size;
      pixels.resize(static_cast<size_t>(S) * S * 3);
      dec.decode(fields[jpeg_field], opt.transform, seed, pixels.data(), pixels.size());
      convert_pixels(pixels.data(), S, S, opt.pixel_format, opt.mean, opt.std, img);
    }
  } catch (const Error& e) {
    throw Error(e.code(), where + ": " + e.what());
  }
  int64_t label = -1;
  if (label_field >= 0) label = static_cast<int64_t>(internal::get_u64(fields[label_field].data()));
  std::memcpy(tensor_ptr(job, label_t) + t.j * 8, &label, 8);
  const int64_t gi = static_cast<int64_t>(sample);
  std::memcpy(tensor_ptr(job, index_t) + t.j * 8, &gi, 8);
  job.record_bytes.fetch_add(loc.stored_size, std::memory_order_relaxed);
}

void Loader::Impl::decode_main(unsigned id) {
  pin_and_name_this_thread(cpu.cpus, "stoker-dec/" + std::to_string(id));
  ImageDecoder dec;
  std::vector<uint8_t> scratch, pixels;
  for (;;) {
    DecodeTask t;
    {
      auto w0 = Clock::now();
      std::unique_lock<std::mutex> lock(qmu);
      qcv.wait(lock, [&] { return stop || !queue.empty(); });
      c.dec_wait_ns += nanos(Clock::now() - w0);
      if (stop) return;
      c.queue_sum += queue.size();
      t = std::move(queue.front());
      queue.pop_front();
    }
    auto b0 = Clock::now();
    try {
      process(t, dec, scratch, pixels);
      c.dec_samples++;
    } catch (...) {
      sample_failed(*t.job, t.j, std::current_exception());
    }
    t.buf.reset();  // the IO buffer goes back as soon as its last record is decoded
    c.dec_busy_ns += nanos(Clock::now() - b0);
    if (t.job) finish_one(*t.job);
  }
}

Loader::Loader(LoaderOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->setup();
}

Loader::~Loader() { impl_->stop_run(); }

std::optional<Batch> Loader::next() { return impl_->next_batch(true, nullptr); }

std::optional<Batch> Loader::try_next(bool* would_wait) {
  *would_wait = false;
  return impl_->next_batch(false, would_wait);
}

std::optional<Batch> Loader::Impl::next_batch(bool block, bool* would_wait) {
  Impl& m = *this;
  if (!m.running) m.start_run();
  if (m.delivered_error) std::rethrow_exception(m.delivered_error);
  if (m.tracker && m.last_report == Clock::time_point{}) m.last_report = Clock::now();
  for (;;) {
    const uint64_t k = m.next_deliver;
    if (k >= m.sched->num_batches()) {
      if (m.tracker && !m.reported_epoch_end) {
        m.reported_epoch_end = true;
        m.report(true);
      }
      return std::nullopt;
    }
    if (m.tracker && Clock::now() - m.last_report >= std::chrono::duration<double>(m.report_interval_s)) {
      m.last_report = Clock::now();
      m.report(false);
    }
    std::shared_ptr<Job> job;
    uint64_t n = 0;
    std::shared_ptr<RingLease> lease;
    {
      std::unique_lock<std::mutex> lock(m.ring->mu);
      auto w0 = Clock::now();
      if (!block) {
        auto it = m.jobs.find(k);
        // Not ready, or it must borrow samples from batches that may not be: the caller
        // waits elsewhere (a failed run also goes that way, to be rethrown there).
        if (it == m.jobs.end() || !it->second->ready || m.fatal || m.needs_compaction(*it->second, it->second->samples.size())) {
          *would_wait = true;
          return std::nullopt;
        }
      }
      try {
        job = m.wait_job(k, lock);
      } catch (...) {
        m.delivered_error = std::current_exception();
        throw;
      }
      m.jobs.erase(k);
      m.ring->slots[job->slot]->state = Ring::State::kLeased;
      lease = std::make_shared<RingLease>(m.ring, job->slot);
      {
        std::lock_guard<std::mutex> jl(job->mu);
        if (job->error) {
          m.delivered_error = job->error;
          std::rethrow_exception(job->error);
        }
      }
      n = job->samples.size();
      if (m.needs_compaction(*job, n)) {
        try {
          n = m.compact_batch(job, lock);
        } catch (...) {
          m.delivered_error = std::current_exception();
          throw;
        }
      }
      m.c.consumer_wait_ns += nanos(Clock::now() - w0);
      size_t ready = 0, free = 0;
      for (auto& s : m.ring->slots) {
        ready += s->state == Ring::State::kReady;
        free += s->state == Ring::State::kFree;
      }
      m.c.ready_sum += ready;
      m.c.free_sum += free;
      m.c.samples_n++;
    }
    m.next_deliver++;
    m.record_bytes_out += job->record_bytes.load(std::memory_order_relaxed);
    if (n == 0) continue;  // every sample of this batch was dropped or moved earlier
    if (m.opt.drop_last && n < m.opt.batch_size) {  // shortened by drops at the tail: every later batch is used up
      m.next_deliver = m.sched->num_batches();
      return std::nullopt;
    }
    return m.make_batch(job, n, std::move(lease));
  }
}

Batch Loader::Impl::make_batch(const std::shared_ptr<Job>& job, uint64_t n, std::shared_ptr<RingLease> lease) {
  Impl& m = *this;
  const uint64_t k = job->k;
  std::vector<TensorView> views;
  for (size_t t = 0; t < m.tensors.size(); ++t) {
    TensorView v;
    v.name = m.tensors[t].name;
    v.data = m.tensor_ptr(*job, static_cast<int>(t));
    v.dtype = m.tensors[t].dtype;
    v.shape.push_back(static_cast<int64_t>(n));
    for (int64_t d : m.tensors[t].sample_shape) v.shape.push_back(d);
    views.push_back(std::move(v));
  }
  if (m.batches_out == 0) m.first_batch_s = seconds(Clock::now() - m.run_start);
  m.batches_out++;
  m.samples_out += n;
  return Batch(std::move(views), std::move(lease), m.epoch, k, n);
}

void Loader::set_epoch(uint64_t e) {
  impl_->stop_run();
  impl_->epoch = e;
  impl_->start_consumed = 0;
}

uint64_t Loader::epoch() const noexcept { return impl_->epoch; }

uint64_t Loader::num_batches() const {
  const Impl& m = *impl_;
  if (m.sched) return m.sched->num_batches();
  RankSchedule s(m.layout->units(), m.opt.batch_size, m.rank.world_size, m.rank.rank, m.opt.drop_last,
                 m.start_consumed);
  return s.num_batches();
}

uint64_t Loader::epoch_samples() const noexcept { return impl_->layout->units(); }

OrderState Loader::state() const {
  const Impl& m = *impl_;
  OrderState s = OrderState::start(m.order_opt, m.layout->units(), m.epoch);
  if (m.running) s.consumed = m.sched->consumed_after(m.next_deliver);
  else s.consumed = m.start_consumed;
  return s;
}

void Loader::load_state(const OrderState& s) {
  s.check_matches(impl_->order_opt, impl_->layout->units());
  impl_->stop_run();
  impl_->epoch = s.epoch;
  impl_->start_consumed = s.consumed;
}

LoaderStats Loader::stats() const {
  LoaderStats s = impl_->snapshot();
  record_verdict(s, diagnose(FeedFigures::from(s)));
  return s;
}

void Loader::Impl::report(bool epoch_end) {
  const Verdict& v = tracker->update(snapshot());
  std::string line;
  if (report_json) {
    line = v.to_json();
    if (epoch_end) line.insert(1, "\"epoch_end\":true,\"epoch\":" + std::to_string(epoch) + ",");
  } else {
    line = (epoch_end ? "epoch " + std::to_string(epoch) + " done: " : std::string()) + v.summary();
  }
  if (opt.report_sink) opt.report_sink(line);
  else std::fprintf(stderr, "stoker: %s\n", line.c_str());
}

LoaderStats Loader::Impl::snapshot() const {
  const Impl& m = *this;
  LoaderStats s;
  s.wall_s = m.running ? seconds(Clock::now() - m.run_start) : 0;
  s.first_batch_s = m.first_batch_s;
  s.batches = m.batches_out;
  s.samples = m.samples_out;
  s.bytes_read = m.io_bytes;
  s.record_bytes = m.record_bytes_out;
  s.skipped = m.c.skipped;
  s.tokens = m.tokens;
  s.io.threads = 1;
  s.io.busy_s = m.c.io_busy_ns / 1e9;
  s.io.wait_s = m.c.io_wait_ns / 1e9;
  s.io.items = m.c.io_records;
  s.decode.threads = m.threads;
  s.decode.busy_s = m.c.dec_busy_ns / 1e9;
  s.decode.wait_s = m.c.dec_wait_ns / 1e9;
  s.decode.items = m.c.dec_samples;
  s.consumer_wait_s = m.c.consumer_wait_ns / 1e9;
  const double n = static_cast<double>(std::max<uint64_t>(1, m.c.samples_n));
  s.slots_ready_avg = m.c.ready_sum / n;
  s.slots_free_avg = m.c.free_sum / n;
  s.decode_queue_avg = m.c.dec_samples ? static_cast<double>(m.c.queue_sum) / std::max<uint64_t>(1, m.c.dec_samples) : 0;
  {
    std::lock_guard<std::mutex> lock(m.ring->mu);
    s.slots = static_cast<unsigned>(m.ring->slots.size());
  }
  {
    std::lock_guard<std::mutex> lock(m.io_stats_mu);
    s.io_engine = m.io_stats;
  }
  s.cpu_explanation = m.cpu.explanation;
  s.slot_memory = m.ring->alloc->name();
  return s;
}

const LoaderOptions& Loader::options() const noexcept { return impl_->opt; }
int Loader::rank() const noexcept { return static_cast<int>(impl_->rank.rank); }
int Loader::world_size() const noexcept { return static_cast<int>(impl_->rank.world_size); }
const std::vector<std::string>& Loader::class_names() const noexcept { return impl_->dataset->manifest().class_names; }


std::string LoaderStats::to_json() const {
  auto stage = [&](const StageStats& st) {
    return "{\"threads\":" + std::to_string(st.threads) + ",\"busy_s\":" + internal::json_num(st.busy_s) + ",\"wait_s\":" +
           internal::json_num(st.wait_s) + ",\"items\":" + std::to_string(st.items) + ",\"busy_frac\":" + internal::json_num(st.busy_frac(wall_s)) + "}";
  };
  std::string j = "{";
  j += "\"wall_s\":" + internal::json_num(wall_s);
  j += ",\"first_batch_s\":" + internal::json_num(first_batch_s);
  j += ",\"batches\":" + std::to_string(batches);
  j += ",\"samples\":" + std::to_string(samples);
  j += ",\"samples_per_s\":" + internal::json_num(wall_s > 0 ? samples / wall_s : 0);
  j += ",\"bytes_read\":" + std::to_string(bytes_read);
  j += ",\"record_bytes\":" + std::to_string(record_bytes);
  j += ",\"skipped\":" + std::to_string(skipped);
  j += ",\"tokens\":" + std::string(tokens ? "true" : "false");
  j += ",\"io\":" + stage(io);
  j += ",\"decode\":" + stage(decode);
  j += ",\"consumer_wait_s\":" + internal::json_num(consumer_wait_s);
  j += ",\"consumer_wait_frac\":" + internal::json_num(wall_s > 0 ? consumer_wait_s / wall_s : 0);
  j += ",\"decode_queue_avg\":" + internal::json_num(decode_queue_avg);
  j += ",\"slots\":" + std::to_string(slots);
  j += ",\"slots_ready_avg\":" + internal::json_num(slots_ready_avg);
  j += ",\"slots_free_avg\":" + internal::json_num(slots_free_avg);
  j += ",\"io_engine\":" + internal::json_str(io_engine.engine);
  j += ",\"io_direct\":" + std::string(io_engine.direct ? "true" : "false");
  j += ",\"io_fallback\":" + internal::json_str(io_engine.fallback_reason);
  j += ",\"slot_memory\":" + internal::json_str(slot_memory);
  j += ",\"cpus\":" + internal::json_str(cpu_explanation);
  j += ",\"bottleneck\":" + internal::json_str(bottleneck);
  j += ",\"evidence\":" + internal::json_str(evidence);
  j += ",\"advice\":" + internal::json_str(advice);
  return j + "}";
}

std::string LoaderStats::summary() const {
  char b[512];
  std::snprintf(b, sizeof b,
                "%.0f samples/s over %.2f s; io %.0f%% busy; decode %u thread%s %.0f%% busy; consumer waited %.0f%%; "
                "%.1f of %u slots ready on average",
                wall_s > 0 ? samples / wall_s : 0.0, wall_s, 100 * io.busy_frac(wall_s), decode.threads,
                decode.threads == 1 ? "" : "s", 100 * decode.busy_frac(wall_s),
                wall_s > 0 ? 100 * consumer_wait_s / wall_s : 0.0, slots_ready_avg, slots);
  return b;
}

}  // namespace stoker
