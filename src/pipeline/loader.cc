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
#include "util/huge_pages.h"
#include "util/json_text.h"
#include "util/stream_copy.h"

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
  std::vector<std::pair<void*, size_t>> blocks;  // what `alloc` gave, freed with the ring

  ~Ring() {
    for (auto& [p, bytes] : blocks) alloc->deallocate(p, bytes);
  }
  // The ring's first slots come in one block: small slots (token batches) then share huge
  // pages and one pinned allocation instead of one each. Slots stay page-aligned.
  void add_slots_locked(size_t n) {
    if (n == 0) return;
    const size_t stride = (slot_bytes + 4095) / 4096 * 4096;
    auto* block = static_cast<uint8_t*>(alloc->allocate(n * stride));
    blocks.emplace_back(block, n * stride);
    for (size_t i = 0; i < n; ++i) {
      auto s = std::make_unique<Slot>();
      s->mem = block + i * stride;
      slots.push_back(std::move(s));
    }
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

struct Job {
  uint64_t k = 0;
  size_t slot = 0;
  uint8_t* mem = nullptr;  // the slot's memory, taken with the slot (the ring's list may grow meanwhile)
  std::vector<uint64_t> samples;
  std::mutex mu;
  std::exception_ptr error;
  std::atomic<uint64_t> record_bytes{0};  // images: added per sample; tokens: set when claimed
  std::vector<uint8_t> bad;   // OnError::kSkip: samples dropped (set before `remaining` hits 0)
  bool any_bad = false;
  uint64_t taken_front = 0;   // consumer only: good samples moved into an earlier batch
  bool ready = false;         // guarded by Ring::mu
  // Hand-overs left (images: samples; tokens: windows the batch draws from). On a line
  // of its own: the threads that count it down in turn leave the fields above, which
  // they only read, cached on every side.
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

// One shuffle window of token records as this rank draws from it: the rank's samples
// in the window (its schedule's samples i0 .. i1-1), per sample its global row and where
// that row is (a record of the window, a row of that record), and the records to read.
// Planned once, read by the IO thread, then decompressed and handed out by one worker.
struct TokenWindow {
  uint64_t i0 = 0, i1 = 0;
  std::vector<uint64_t> units;           // per sample: its global row (the `index` field)
  std::vector<uint32_t> rec_of, row_of;  // per sample: its record (in `recs`) and row in it
  // The samples grouped by record: record q's are by_rec[rec_begin[q] .. rec_begin[q + 1]).
  std::vector<uint32_t> by_rec, rec_begin;
  struct Rec {
    uint64_t record = 0;
    std::shared_ptr<IoBuffer> stored;  // the read, until decompressed
    uint64_t skip = 0;                 // where the record starts in `stored`
    size_t rows_at = 0;                // where its first row is once decompressed
    std::exception_ptr error;          // it could not be read, checked or decompressed
  };
  std::vector<Rec> recs;
  std::vector<uint32_t> arrived;  // records read (or failed), in completion order; guarded by Ring::mu
  // Kept windows (shared by the workers; guarded by Ring::mu but for `buf`, whose record
  // r belongs to the worker that took it): every record decompressed into `buf`, then the
  // batches k_first..k_last filled from it.
  internal::PageBuffer buf;
  uint64_t k_first = 0, k_last = 0;
  size_t next_unpack = 0, unpacked = 0;  // into `arrived`; records done
  uint64_t next_fill = 0, filled = 0;    // the next batch to hand out; batches done
};

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

// A token worker's time, every moment of it busy or waiting: planning windows, claiming
// slots and finishing batches are work as much as decompressing is (left uncounted, one
// worker that never waited read 86-96 % busy, and the verdict weighed that).
class WorkerClock {
 public:
  explicit WorkerClock(Counters& c) : c_(c), mark_(Clock::now()) {}
  WorkerClock(const WorkerClock&) = delete;
  WorkerClock& operator=(const WorkerClock&) = delete;
  ~WorkerClock() { charge_busy(); }
  /// Counts the time since the last charge as busy: after each piece of work, so stats
  /// taken mid-run see it.
  void charge_busy() {
    const auto now = Clock::now();
    c_.dec_busy_ns += nanos(now - mark_);
    mark_ = now;
  }
  void wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock) {
    charge_busy();
    cv.wait(lock);
    const auto now = Clock::now();
    c_.dec_wait_ns += nanos(now - mark_);
    mark_ = now;
  }

 private:
  Counters& c_;
  Clock::time_point mark_;
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
  std::atomic<bool> running{false};  // atomic, like the figures below: stats() may run on any thread
  uint64_t next_deliver = 0;   // consumer side
  uint64_t next_start = 0;     // the next batch to get a slot (guarded by ring->mu)
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
  // Token data (guarded by ring->mu). The decode workers schedule themselves, a shuffle
  // window at a time, with no hand-off per batch or per record: a worker takes the next
  // window (its records were read ahead), claims the slots of the batches drawing from
  // it when the ring has them free, and copies each record's rows into them right after
  // decompressing it; with too few free slots the window is kept, and every worker helps
  // decompress its records and fill its batches as slots come. Slots are claimed in batch
  // order. A batch that straddles windows is finished by the last of their workers. The
  // IO thread reads the records of the windows planned so far, in window order (O_DIRECT
  // where it can: no copy on the CPUs); a window is planned, and its reads queued, one
  // ahead of the windows taken.
  uint64_t next_window = 0;    // the next window a worker takes
  uint64_t windows_end = 0;    // one past the last window holding this rank's samples
  uint64_t planned_to = 0;     // windows below this are planned (or being planned)
  std::map<uint64_t, std::shared_ptr<TokenWindow>> planned;  // planned, not taken yet
  std::deque<std::pair<std::shared_ptr<TokenWindow>, uint32_t>> to_read;  // (window, record)
  uint64_t records_waiting = 0;        // read and not yet decompressed (the queue figure)
  std::condition_variable read_cv;     // the token IO thread's: reads queued, stop
  std::condition_variable window_cv;   // the token workers': records read, window planned, stop
  size_t token_capacity = 0;           // the largest record's raw size
  // Windows kept decompressed, oldest first, that every worker helps with (at most two:
  // the footprint stays about two windows of records, the parallelism that of a window's
  // records), and their buffers, reused.
  std::deque<std::shared_ptr<TokenWindow>> kept;
  std::vector<internal::PageBuffer> kept_buffers;  // on huge pages: rows are copied through them
  size_t kept_buffer_records = 0;                  // what each buffer in kept_buffers holds, at least
  /// ring->mu held (or no worker running): keeps a window's buffer for reuse, unless a
  /// wider window has made buffers larger since it was mapped. (A rank's window holds
  /// only the records it draws rows from, so windows differ in width: world size > 1, a
  /// resume, the last one.)
  void return_kept_buffer(internal::PageBuffer buf) {
    if (buf && buf.size() >= kept_buffer_records * token_capacity) kept_buffers.push_back(std::move(buf));
  }

  Counters c;
  // Reporting: interval verdicts, smoothed so a steady feed does not flip-flop.
  double report_interval_s = 0;
  bool report_json = false;
  std::unique_ptr<BottleneckTracker> tracker;
  Clock::time_point last_report{};
  void report(bool epoch_end);
  bool reported_epoch_end = false;
  LoaderStats snapshot() const;
  // The consumer's figures, written by next() and read by stats() from any thread.
  std::atomic<Clock::time_point> run_start{};
  std::atomic<double> first_batch_s{0};
  std::atomic<uint64_t> batches_out{0}, samples_out{0}, record_bytes_out{0};
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
  // Token windows. Windows are the order's shuffle windows; sequential order, which has
  // none, is cut into runs of `window_chunks` records.
  std::pair<uint64_t, uint64_t> token_window_positions(uint64_t w) const;
  uint64_t token_window_of(uint64_t position) const;
  /// Sequential order: the records [first, last) of window w.
  std::pair<uint64_t, uint64_t> sequential_window_records(uint64_t w) const;
  /// This rank's schedule samples [i0, i1) whose positions lie in [begin, end).
  std::pair<uint64_t, uint64_t> rank_samples_in(uint64_t begin, uint64_t end) const;
  uint64_t rank_samples() const;  ///< this rank's samples in the run
  /// The position of the rank's schedule sample i (sample j of batch k is i = k*B + j).
  uint64_t rank_position(uint64_t i) const { return sched->start() + rank.rank + i * rank.world_size; }
  /// The most batches one window's rows can touch for this rank.
  uint64_t token_batches_per_window() const;
  /// Ring slots for every worker to hold a window's batches, plus a window's more.
  size_t direct_token_slots() const { return (threads + 1) * token_batches_per_window(); }
  /// Works out window w: the rank's samples in it, their rows and records.
  std::shared_ptr<TokenWindow> plan_token_window(uint64_t w) const;
  /// ring->mu held (released while planning): plans the windows below `upto` not planned
  /// yet and queues their reads.
  void plan_windows_locked(std::unique_lock<std::mutex>& lock, uint64_t upto);
  /// ring->mu held: batch k's job, claiming slots in batch order (waiting for free ones)
  /// up to k if it is not claimed yet; nullptr when the run stops.
  std::shared_ptr<Job> token_job_locked(uint64_t k, std::unique_lock<std::mutex>& lock, WorkerClock& clock);
  /// Checks and decompresses record r of `win` into `out`; keeps the error in the record.
  void unpack_window_record(TokenWindow& win, uint32_t r, uint8_t* out);
  /// Puts window sample s (its row at `src`, or its record's error) into its place in `job`;
  /// returns whether a row went in.
  bool put_token_row(Job& job, const TokenWindow& win, uint64_t s, const uint8_t* src);
  /// Copies the rows batch k draws from `win` (records decompressed at `buf`, `token_capacity`
  /// apart) into its slot, or hands their record's error to it.
  void fill_token_batch(Job& job, const TokenWindow& win, const uint8_t* buf);
  /// ring->mu held (released while working): one piece of work on the kept windows —
  /// decompress a record that has been read, or fill the next batch of the oldest window
  /// still handing batches out once its records are all in; false when there is none.
  bool work_on_kept_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock);
  /// ring->mu held (released while working): a window taken by this worker alone,
  /// direct: its batches are claimed, each record's rows copied in as it is decompressed.
  void fill_window_direct_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock, TokenWindow& win,
                                 std::vector<std::shared_ptr<Job>>& batches, std::vector<uint8_t>& scratch);
  void finish_one(Job& job);
  void finish_all(const std::vector<std::shared_ptr<Job>>& jobs);
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
        token_capacity = std::max<size_t>(token_capacity, loc.raw_size);
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
    const size_t fit = kAutoRingBytes / std::max<size_t>(1, off);
    opt.slots = static_cast<unsigned>(std::clamp<size_t>(fit, 4, 64));
    // Tokens: room for the batches of a window per worker and one more for the consumer
    // to drain, so the workers can copy rows straight from a just-decompressed record
    // into their batches (see token_worker_main), as far as the memory allows.
    if (tokens) opt.slots = static_cast<unsigned>(std::clamp<size_t>(direct_token_slots(), opt.slots, std::max<size_t>(fit, 4)));
  }
  ring->add_slots_locked(opt.slots);
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
  if (tokens) {
    const uint64_t n = rank_samples();
    const uint64_t first = n ? token_window_of(rank_position(0)) : 0;
    next_window = planned_to = first;
    windows_end = n ? token_window_of(rank_position(n - 1)) + 1 : first;
  }
  c.reset();
  io_bytes = 0;
  first_batch_s = 0;
  batches_out = 0;
  samples_out = 0;
  record_bytes_out = 0;
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
  for (auto& win : kept) return_kept_buffer(std::move(win->buf));
  kept.clear();
  planned.clear();
  to_read.clear();
  next_window = windows_end = planned_to = 0;
  records_waiting = 0;
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
  window_cv.notify_all();
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

