// TokenProducer: token rows into batches, a shuffle window of compressed records at a
// time.
//
// The workers ("stoker-dec/N") schedule themselves a window at a time, with no hand-off
// per batch or per record (at tens of microseconds a batch, a hand-off would cost more
// than the work): a worker takes the next window (its records were read ahead), claims
// the slots of the batches drawing from it when the ring has them free, and copies each
// record's rows into them right after decompressing it, while they are in its cache.
// With too few free slots the window is kept instead, and every worker helps decompress
// its records into a shared buffer and fill its batches as slots come (at most two kept
// windows: the footprint stays about two windows of records, the parallelism that of a
// window's records). Slots are claimed in batch order. A batch that straddles windows is
// finished by the last of their workers. The reader ("stoker-io") reads the records of
// the windows planned so far, in window order (O_DIRECT where it can: no copy on the
// CPUs); a window is planned, and its reads queued, one ahead of the windows taken. A
// remote dataset's shard is held from a record's read to its decompression: without
// room for the next shard, the reader waits for the workers to decompress what arrived.
//
// Locking: the window state below is guarded by the ring's mutex, but for a kept
// window's buffer, whose record r belongs to the worker that took it.
#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <unordered_map>

#include "pipeline/doc_rows.h"
#include "pipeline/producer.h"
#include "pipeline/record_reads.h"
#include "util/bytes.h"
#include "util/convert.h"
#include "util/huge_pages.h"
#include "util/stream_copy.h"

namespace stoker::internal {
namespace {

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
    size_t docs_at = 0, docs_bytes = 0;  // where its doc_starts are once decompressed (when wanted)
    std::exception_ptr error;          // it could not be read, checked or decompressed
    int64_t failed_shard = -1;         // its shard could not be opened: why in shard_reason
    std::string shard_reason;
  };
  std::vector<Rec> recs;
  std::vector<uint32_t> arrived;  // records read (or failed), in completion order; guarded by the ring's mutex
  // Kept windows (shared by the workers): every record decompressed into `buf`, then the
  // batches k_first..k_last filled from it.
  internal::PageBuffer buf;
  uint64_t k_first = 0, k_last = 0;
  size_t next_unpack = 0, unpacked = 0;  // into `arrived`; records done
  uint64_t next_fill = 0, filled = 0;    // the next batch to hand out; batches done
};

// A token worker's time, every moment of it busy or waiting: planning windows, claiming
// slots and finishing batches are work as much as decompressing is, so the verdict sees
// a worker that never waits as fully busy.
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


void copy_tokens(const uint8_t* src, DType dt, size_t n, ElemType out_t, uint8_t* dst) {
  const ElemType in_t = elem_type_of(dt).value_or(ElemType::kUint8);
  if (in_t == out_t) {
    internal::stream_copy(dst, src, n * dtype_size(dt));  // the slot is not read before the batch is out
    return;
  }
  widen_tokens_le(src, in_t, n, out_t, dst);  // util/convert.h: one plain load a token on little-endian hosts
}

uint64_t batches_per_window(const Context& ctx, uint64_t batch_size) {
  uint64_t rows = 0;  // the largest record's rows
  for (size_t g = 0; g < ctx.layout->groups(); ++g) rows = std::max(rows, ctx.layout->group_size(g));
  const uint64_t window_rows = std::max<uint64_t>(1, ctx.order_opt.window_chunks) * rows;
  const uint64_t rank_rows = (window_rows + ctx.rank.world_size - 1) / ctx.rank.world_size;
  return (rank_rows + batch_size - 1) / batch_size + 1;  // + 1: a window's edges fall inside batches
}

uint64_t token_slab_need(const Context& ctx, const TokenFacts& f) {
  // A window per worker being decompressed, the next one read ahead, one to spare.
  const uint64_t window = std::max<uint64_t>(1, ctx.order_opt.window_chunks);
  return (ctx.threads + 2) * window * (f.largest_stored + 2 * kDirectAlignment);
}

class TokenProducer final : public Producer {
 public:
  TokenProducer(const Context& ctx, const TokenFacts& f) : ctx_(ctx), f_(f), reads_(ctx, token_slab_need(ctx, f)) {}
  ~TokenProducer() override { join(); }

  void start(Run& run) override {
    run_ = &run;
    clear_token_state();
    const uint64_t n = rank_samples();
    const uint64_t first = n ? token_window_of(rank_position(0)) : 0;
    next_window = planned_to = first;
    windows_end = n ? token_window_of(rank_position(n - 1)) + 1 : first;
    io_thread_ = std::thread([this] { token_io_main(); });
    for (unsigned i = 0; i < ctx_.threads; ++i) workers_.emplace_back([this, i] { token_worker_main(i); });
  }
  // Their waits are under the ring's mutex, which `stop` was set under.
  void wake() override {
    read_cv.notify_all();
    window_cv.notify_all();
  }
  void join() override {
    if (io_thread_.joinable()) io_thread_.join();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }
  void clear() override { clear_token_state(); }
  IoStats io_stats() const override { return reads_.stats(); }

 private:
  void token_worker_main(unsigned id);
  void token_io_main();
  void clear_token_state();
  /// ring mutex held (or no worker running): keeps a window's buffer for reuse, unless a
  /// wider window has made buffers larger since it was mapped. (A rank's window holds
  /// only the records it draws rows from, so windows differ in width: world size > 1, a
  /// resume, the last one.)
  void return_kept_buffer(internal::PageBuffer buf) {
    if (buf && buf.size() >= kept_buffer_records * f_.capacity) kept_buffers.push_back(std::move(buf));
  }
  // Windows are the order's shuffle windows; sequential order, which has none, is cut
  // into runs of `window_chunks` records.
  std::pair<uint64_t, uint64_t> token_window_positions(uint64_t w) const;
  uint64_t token_window_of(uint64_t position) const;
  /// Sequential order: the records [first, last) of window w.
  std::pair<uint64_t, uint64_t> sequential_window_records(uint64_t w) const;
  /// This rank's schedule samples [i0, i1) whose positions lie in [begin, end).
  std::pair<uint64_t, uint64_t> rank_samples_in(uint64_t begin, uint64_t end) const;
  uint64_t rank_samples() const;  ///< this rank's samples in the run
  /// The position of the rank's schedule sample i (sample j of batch k is i = k*B + j).
  uint64_t rank_position(uint64_t i) const {
    return run_->sched->start() + ctx_.rank.rank + i * ctx_.rank.world_size;
  }
  /// Works out window w: the rank's samples in it, their rows and records.
  std::shared_ptr<TokenWindow> plan_token_window(uint64_t w) const;
  /// ring mutex held (released while planning): plans the windows below `upto` not
  /// planned yet and queues their reads.
  void plan_windows_locked(std::unique_lock<std::mutex>& lock, uint64_t upto);
  /// ring mutex held: batch k's job, claiming slots in batch order (waiting for free
  /// ones) up to k if it is not claimed yet; nullptr when the run stops.
  std::shared_ptr<Job> token_job_locked(uint64_t k, std::unique_lock<std::mutex>& lock, WorkerClock& clock);
  /// Checks and decompresses record r of `win` into `out`; keeps the error in the record.
  void unpack_window_record(TokenWindow& win, uint32_t r, uint8_t* out);
  /// Puts window sample s (its row of its record decompressed at `record`, or the
  /// record's error) into its place in `job`, with its document outputs; returns whether
  /// a row went in.
  bool put_token_row(Job& job, const TokenWindow& win, uint64_t s, const uint8_t* src);
  /// Copies the rows batch k draws from `win` (records decompressed at `buf`, `capacity`
  /// apart) into its slot, or hands their record's error to it.
  void fill_token_batch(Job& job, const TokenWindow& win, const uint8_t* buf);
  /// ring mutex held (released while working): one piece of work on the kept windows —
  /// decompress a record that has been read, or fill the next batch of the oldest window
  /// still handing batches out once its records are all in; false when there is none.
  bool work_on_kept_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock);
  /// ring mutex held (released while working): a window taken by this worker alone,
  /// direct: its batches are claimed, each record's rows copied in as it is decompressed.
  void fill_window_direct_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock, TokenWindow& win,
                                 std::vector<std::shared_ptr<Job>>& batches, std::vector<uint8_t>& scratch);

  const Context& ctx_;
  const TokenFacts f_;
  RecordReads reads_;
  Run* run_ = nullptr;
  std::thread io_thread_;
  std::vector<std::thread> workers_;
  // Guarded by the ring's mutex.
  uint64_t next_window = 0;    // the next window a worker takes
  uint64_t windows_end = 0;    // one past the last window holding this rank's samples
  uint64_t planned_to = 0;     // windows below this are planned (or being planned)
  std::map<uint64_t, std::shared_ptr<TokenWindow>> planned;  // planned, not taken yet
  std::deque<std::pair<std::shared_ptr<TokenWindow>, uint32_t>> to_read;  // (window, record)
  uint64_t records_waiting = 0;        // read and not yet decompressed (the queue figure)
  std::condition_variable read_cv;     // the IO thread's: reads queued, stop
  std::condition_variable window_cv;   // the workers': records read, window planned, stop
  std::deque<std::shared_ptr<TokenWindow>> kept;   // kept windows, oldest first (at most two)
  std::vector<internal::PageBuffer> kept_buffers;  // on huge pages: rows are copied through them
  size_t kept_buffer_records = 0;                  // what each buffer in kept_buffers holds, at least
};