// A direct window's batches, finished together: one wake-up decision for all of them,
// where finish_one for each would wake the consumer for the first few and make it sleep
// again (a quarter fewer context switches of a 2-thread token run).
void Loader::Impl::finish_all(const std::vector<std::shared_ptr<Job>>& done) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    for (const auto& job : done) {
      if (job->remaining.fetch_sub(1) != 1) continue;
      job->ready = true;
      ring->slots[job->slot]->state = Ring::State::kReady;
    }
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
    // Batch k cannot start while no slot is free or filling: the consumer holds every
    // slot, or (kSkip) it is filling a batch from later ones past a run of bad samples
    // longer than the ring, and those later batches sit ready in the other slots until
    // this one goes out. Grow, or nothing moves again.
    if (it == jobs.end()) {
      bool can_start = false, all_held = true;
      for (auto& s : ring->slots) {
        can_start |= s->state == Ring::State::kFree || s->state == Ring::State::kFilling;
        all_held &= s->state == Ring::State::kLeased;
      }
      if (!can_start) {
        const std::string why = all_held ? "every batch slot (" + std::to_string(ring->slots.size()) + ") is held by the caller"
                                         : "skipped samples: filling batch " + std::to_string(next_deliver) +
                                               " takes more later batches than the ring's " +
                                               std::to_string(ring->slots.size()) + " slots hold";
        if (!opt.grow_when_held)
          throw_error(ErrorCode::kResourceExhausted, why + "; " + (all_held ? "release batches" : "raise `slots`") +
                                                         " or enable grow_when_held");
        if (!warned_grow.exchange(true))
          std::fprintf(stderr, "stoker: warning: %s; adding slots so the loader can go on (memory now grows with %s)\n",
                       why.c_str(), all_held ? "the batches kept; release batches to keep it bounded" : "the run of bad samples");
        ring->add_slots_locked(1);
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
      // or the records of the token windows in flight.
      uint64_t need;
      if (tokens) {
        // A window per worker being decompressed, the next one read ahead, one to spare.
        const uint64_t window = std::max<uint64_t>(1, order_opt.window_chunks);
        need = (threads + 2) * window * (largest_stored + 2 * kDirectAlignment);
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
    internal::stream_copy(dst, src, n * dtype_size(dt));  // the slot is not read before the batch is out
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

std::pair<uint64_t, uint64_t> Loader::Impl::sequential_window_records(uint64_t w) const {
  const uint64_t per = std::max<uint64_t>(1, order_opt.window_chunks);
  const uint64_t first = std::min<uint64_t>(w * per, layout->groups());
  return {first, std::min<uint64_t>(first + per, layout->groups())};
}

std::pair<uint64_t, uint64_t> Loader::Impl::token_window_positions(uint64_t w) const {
  if (order->windowed()) return order->window_positions(w);
  const auto [first, last] = sequential_window_records(w);
  return {layout->group_begin(first), layout->group_begin(last)};  // sequential: positions are rows
}

uint64_t Loader::Impl::token_window_of(uint64_t position) const {
  if (order->windowed()) return order->window_of(position);
  return layout->locate(position).first / std::max<uint64_t>(1, order_opt.window_chunks);
}

uint64_t Loader::Impl::token_batches_per_window() const {
  uint64_t rows = 0;  // the largest record's rows
  for (size_t g = 0; g < layout->groups(); ++g) rows = std::max(rows, layout->group_size(g));
  const uint64_t window_rows = std::max<uint64_t>(1, order_opt.window_chunks) * rows;
  const uint64_t rank_rows = (window_rows + rank.world_size - 1) / rank.world_size;
  return (rank_rows + opt.batch_size - 1) / opt.batch_size + 1;  // + 1: a window's edges fall inside batches
}

uint64_t Loader::Impl::rank_samples() const {
  const uint64_t nb = sched->num_batches();
  return nb ? (nb - 1) * opt.batch_size + sched->batch_length(nb - 1) : 0;
}

std::pair<uint64_t, uint64_t> Loader::Impl::rank_samples_in(uint64_t begin, uint64_t end) const {
  // The inverse of rank_position: positions base + i * world.
  const uint64_t base = rank_position(0), world = rank.world_size, n = rank_samples();
  auto first_from = [&](uint64_t p) { return std::min<uint64_t>(n, p <= base ? 0 : (p - base + world - 1) / world); };
  const uint64_t i0 = first_from(begin);
  return {i0, std::max(i0, first_from(end))};
}

std::shared_ptr<TokenWindow> Loader::Impl::plan_token_window(uint64_t w) const {
  auto win = std::make_shared<TokenWindow>();
  const auto [begin, end] = token_window_positions(w);
  std::tie(win->i0, win->i1) = rank_samples_in(begin, end);
  const uint64_t n = win->i1 - win->i0;
  win->units.resize(n);
  win->rec_of.resize(n);
  win->row_of.resize(n);
  // Per sample, its record's place among the window's records, and those records:
  // found once per record, not searched for per sample. (Token windows are kTokenWindow
  // or sequential; a kTokenWindow chunk is a whole record, so the places are distinct
  // records.)
  std::vector<uint32_t> place(n);
  std::vector<uint64_t> place_record;
  if (order->windowed()) {
    if (n) order->at_strided(rank_position(win->i0), rank.world_size, n, win->units.data(), place.data());
    for (uint64_t chunk : order->window_chunks(w)) place_record.push_back(order->chunk_group(chunk));
  } else {  // sequential: the window is a run of records in storage order
    if (n) order->at_strided(rank_position(win->i0), rank.world_size, n, win->units.data());
    const auto [first, last] = sequential_window_records(w);
    for (uint64_t g = first; g < last; ++g) place_record.push_back(g);
    for (uint64_t s = 0; s < n; ++s) place[s] = static_cast<uint32_t>(layout->locate(win->units[s]).first - first);
  }
  // Only the records the rank draws from are read: with many ranks some may have none.
  auto& recs = win->recs;
  std::vector<uint32_t> rec_at(place_record.size(), UINT32_MAX);
  std::vector<uint64_t> first_row;  // per record in `recs`: the global row of its first row
  for (uint64_t s = 0; s < n; ++s) {
    uint32_t& q = rec_at[place[s]];
    if (q == UINT32_MAX) {
      q = static_cast<uint32_t>(recs.size());
      recs.emplace_back().record = place_record[place[s]];
      first_row.push_back(layout->group_begin(place_record[place[s]]));
    }
    win->rec_of[s] = q;
    win->row_of[s] = static_cast<uint32_t>(win->units[s] - first_row[q]);
  }
  win->rec_begin.assign(recs.size() + 1, 0);
  for (uint64_t s = 0; s < n; ++s) win->rec_begin[win->rec_of[s] + 1]++;
  for (size_t q = 0; q < recs.size(); ++q) win->rec_begin[q + 1] += win->rec_begin[q];
  win->by_rec.resize(n);
  std::vector<uint32_t> fill(win->rec_begin.begin(), win->rec_begin.end() - 1);
  for (uint64_t s = 0; s < n; ++s) win->by_rec[fill[win->rec_of[s]]++] = static_cast<uint32_t>(s);
  return win;
}

void Loader::Impl::plan_windows_locked(std::unique_lock<std::mutex>& lock, uint64_t upto) {
  upto = std::min(upto, windows_end);
  while (planned_to < upto && !stop) {
    const uint64_t w = planned_to++;
    lock.unlock();
    auto win = plan_token_window(w);
    lock.lock();
    for (uint32_t r = 0; r < win->recs.size(); ++r) to_read.emplace_back(win, r);
    planned.emplace(w, std::move(win));
    read_cv.notify_one();
    window_cv.notify_all();
  }
}

std::shared_ptr<Job> Loader::Impl::token_job_locked(uint64_t k, std::unique_lock<std::mutex>& lock, WorkerClock& clock) {
  const uint64_t B = opt.batch_size;
  for (;;) {
    if (stop) return nullptr;
    if (auto it = jobs.find(k); it != jobs.end()) return it->second;
    if (k < next_start)
      throw std::logic_error("token batch " + std::to_string(k) + " went out while a window still had rows for it");
    // Slots are claimed in batch order, whoever needs them: the consumer takes batches in
    // that order, so the lowest batch not out yet always has its slot.
    size_t slot = ring->slots.size();
    for (size_t i = 0; i < ring->slots.size(); ++i)
      if (ring->slots[i]->state == Ring::State::kFree) {
        slot = i;
        break;
      }
    if (slot == ring->slots.size()) {
      clock.wait(ring->producer_cv, lock);
      continue;
    }
    ring->slots[slot]->state = Ring::State::kFilling;
    auto job = std::make_shared<Job>();
    job->k = next_start++;
    job->slot = slot;
    job->mem = ring->slots[slot]->mem;
    const uint64_t len = sched->batch_length(job->k);
    job->samples.resize(len);
    job->bad.assign(len, 0);
    // Every row is delivered unless its record fails (taken back out then).
    job->record_bytes.store(len * token_row_bytes, std::memory_order_relaxed);
    // One hand-over per window the batch draws rows from.
    const uint64_t lo = job->k * B, hi = lo + len;
    uint64_t parts = 0;
    for (uint64_t w = token_window_of(rank_position(lo)); w <= token_window_of(rank_position(hi - 1)); ++w) {
      const auto [begin, end] = token_window_positions(w);
      const auto [i0, i1] = rank_samples_in(begin, end);
      parts += std::max(i0, lo) < std::min(i1, hi);
    }
    job->remaining = parts;
    c.queue_sum += len * records_waiting;
    jobs[job->k] = job;
    // A worker waiting for a slot for a later batch may have been the one woken for this
    // slot: the others re-check whether their batch exists now.
    ring->producer_cv.notify_all();
  }
}

void Loader::Impl::unpack_window_record(TokenWindow& win, uint32_t r, uint8_t* out) {
  TokenWindow::Rec& rec = win.recs[r];
  if (!rec.error) {
    auto [s, rr] = dataset->locate(rec.record);
    try {
      const RecordLocation& loc = dataset->shard(s)->location(rr);
      if (loc.raw_size > token_capacity)
        throw Error(ErrorCode::kDataLoss, "raw size " + std::to_string(loc.raw_size) + " exceeds what the shard index promised");
      auto fields = unpack_record_into(dataset->schema(), loc, {rec.stored->data() + rec.skip, loc.stored_size},
                                       {out, token_capacity}, record_name(s, rr));
      rec.rows_at = static_cast<size_t>(fields[static_cast<size_t>(token_field)].data() - out);
    } catch (const Error& e) {
      rec.error = std::make_exception_ptr(naming(e, record_name(s, rr)));
    } catch (...) {
      rec.error = std::current_exception();
    }
  }
  rec.stored.reset();  // the read buffer goes back to the engine's slab
}

bool Loader::Impl::put_token_row(Job& job, const TokenWindow& win, uint64_t s, const uint8_t* src) {
  const uint64_t j = win.i0 + s - job.k * opt.batch_size;
  job.samples[j] = win.units[s];
  const int64_t gi = static_cast<int64_t>(win.units[s]);
  std::memcpy(tensor_ptr(job, index_t) + j * 8, &gi, 8);
  const TokenWindow::Rec& rec = win.recs[win.rec_of[s]];
  if (rec.error) {
    if (opt.on_error == OnError::kError) {
      job.fail(rec.error);
      return false;
    }
    sample_failed(job, static_cast<uint32_t>(j), rec.error);  // every row of a bad record is skipped
    job.record_bytes.fetch_sub(token_row_bytes, std::memory_order_relaxed);
    return false;
  }
  const DType stored = dataset->schema().fields[static_cast<size_t>(token_field)].dtype;
  const TensorLayout& tl = tensors[static_cast<size_t>(tokens_t)];
  copy_tokens(src, stored, seq_len, tl.dtype, tensor_ptr(job, tokens_t) + j * tl.sample_bytes);
  if (targets_t >= 0)
    copy_tokens(src + dtype_size(stored), stored, seq_len, tl.dtype, tensor_ptr(job, targets_t) + j * tl.sample_bytes);
  return true;
}

void Loader::Impl::fill_token_batch(Job& job, const TokenWindow& win, const uint8_t* buf) {
  const uint64_t lo = job.k * opt.batch_size, hi = lo + job.samples.size();
  const uint64_t from = std::max(lo, win.i0), to = std::min(hi, win.i1);
  uint64_t delivered = 0;
  for (uint64_t i = from; i < to; ++i) {
    const uint64_t s = i - win.i0;
    const uint32_t q = win.rec_of[s];
    delivered += put_token_row(job, win, s, buf + q * token_capacity + win.recs[q].rows_at + win.row_of[s] * token_row_bytes);
  }
  c.dec_samples += delivered;
}

void Loader::Impl::token_io_main() {
  pin_and_name_this_thread(cpu.cpus, "stoker-io");
  if (!open_engine()) return;
  struct Pending {
    std::shared_ptr<TokenWindow> win;
    uint32_t r = 0;
    std::shared_ptr<IoBuffer> buf;
    uint64_t skip = 0;
    uint64_t need = 0;  // skip + stored size: what a complete read returns at least
  };
  std::unordered_map<uint64_t, Pending> pending;
  uint64_t next_tag = 1;
  std::vector<ReadCompletion> done;
  std::vector<std::pair<std::shared_ptr<TokenWindow>, uint32_t>> batch, finished;
  const size_t depth = std::max<size_t>(1, opt.io.queue_depth);
  std::unique_lock<std::mutex> lock(ring->mu);
  try {
    while (!stop) {
      batch.clear();
      while (pending.size() + batch.size() < depth && !to_read.empty()) {
        batch.push_back(std::move(to_read.front()));
        to_read.pop_front();
      }
      if (batch.empty() && pending.empty()) {
        const auto w0 = Clock::now();
        read_cv.wait(lock);
        c.io_wait_ns += nanos(Clock::now() - w0);
        continue;
      }
      lock.unlock();
      const auto t0 = Clock::now();
      uint64_t waited = 0;
      finished.clear();  // read, or failed (the record's error set)
      std::vector<ReadRequest> reqs;
      for (auto& [win, r] : batch) {
        TokenWindow::Rec& rec = win->recs[r];
        auto [s, rr] = dataset->locate(rec.record);
        try {
          auto reader = dataset->shard(s);  // opens lazily; checks the shard against the manifest
          if (file_ids[s] < 0) file_ids[s] = engine->add_file(dataset->shard_path(s));
          const uint32_t fid = static_cast<uint32_t>(file_ids[s]);
          const RecordLocation& loc = reader->location(rr);
          const RecordRange range{fid, loc.offset, loc.stored_size, engine->file_size(fid)};
          PlanOptions po;
          po.alignment = engine->direct() ? kDirectAlignment : 1;
          const ReadPlan plan = plan_reads({&range, 1}, po);
          const auto& rd = plan.reads.at(0);
          Pending pd{win, r, std::make_shared<IoBuffer>(engine->alloc(rd.length)), plan.records.at(0).skip, 0};
          pd.need = pd.skip + loc.stored_size;
          const uint64_t tag = next_tag++;
          reqs.push_back(ReadRequest{rd.file, rd.offset, static_cast<uint32_t>(rd.length), pd.buf->data(), tag});
          pending.emplace(tag, std::move(pd));
        } catch (const Error& e) {
          // A missing or replaced shard: the record fails like a bad read would.
          rec.error = std::make_exception_ptr(naming(e, record_name(s, rr)));
          finished.emplace_back(win, r);
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
          TokenWindow::Rec& rec = pd.win->recs[pd.r];
          if (auto bad = read_failure(d, pd.need)) {
            auto [s, rr] = dataset->locate(rec.record);
            rec.error = std::make_exception_ptr(Error(bad->code(), record_name(s, rr) + ": " + bad->what()));
          } else {
            io_bytes += static_cast<uint64_t>(d.result);
            c.io_records++;
            rec.stored = std::move(pd.buf);
            rec.skip = pd.skip;
          }
          finished.emplace_back(std::move(pd.win), pd.r);
        }
      }
      c.io_wait_ns += waited;
      const uint64_t spent = nanos(Clock::now() - t0);
      c.io_busy_ns += spent - std::min(waited, spent);
      lock.lock();
      if (finished.empty()) continue;
      // The token IO thread lives until the run stops, past the epoch's last read: its
      // engine's figures are published with every read handed on, so stats() taken at
      // the end of an epoch has all of them.
      publish_io_stats();
      for (auto& [win, r] : finished) win->arrived.push_back(r);  // a failed read goes the same way
      records_waiting += finished.size();
      finished.clear();
      window_cv.notify_all();
    }
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    if (!fatal) fatal = std::current_exception();
    ring->cv.notify_all();
  }
  if (lock.owns_lock()) lock.unlock();
  close_engine_run();  // before `pending` goes: no buffer is freed under the kernel
}

bool Loader::Impl::work_on_kept_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock) {
  // Batches are filled window by window: a later window hands out batches only once the
  // earlier ones have handed out all of theirs, so a worker waiting for a slot never
  // leaves claimed batches of an earlier window without a worker to fill them.
  bool earlier_filling = false;
  for (size_t x = 0; x < kept.size(); ++x) {
    const std::shared_ptr<TokenWindow> win = kept[x];
    if (win->next_unpack < win->arrived.size()) {
      const uint32_t r = win->arrived[win->next_unpack++];
      records_waiting--;
      lock.unlock();
      // Straight into the window's buffer. (Through a hot per-worker buffer streamed into
      // it was slower once the window buffers were on huge pages: window_chunks 256, 2
      // threads, 482-613 k vs 603-626 k rows/s, alternated.)
      unpack_window_record(*win, r, win->buf.get() + r * token_capacity);
      clock.charge_busy();
      lock.lock();
      if (++win->unpacked == win->recs.size()) window_cv.notify_all();  // its batches can be filled
      return true;
    }
    const bool all_in = win->unpacked == win->recs.size();
    if (!earlier_filling && all_in && win->next_fill <= win->k_last) {
      const uint64_t k = win->next_fill++;
      std::shared_ptr<Job> job = token_job_locked(k, lock, clock);
      if (!job) return false;
      lock.unlock();
      fill_token_batch(*job, *win, win->buf.get());
      internal::stream_copy_fence();
      finish_one(*job);
      clock.charge_busy();
      lock.lock();
      if (++win->filled == win->k_last - win->k_first + 1) {
        return_kept_buffer(std::move(win->buf));
        kept.erase(std::find(kept.begin(), kept.end(), win));
        window_cv.notify_all();  // room for the next window
      }
      return true;
    }
    earlier_filling = earlier_filling || win->next_fill <= win->k_last;
  }
  return false;
}

void Loader::Impl::fill_window_direct_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock, TokenWindow& win,
                                             std::vector<std::shared_ptr<Job>>& batches, std::vector<uint8_t>& scratch) {
  const uint64_t B = opt.batch_size;
  batches.clear();
  for (uint64_t k = win.k_first; !stop && k <= win.k_last; ++k) {
    std::shared_ptr<Job> job = token_job_locked(k, lock, clock);  // slots were counted free: no wait
    if (!job) return;
    batches.push_back(std::move(job));
  }
  scratch.resize(token_capacity);
  // Its records, as their reads come in, each into the one buffer, still in this core's
  // cache when its rows are copied out.
  size_t next = 0;
  while (!stop && next < win.recs.size()) {
    if (next == win.arrived.size()) {
      clock.wait(window_cv, lock);
      continue;
    }
    const uint32_t r = win.arrived[next++];
    records_waiting--;
    lock.unlock();
    unpack_window_record(win, r, scratch.data());
    const uint8_t* rows = scratch.data() + win.recs[r].rows_at;
    uint64_t delivered = 0;
    for (uint32_t t = win.rec_begin[r]; t < win.rec_begin[r + 1]; ++t) {
      const uint32_t s = win.by_rec[t];
      delivered += put_token_row(*batches[(win.i0 + s) / B - win.k_first], win, s, rows + win.row_of[s] * token_row_bytes);
    }
    c.dec_samples += delivered;
    clock.charge_busy();
    lock.lock();
  }
  if (stop) return;
  lock.unlock();
  internal::stream_copy_fence();
  finish_all(batches);
  batches.clear();
  clock.charge_busy();
  lock.lock();
}

void Loader::Impl::token_worker_main(unsigned id) {
  pin_and_name_this_thread(cpu.cpus, "stoker-dec/" + std::to_string(id));
  std::vector<uint8_t> scratch;  // direct windows: where each record is decompressed, reused
  std::vector<std::shared_ptr<Job>> batches;
  const uint64_t B = opt.batch_size;
  WorkerClock clock(c);
  std::unique_lock<std::mutex> lock(ring->mu);
  try {
    while (!stop) {
      if (work_on_kept_locked(lock, clock)) continue;
      if (stop) break;
      if (next_window >= windows_end) {
        if (kept.empty()) break;  // the epoch's windows are all taken and done
        clock.wait(window_cv, lock);
        continue;
      }
      // A new window. Direct, when enough slots are free now for every batch up to its
      // last not claimed yet: this worker alone claims them, decompresses each record and
      // copies its rows into them at once. Otherwise it is kept (once fewer than two
      // are): every worker decompresses its records into a shared buffer, then fills its
      // batches as slots come back. No worker waits for a slot while holding batches that
      // only it would fill.
      const uint64_t w = next_window;
      plan_windows_locked(lock, w + 2);  // this window and the next, read ahead
      while (!stop && next_window == w && !planned.count(w)) clock.wait(window_cv, lock);
      if (stop) break;
      if (next_window != w) continue;  // another worker took it meanwhile
      std::shared_ptr<TokenWindow> win = planned.at(w);
      if (win->i0 == win->i1) {  // none of this rank's samples
        planned.erase(w);
        next_window = w + 1;
        continue;
      }
      win->k_first = win->i0 / B;
      win->k_last = (win->i1 - 1) / B;
      size_t free_slots = 0;
      for (const auto& slot : ring->slots) free_slots += slot->state == Ring::State::kFree;
      const uint64_t unclaimed = win->k_last + 1 > next_start ? win->k_last + 1 - next_start : 0;
      const bool direct = unclaimed <= free_slots;
      if (!direct && kept.size() >= 2) {  // help the kept windows finish first
        // Planning let go of the lock: their records may have come in meanwhile, and the
        // wake-up with them gone to no one. Only a worker moves them on, so look again
        // before sleeping (a lone worker slept here for good).
        if (!work_on_kept_locked(lock, clock) && !stop) clock.wait(window_cv, lock);
        continue;
      }
      next_window = w + 1;
      planned.erase(w);
      if (direct) {
        fill_window_direct_locked(lock, clock, *win, batches, scratch);
        continue;
      }
      win->next_fill = win->k_first;
      if (!kept_buffers.empty() && kept_buffers.back().size() >= win->recs.size() * token_capacity) {
        win->buf = std::move(kept_buffers.back());
        kept_buffers.pop_back();
      } else {
        // Under the lock: with it let go, another worker could keep a later window ahead
        // of this one, and the fill order (oldest window first) would no longer be the
        // batch order the slots are claimed in. A fresh buffer is rare (the run's first
        // kept windows, or wider ones), and mapped, not touched: its pages come as written.
        const size_t records = std::max(kept_buffer_records, win->recs.size());
        if (records > kept_buffer_records) {
          kept_buffers.clear();  // too small for windows this wide
          kept_buffer_records = records;
        }
        win->buf = internal::PageBuffer(records * token_capacity);
      }
      if (win->buf.size() < win->recs.size() * token_capacity)
        throw std::logic_error("a kept token window's buffer holds fewer records than the window");
      if (!kept.empty() && kept.back()->i1 > win->i0)
        throw std::logic_error("token windows kept out of order: the batches they fill would wait on each other");
      kept.push_back(std::move(win));
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
  if (m.batches_out == 0) m.first_batch_s = seconds(Clock::now() - m.run_start.load());
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
  s.wall_s = m.running ? seconds(Clock::now() - m.run_start.load()) : 0;
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