void TokenProducer::clear_token_state() {
  for (auto& win : kept) return_kept_buffer(std::move(win->buf));
  kept.clear();
  planned.clear();
  to_read.clear();
  next_window = windows_end = planned_to = 0;
  records_waiting = 0;
}

std::pair<uint64_t, uint64_t> TokenProducer::sequential_window_records(uint64_t w) const {
  const uint64_t per = std::max<uint64_t>(1, ctx_.order_opt.window_chunks);
  const uint64_t first = std::min<uint64_t>(w * per, ctx_.layout->groups());
  return {first, std::min<uint64_t>(first + per, ctx_.layout->groups())};
}

std::pair<uint64_t, uint64_t> TokenProducer::token_window_positions(uint64_t w) const {
  if (run_->order->windowed()) return run_->order->window_positions(w);
  const auto [first, last] = sequential_window_records(w);
  return {ctx_.layout->group_begin(first), ctx_.layout->group_begin(last)};  // sequential: positions are rows
}

uint64_t TokenProducer::token_window_of(uint64_t position) const {
  if (run_->order->windowed()) return run_->order->window_of(position);
  return ctx_.layout->locate(position).first / std::max<uint64_t>(1, ctx_.order_opt.window_chunks);
}

uint64_t TokenProducer::rank_samples() const {
  const uint64_t nb = run_->sched->num_batches();
  return nb ? (nb - 1) * ctx_.opt->batch_size + run_->sched->batch_length(nb - 1) : 0;
}

std::pair<uint64_t, uint64_t> TokenProducer::rank_samples_in(uint64_t begin, uint64_t end) const {
  // The inverse of rank_position: positions base + i * world.
  const uint64_t base = rank_position(0), world = ctx_.rank.world_size, n = rank_samples();
  auto first_from = [&](uint64_t p) { return std::min<uint64_t>(n, p <= base ? 0 : (p - base + world - 1) / world); };
  const uint64_t i0 = first_from(begin);
  return {i0, std::max(i0, first_from(end))};
}

std::shared_ptr<TokenWindow> TokenProducer::plan_token_window(uint64_t w) const {
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
  if (run_->order->windowed()) {
    if (n) run_->order->at_strided(rank_position(win->i0), ctx_.rank.world_size, n, win->units.data(), place.data());
    for (uint64_t chunk : run_->order->window_chunks(w)) place_record.push_back(run_->order->chunk_group(chunk));
  } else {  // sequential: the window is a run of records in storage order
    if (n) run_->order->at_strided(rank_position(win->i0), ctx_.rank.world_size, n, win->units.data());
    const auto [first, last] = sequential_window_records(w);
    for (uint64_t g = first; g < last; ++g) place_record.push_back(g);
    for (uint64_t s = 0; s < n; ++s) place[s] = static_cast<uint32_t>(ctx_.layout->locate(win->units[s]).first - first);
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
      first_row.push_back(ctx_.layout->group_begin(place_record[place[s]]));
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

void TokenProducer::plan_windows_locked(std::unique_lock<std::mutex>& lock, uint64_t upto) {
  upto = std::min(upto, windows_end);
  while (planned_to < upto && !run_->stop) {
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

std::shared_ptr<Job> TokenProducer::token_job_locked(uint64_t k, std::unique_lock<std::mutex>& lock, WorkerClock& clock) {
  const uint64_t B = ctx_.opt->batch_size;
  for (;;) {
    if (run_->stop) return nullptr;
    if (auto it = run_->jobs.find(k); it != run_->jobs.end()) return it->second;
    if (k < run_->next_start)
      throw std::logic_error("token batch " + std::to_string(k) + " went out while a window still had rows for it");
    // Slots are claimed in batch order, whoever needs them: the consumer takes batches in
    // that order, so the lowest batch not out yet always has its slot.
    size_t slot = run_->ring->slots.size();
    for (size_t i = 0; i < run_->ring->slots.size(); ++i)
      if (run_->ring->slots[i]->state == SlotRing::State::kFree) {
        slot = i;
        break;
      }
    if (slot == run_->ring->slots.size()) {
      clock.wait(run_->ring->producer_cv, lock);
      continue;
    }
    run_->ring->slots[slot]->state = SlotRing::State::kFilling;
    auto job = std::make_shared<Job>();
    job->k = run_->next_start++;
    job->slot = slot;
    job->mem = run_->ring->slots[slot]->mem;
    const uint64_t len = run_->sched->batch_length(job->k);
    job->samples.resize(len);
    job->bad.assign(len, 0);
    job->var.assign(run_->var_outputs, std::vector<std::vector<uint8_t>>(len));
    // Every row is delivered unless its record fails (taken back out then).
    job->record_bytes.store(len * f_.row_bytes, std::memory_order_relaxed);
    // One hand-over per window the batch draws rows from.
    const uint64_t lo = job->k * B, hi = lo + len;
    uint64_t parts = 0;
    for (uint64_t w = token_window_of(rank_position(lo)); w <= token_window_of(rank_position(hi - 1)); ++w) {
      const auto [begin, end] = token_window_positions(w);
      const auto [i0, i1] = rank_samples_in(begin, end);
      parts += std::max(i0, lo) < std::min(i1, hi);
    }
    job->remaining = parts;
    run_->c.queue_sum += len * records_waiting;
    run_->jobs[job->k] = job;
    // A worker waiting for a slot for a later batch may have been the one woken for this
    // slot: the others re-check whether their batch exists now.
    run_->ring->producer_cv.notify_all();
  }
}

void TokenProducer::unpack_window_record(TokenWindow& win, uint32_t r, uint8_t* out) {
  TokenWindow::Rec& rec = win.recs[r];
  if (!rec.error) {
    auto [s, rr] = ctx_.dataset->locate(rec.record);
    try {
      const RecordLocation& loc = ctx_.dataset->shard(s)->location(rr);
      if (loc.raw_size > f_.capacity)
        throw Error(ErrorCode::kDataLoss, "raw size " + std::to_string(loc.raw_size) + " exceeds what the shard index promised");
      auto fields = unpack_record_into(ctx_.dataset->schema(), loc, {rec.stored->data() + rec.skip, loc.stored_size},
                                       {out, f_.capacity}, ctx_.record_name(s, rr));
      rec.rows_at = static_cast<size_t>(fields[static_cast<size_t>(f_.field)].data() - out);
      if (f_.docs_field >= 0) {
        const auto docs = fields[static_cast<size_t>(f_.docs_field)];
        const std::string bad =
            check_doc_starts(docs, fields[static_cast<size_t>(f_.field)].size() / f_.row_bytes, f_.seq_len);
        if (!bad.empty()) throw Error(ErrorCode::kDataLoss, bad);
        rec.docs_at = static_cast<size_t>(docs.data() - out);
        rec.docs_bytes = docs.size();
      }
    } catch (const Error& e) {
      rec.error = std::make_exception_ptr(naming(e, ctx_.record_name(s, rr)));
    } catch (...) {
      rec.error = std::current_exception();
    }
  }
  rec.stored.reset();  // the read buffer goes back to the engine's slab
  // Its shard's use (RecordReads::range) is over: a remote shard may be closed now. A
  // record whose shard could not be opened has none.
  if (rec.failed_shard < 0) reads_.done(ctx_.dataset->locate(rec.record).first);
}

bool TokenProducer::put_token_row(Job& job, const TokenWindow& win, uint64_t s, const uint8_t* record) {
  const uint64_t j = win.i0 + s - job.k * ctx_.opt->batch_size;
  job.samples[j] = win.units[s];
  const int64_t gi = static_cast<int64_t>(win.units[s]);
  std::memcpy(ctx_.tensor_ptr(job, f_.index_t) + j * 8, &gi, 8);
  const TokenWindow::Rec& rec = win.recs[win.rec_of[s]];
  if (rec.error) {
    if (ctx_.opt->on_error == OnError::kError) {
      job.fail(rec.error);
      return false;
    }
    // Every row of a bad record is skipped.
    if (rec.failed_shard >= 0) {
      const Context::ShardFailure sf{static_cast<size_t>(rec.failed_shard), rec.shard_reason};
      ctx_.sample_failed(*run_, job, static_cast<uint32_t>(j), rec.error, &sf);
    } else {
      ctx_.sample_failed(*run_, job, static_cast<uint32_t>(j), rec.error);
    }
    job.record_bytes.fetch_sub(f_.row_bytes, std::memory_order_relaxed);
    return false;
  }
  const uint8_t* src = record + rec.rows_at + win.row_of[s] * f_.row_bytes;
  const DType stored = ctx_.dataset->schema().fields[static_cast<size_t>(f_.field)].dtype;
  const Output& tl = ctx_.tensors[static_cast<size_t>(f_.tokens_t)];
  copy_tokens(src, stored, f_.seq_len, tl.dtype, ctx_.tensor_ptr(job, f_.tokens_t) + j * tl.item_bytes);
  if (f_.targets_t >= 0)
    copy_tokens(src + dtype_size(stored), stored, f_.seq_len, tl.dtype, ctx_.tensor_ptr(job, f_.targets_t) + j * tl.item_bytes);
  if (f_.docs_field >= 0) {
    // Written straight into the slot with streaming stores, like the tokens (written in
    // place through the cache, every line of the slot would first be read in).
    const size_t N = f_.seq_len;
    DocRowOut out;
    out.stream = true;
    if (f_.position_t >= 0) out.position_ids = reinterpret_cast<int32_t*>(ctx_.tensor_ptr(job, f_.position_t) + j * N * 4);
    if (f_.mask_t >= 0) out.loss_mask = ctx_.tensor_ptr(job, f_.mask_t) + j * N;
    if (f_.doc_ids_t >= 0) out.doc_ids = reinterpret_cast<int32_t*>(ctx_.tensor_ptr(job, f_.doc_ids_t) + j * N * 4);
    if (f_.seqlens_var >= 0) {
      out.seqlens = &job.var[static_cast<size_t>(f_.seqlens_var)][j];
      out.seqlens->clear();
    }
    doc_row({record + rec.docs_at, rec.docs_bytes}, win.row_of[s], f_.seq_len, out, ctx_.opt->position_ids_from_row_start);
  }
  return true;
}

void TokenProducer::fill_token_batch(Job& job, const TokenWindow& win, const uint8_t* buf) {
  const uint64_t lo = job.k * ctx_.opt->batch_size, hi = lo + job.samples.size();
  const uint64_t from = std::max(lo, win.i0), to = std::min(hi, win.i1);
  uint64_t delivered = 0;
  for (uint64_t i = from; i < to; ++i) {
    const uint64_t s = i - win.i0;
    const uint32_t q = win.rec_of[s];
    delivered += put_token_row(job, win, s, buf + q * f_.capacity);
  }
  run_->c.dec_samples += delivered;
}

void TokenProducer::token_io_main() {
  pin_and_name_this_thread(ctx_.cpu.cpus, "stoker-io");
  if (!reads_.open(*run_)) return;
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
  const size_t depth = std::max<size_t>(1, ctx_.opt->io.queue_depth);
  std::unique_lock<std::mutex> lock(run_->ring->mu);
  try {
    while (!run_->stop) {
      batch.clear();
      while (pending.size() + batch.size() < depth && !to_read.empty()) {
        batch.push_back(std::move(to_read.front()));
        to_read.pop_front();
      }
      if (batch.empty() && pending.empty()) {
        const auto w0 = Clock::now();
        read_cv.wait(lock);
        run_->c.io_wait_ns += nanos(Clock::now() - w0);
        continue;
      }
      lock.unlock();
      const auto t0 = Clock::now();
      uint64_t waited = 0;
      finished.clear();  // read, or failed (the record's error set)
      std::vector<ReadRequest> reqs;
      size_t started = 0;  // of `batch`; the rest wait for room in a remote dataset's cache
      for (; started < batch.size(); ++started) {
        auto& [win, r] = batch[started];
        TokenWindow::Rec& rec = win->recs[r];
        auto [s, rr] = ctx_.dataset->locate(rec.record);
        try {
          const std::optional<RecordRange> held = reads_.range(s, rr);  // opens the shard lazily, checked against the manifest
          if (!held) break;  // no room to hold shard s until records in use are unpacked
          const RecordRange& range = *held;
          const ReadPlan plan = plan_reads({&range, 1}, reads_.plan_options());
          const auto& rd = plan.reads.at(0);
          Pending pd{win, r, std::make_shared<IoBuffer>(reads_.engine().alloc(rd.length)), plan.records.at(0).skip, 0};
          pd.need = pd.skip + range.length;
          const uint64_t tag = next_tag++;
          reqs.push_back(ReadRequest{rd.file, rd.offset, static_cast<uint32_t>(rd.length), pd.buf->data(), tag});
          pending.emplace(tag, std::move(pd));
        } catch (const Error& e) {
          // A missing or replaced shard: the record fails like a bad read would.
          rec.error = std::make_exception_ptr(naming(e, ctx_.record_name(s, rr)));
          rec.failed_shard = static_cast<int64_t>(s);
          rec.shard_reason = e.what();
          finished.emplace_back(win, r);
        }
      }
      const bool blocked = started < batch.size();
      if (!reqs.empty()) reads_.engine().submit(reqs);
      if (blocked && reads_.engine().inflight() == 0) {
        const auto w0 = Clock::now();
        reads_.wait_for_room();  // the workers unpack what has arrived, ending uses
        waited = nanos(Clock::now() - w0);
      } else if (reads_.engine().inflight() > 0) {
        done.clear();
        const auto w0 = Clock::now();
        // Nothing new to submit: wait a little for a completion (new work is noticed
        // within the timeout).
        reads_.engine().reap(done, reqs.empty() ? 1 : 0, std::chrono::milliseconds(reqs.empty() ? 1 : 0));
        waited = nanos(Clock::now() - w0);
        for (ReadCompletion& d : done) {
          auto it = pending.find(d.tag);
          if (it == pending.end()) continue;
          Pending pd = std::move(it->second);
          pending.erase(it);
          TokenWindow::Rec& rec = pd.win->recs[pd.r];
          if (auto bad = read_failure(d, pd.need)) {
            auto [s, rr] = ctx_.dataset->locate(rec.record);
            rec.error = std::make_exception_ptr(Error(bad->code(), ctx_.record_name(s, rr) + ": " + bad->what()));
          } else {
            run_->c.io_bytes += static_cast<uint64_t>(d.result);
            run_->c.io_records++;
            rec.stored = std::move(pd.buf);
            rec.skip = pd.skip;
          }
          finished.emplace_back(std::move(pd.win), pd.r);
        }
      }
      run_->c.io_wait_ns += waited;
      const uint64_t spent = nanos(Clock::now() - t0);
      run_->c.io_busy_ns += spent - std::min(waited, spent);
      lock.lock();
      // Not started for want of room: first in line again, in their order.
      to_read.insert(to_read.begin(), std::make_move_iterator(batch.begin() + static_cast<std::ptrdiff_t>(started)),
                     std::make_move_iterator(batch.end()));
      if (finished.empty()) continue;
      // The token IO thread lives until the run stops, past the epoch's last read: its
      // engine's figures are published with every read handed on, so stats() taken at
      // the end of an epoch has all of them.
      reads_.publish();
      for (auto& [win, r] : finished) win->arrived.push_back(r);  // a failed read goes the same way
      records_waiting += finished.size();
      finished.clear();
      window_cv.notify_all();
    }
  } catch (...) {
    if (lock.owns_lock()) lock.unlock();
    run_->fail(std::current_exception());
  }
  if (lock.owns_lock()) lock.unlock();
  reads_.close_run();  // before `pending` goes: no buffer is freed under the kernel
}

bool TokenProducer::work_on_kept_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock) {
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
      // Straight into the window's buffer: with the window buffers on huge pages, a hot
      // per-worker buffer streamed into it only adds a second pass over the bytes.
      unpack_window_record(*win, r, win->buf.get() + r * f_.capacity);
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
      run_->finish_one(*job);
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

void TokenProducer::fill_window_direct_locked(std::unique_lock<std::mutex>& lock, WorkerClock& clock, TokenWindow& win,
                                             std::vector<std::shared_ptr<Job>>& batches, std::vector<uint8_t>& scratch) {
  const uint64_t B = ctx_.opt->batch_size;
  batches.clear();
  for (uint64_t k = win.k_first; !run_->stop && k <= win.k_last; ++k) {
    std::shared_ptr<Job> job = token_job_locked(k, lock, clock);  // slots were counted free: no wait
    if (!job) return;
    batches.push_back(std::move(job));
  }
  scratch.resize(f_.capacity);
  // Its records, as their reads come in, each into the one buffer, still in this core's
  // cache when its rows are copied out.
  size_t next = 0;
  while (!run_->stop && next < win.recs.size()) {
    if (next == win.arrived.size()) {
      clock.wait(window_cv, lock);
      continue;
    }
    const uint32_t r = win.arrived[next++];
    records_waiting--;
    lock.unlock();
    unpack_window_record(win, r, scratch.data());
    uint64_t delivered = 0;
    for (uint32_t t = win.rec_begin[r]; t < win.rec_begin[r + 1]; ++t) {
      const uint32_t s = win.by_rec[t];
      delivered += put_token_row(*batches[(win.i0 + s) / B - win.k_first], win, s, scratch.data());
    }
    run_->c.dec_samples += delivered;
    clock.charge_busy();
    lock.lock();
  }
  if (run_->stop) return;
  lock.unlock();
  internal::stream_copy_fence();
  run_->finish_all(batches);
  batches.clear();
  clock.charge_busy();
  lock.lock();
}

void TokenProducer::token_worker_main(unsigned id) {
  pin_and_name_this_thread(ctx_.cpu.cpus, "stoker-dec/" + std::to_string(id));
  std::vector<uint8_t> scratch;  // direct windows: where each record is decompressed, reused
  std::vector<std::shared_ptr<Job>> batches;
  const uint64_t B = ctx_.opt->batch_size;
  WorkerClock clock(run_->c);
  std::unique_lock<std::mutex> lock(run_->ring->mu);
  try {
    while (!run_->stop) {
      if (id >= active_.load()) {  // set aside by the tuner; holds nothing, so it may sleep
        clock.wait(window_cv, lock);
        continue;
      }
      if (work_on_kept_locked(lock, clock)) continue;
      if (run_->stop) break;
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
      while (!run_->stop && next_window == w && !planned.count(w)) clock.wait(window_cv, lock);
      if (run_->stop) break;
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
      for (const auto& slot : run_->ring->slots) free_slots += slot->state == SlotRing::State::kFree;
      const uint64_t unclaimed = win->k_last + 1 > run_->next_start ? win->k_last + 1 - run_->next_start : 0;
      const bool direct = unclaimed <= free_slots;
      if (!direct && kept.size() >= 2) {  // help the kept windows finish first
        // Planning let go of the lock: their records may have come in meanwhile, and the
        // wake-up with them gone to no one. Only a worker moves them on, so look again
        // before sleeping (a lone worker slept here for good).
        if (!work_on_kept_locked(lock, clock) && !run_->stop) clock.wait(window_cv, lock);
        continue;
      }
      next_window = w + 1;
      planned.erase(w);
      if (direct) {
        fill_window_direct_locked(lock, clock, *win, batches, scratch);
        continue;
      }
      win->next_fill = win->k_first;
      if (!kept_buffers.empty() && kept_buffers.back().size() >= win->recs.size() * f_.capacity) {
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
        win->buf = internal::PageBuffer(records * f_.capacity);
      }
      if (win->buf.size() < win->recs.size() * f_.capacity)
        throw std::logic_error("a kept token window's buffer holds fewer records than the window");
      if (!kept.empty() && kept.back()->i1 > win->i0)
        throw std::logic_error("token windows kept out of order: the batches they fill would wait on each other");
      kept.push_back(std::move(win));
    }
  } catch (...) {
    if (lock.owns_lock()) lock.unlock();
    run_->fail(std::current_exception());
  }
}


}  // namespace

std::unique_ptr<Producer> make_token_producer(const Context& ctx, const TokenFacts& facts) {
  return std::make_unique<TokenProducer>(ctx, facts);
}

size_t token_direct_slots(const Context& ctx, uint64_t batch_size) {
  return (ctx.threads + 1) * batches_per_window(ctx, batch_size);
}

}  // namespace stoker::internal
