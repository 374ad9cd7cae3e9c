// RecordProducer: records into batches, a record at a time, as a RecordWork says (images:
// a decode per sample; packed samples: a row's pieces).
//
// The "stoker-io" thread starts batch k when a slot is free: the work names the records
// the batch needs (RecordWork::plan_locked), the thread plans aligned, coalesced reads of
// them (io.h plan_reads) and submits them; completed reads become one DecodeTask per
// record use, queued for the "stoker-dec/N" workers. A worker checks the record's CRC
// (zero-copy when it is stored raw: the fields are sliced out of the IO buffer), has the
// work's per-thread Worker write it into the batch's slot (an image decoded and
// transformed straight there), and hands the use over. An IO buffer
// goes back to the engine when the last record in it is decoded. Records of a shard
// that RecordReads maps (small records, their shard in the page cache) skip the engine:
// their tasks point into the mapping and are queued as the batch is planned. A remote
// dataset's shard is held from a record's planning to its decode (RecordReads::range / done);
// when the cache has no room for the next shard, the reader thread submits what it has
// planned and reaps until decoders free some, mid-batch if need be.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <thread>

#include "io/io_util.h"
#include "pipeline/producer.h"
#include "pipeline/record_reads.h"
#include "stoker/image.h"

namespace stoker::internal {
namespace {

// The records of a run of planned reads and the one IO buffer they are read into: records
// of a kilobyte are read tens of thousands a second, and one allocation (and one entry
// for the buffer's owner) per read would cost the reader thread more than the reads.
struct ReadGroup {
  struct Rec {
    RecordWork::Use use;
    size_t shard = 0;
    uint64_t record = 0;
    // Looked up by the reader thread, which plans the read with it: a decoder's lookup
    // would take the dataset's lock and miss the cache once more per record.
    const RecordLocation* loc = nullptr;
    uint64_t at = 0;      // where the record's bytes start in `buf`
    uint32_t stored = 0;  // its bytes as stored
  };
  std::shared_ptr<Job> job;
  IoBuffer buf;  // back to the engine when the last record in it is decoded
  const uint8_t* base = nullptr;  // where `Rec::at` counts from: buf's bytes, or a shard's mapping
  std::vector<Rec> recs;
};

// Reads sharing one buffer: up to this many bytes (a longer read has its own).
constexpr uint64_t kGroupBytes = 1u << 20;
// Times a task whose record another decoder is busy with is put behind others (8, 16,
// 32, 64 tasks: a long document takes tens of short ones' time to tokenise).
constexpr uint32_t kMaxDeferrals = 4;
// Tasks a decoder takes from the queue at once, at most, and their stored bytes at most
// beyond the first's (decode_main): ~0.3 ms of tokenising.
constexpr size_t kMaxTaken = 8;
constexpr uint64_t kTakenBytes = 8u << 10;
// Bytes of the next record taken that a decoder asks the cache for ahead (decode_main).
constexpr uint32_t kPrefetchBytes = 4u << 10;

struct DecodeTask {
  std::shared_ptr<ReadGroup> group;
  uint32_t rec = 0;      // in group->recs
  uint32_t deferred = 0;  // times put behind other tasks (RecordWork::Worker::would_wait)
  std::string io_error;  // non-empty: the read failed
  ErrorCode io_code = ErrorCode::kIoError;
};

// Where records lie, for the reader thread. A local dataset's shard reader is kept while
// records of its shard follow one another (a batch of packed samples lists its records in
// index order): such a record costs no lock of the dataset's and no count of the reader's
// pointer. A remote dataset's shards come and go with its cache: asked each time.
class RecordLocations {
 public:
  explicit RecordLocations(const Context& ctx) : ctx_(ctx) {}
  const RecordLocation& at(size_t shard, uint64_t record) {
    if (ctx_.cached) return ctx_.location(shard, record);
    if (shard != shard_ || !reader_) {
      reader_ = ctx_.dataset->shard(shard);
      shard_ = shard;
    }
    return reader_->location(record);
  }

 private:
  const Context& ctx_;
  size_t shard_ = 0;
  std::shared_ptr<const ShardReader> reader_;
};

uint64_t record_slab_need(const Context& ctx, const RecordWork& work) {
  // The reads in flight are at most the ring's batches.
  return static_cast<uint64_t>(std::max(ctx.opt->slots, ctx.slots_max) + 1) * work.records_per_batch() *
         RecordReads::slab_bytes_per_record(*ctx.dataset);
}

class RecordProducer final : public Producer {
 public:
  RecordProducer(const Context& ctx, std::unique_ptr<RecordWork> work)
      : ctx_(ctx), work_(std::move(work)), reads_(ctx, record_slab_need(ctx, *work_)), locations_(ctx) {
    shard_names_.reserve(ctx.dataset->shard_count());
    for (size_t s = 0; s < ctx.dataset->shard_count(); ++s) shard_names_.push_back(ctx.record_name_prefix(s));
  }
  ~RecordProducer() override { join(); }

  void start(Run& run) override {
    run_ = &run;
    queue_.clear();
    io_thread_ = std::thread([this] { io_main(); });
    for (unsigned i = 0; i < ctx_.threads; ++i) decoders_.emplace_back([this, i] { decode_main(i); });
  }
  void wake() override {
    { std::lock_guard<std::mutex> lock(qmu_); }  // a worker between checking `stop` and waiting sees it
    qcv_.notify_all();
  }
  void join() override {
    if (io_thread_.joinable()) io_thread_.join();
    for (auto& t : decoders_) t.join();
    decoders_.clear();
  }
  void clear() override { queue_.clear(); }
  IoStats io_stats() const override { return reads_.stats(); }

 private:
  void io_main();
  void start_job(uint64_t k, size_t slot);
  /// Plans and submits the reads of the records gathered for `job` (cleared after).
  void submit_reads(const std::shared_ptr<Job>& job, std::vector<RecordRange>& ranges,
                    std::vector<std::pair<size_t, uint64_t>>& where, std::vector<RecordWork::Use>& uses);
  /// Queues a task per record of `group`, whose bytes are in a mapping.
  void queue_mapped(const std::shared_ptr<ReadGroup>& group);
  /// The read figures for stats(): every 20 ms, and at once for the run's last records.
  void publish_reads();
  /// Reaps completions into decode tasks and queues them; whether any arrived.
  bool reap_some(size_t min_complete, std::chrono::milliseconds timeout);
  void decode_main(unsigned id);
  // A decoder's own buffers, reused from record to record.
  struct DecoderScratch {
    std::vector<uint8_t> unpacked;  // a zstd record's payloads
    std::string where;              // the record's name, for errors
  };
  void process(DecodeTask& t, RecordWork::Worker& worker, DecoderScratch& scratch);

  // A read in flight: its group's records first .. first + count - 1, which lie from
  // `at` on in the group's buffer. Kept at pending_[tag's low 32 bits]; the high bits
  // number the reads, so that no two reads of a run share a tag.
  struct PendingRead {
    std::shared_ptr<ReadGroup> group;  // null: the place is free
    uint64_t at = 0;
    uint32_t first = 0, count = 0;
    uint64_t tag = 0;
  };

  const Context& ctx_;
  std::unique_ptr<RecordWork> work_;
  RecordReads reads_;
  RecordLocations locations_;  // the reader thread's
  // Context::record_name_prefix of each shard: a decoder names each record it takes
  // without building the shard's path again.
  std::vector<std::string> shard_names_;
  Run* run_ = nullptr;
  std::thread io_thread_;
  std::vector<std::thread> decoders_;
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<DecodeTask> queue_;
  // The reader thread's own (no lock).
  std::vector<PendingRead> pending_;
  std::vector<uint32_t> free_places_;  // in pending_
  uint64_t reads_submitted_ = 0;
  std::vector<ReadCompletion> done_;
  std::vector<ReadRequest> reqs_;
  std::vector<DecodeTask> tasks_;
};

void RecordProducer::start_job(uint64_t k, size_t slot) {
  Run& run = *run_;
  std::shared_ptr<Job> job;
  std::vector<RecordWork::Use> uses;
  {
    std::lock_guard<std::mutex> lock(run.ring->mu);
    job = run.claim_locked(k, slot);
    work_->plan_locked(run, *job, uses);
    job->remaining = uses.size();
    run.jobs[k] = job;
  }
  work_->prepare(*job);
  std::vector<RecordRange> ranges;
  std::vector<std::pair<size_t, uint64_t>> where;
  std::vector<RecordWork::Use> planned;  // the use of each planned record
  std::shared_ptr<ReadGroup> mapped;     // this batch's records of one mapped shard so far
  for (const RecordWork::Use& use : uses) {
    auto [s, r] = ctx_.dataset->locate(use.record);
    try {
      const std::span<const uint8_t> file = reads_.mapped(s);
      // A record the file is too short for goes to the engine, whose short read names it.
      const RecordLocation* loc = file.empty() ? nullptr : &locations_.at(s, r);
      if (loc && loc->offset <= file.size() && loc->stored_size <= file.size() - loc->offset) {
        if (!mapped || mapped->base != file.data()) {
          if (mapped) queue_mapped(mapped);
          mapped = std::make_shared<ReadGroup>();
          mapped->job = job;
          mapped->base = file.data();
        }
        mapped->recs.push_back({use, s, r, loc, loc->offset, static_cast<uint32_t>(loc->stored_size)});
        continue;
      }
      std::optional<RecordRange> range;
      while (!(range = reads_.range(s, r))) {
        // A remote dataset's cache has no room for shard s until reads in use end: hand
        // on what is planned and let reads and decodes finish (this thread reaps them).
        submit_reads(job, ranges, where, planned);
        if (run.stop) return;
        if (!reap_some(1, std::chrono::milliseconds(2)) && reads_.engine().inflight() == 0) reads_.wait_for_room();
      }
      ranges.push_back(*range);
      where.emplace_back(s, r);
      planned.push_back(use);
    } catch (const Error& e) {
      // A missing or replaced shard: this record fails like a bad read would.
      const Context::ShardFailure sf{s, e.what()};
      ctx_.sample_failed(run, *job, use.j, std::make_exception_ptr(naming(e, ctx_.record_name(s, r))), &sf);
      run.finish_one(*job);
    }
  }
  if (mapped) queue_mapped(mapped);
  submit_reads(job, ranges, where, planned);
}

void RecordProducer::queue_mapped(const std::shared_ptr<ReadGroup>& group) {
  uint64_t bytes = 0;
  for (const ReadGroup::Rec& r : group->recs) bytes += r.stored;
  Counters& c = run_->c;
  c.io_records += group->recs.size();
  c.io_bytes += bytes;
  reads_.count_mapped(group->recs.size(), bytes);
  // Counted as the records are queued, not by the decoders: two of them adding to it
  // record by record would pass the job's line back and forth.
  group->job->record_bytes.fetch_add(bytes, std::memory_order_relaxed);
  publish_reads();  // no completion may come to publish the mapped counts
  // Made before the lock is taken: each copies the group's pointer, and the decoders
  // wait while the lock is held.
  tasks_.clear();
  for (uint32_t q = 0; q < group->recs.size(); ++q) tasks_.push_back(DecodeTask{group, q, 0, {}, ErrorCode::kIoError});
  {
    std::lock_guard<std::mutex> lock(qmu_);
    for (DecodeTask& t : tasks_) queue_.push_back(std::move(t));
  }
  tasks_.clear();
  qcv_.notify_all();
}

void RecordProducer::publish_reads() {
  // The run's last records: their figures go out before their tasks are queued, so
  // stats() taken once the last batch is out holds every read of the run.
  if (run_->next_start >= run_->sched->num_batches() && reads_.engine().inflight() == 0)
    reads_.publish();
  else
    reads_.publish_if_due();
}

void RecordProducer::submit_reads(const std::shared_ptr<Job>& job, std::vector<RecordRange>& ranges,
                                  std::vector<std::pair<size_t, uint64_t>>& where, std::vector<RecordWork::Use>& uses) {
  if (ranges.empty()) return;
  IoEngine& engine = reads_.engine();
  const PlanOptions po = reads_.plan_options();
  const ReadPlan plan = plan_reads(ranges, po);
  // Each read starts aligned in its group's buffer (O_DIRECT wants it; 64 keeps buffered
  // reads on cache lines of their own).
  const uint64_t align = std::max<uint64_t>(po.alignment, 64);
  reqs_.clear();
  for (size_t i = 0, n = plan.reads.size(); i < n;) {
    size_t e = i;
    uint64_t bytes = 0;
    do bytes = round_up(bytes, align) + plan.reads[e++].length;
    while (e < n && round_up(bytes, align) + plan.reads[e].length <= kGroupBytes);
    auto group = std::make_shared<ReadGroup>();
    group->job = job;
    group->buf = engine.alloc(bytes);
    group->base = group->buf.data();
    group->recs.reserve(plan.reads[e - 1].first_record + plan.reads[e - 1].record_count - plan.reads[i].first_record);
    for (uint64_t at = 0; i < e; ++i) {
      const ReadPlan::Read& rd = plan.reads[i];
      at = round_up(at, align);
      uint32_t place = static_cast<uint32_t>(pending_.size());
      if (free_places_.empty()) {
        pending_.emplace_back();
      } else {
        place = free_places_.back();
        free_places_.pop_back();
      }
      const uint64_t tag = (++reads_submitted_ << 32) | place;
      pending_[place] = PendingRead{group, at, static_cast<uint32_t>(group->recs.size()), rd.record_count, tag};
      for (uint32_t q = rd.first_record; q < rd.first_record + rd.record_count; ++q) {
        group->recs.push_back({uses[q], where[q].first, where[q].second,
                               &locations_.at(where[q].first, where[q].second), at + plan.records[q].skip,
                               static_cast<uint32_t>(ranges[q].length)});
      }
      reqs_.push_back(ReadRequest{rd.file, rd.offset, static_cast<uint32_t>(rd.length), group->buf.data() + at, tag});
      at += rd.length;
    }
  }
  uint64_t bytes = 0;
  for (const RecordRange& r : ranges) bytes += r.length;
  job->record_bytes.fetch_add(bytes, std::memory_order_relaxed);  // as queue_mapped
  engine.submit(reqs_);
  ranges.clear();
  where.clear();
  uses.clear();
}

bool RecordProducer::reap_some(size_t min_complete, std::chrono::milliseconds timeout) {
  IoEngine& engine = reads_.engine();
  if (engine.inflight() == 0) return false;
  Counters& c = run_->c;
  std::vector<ReadCompletion>& done = done_;
  done.clear();
  auto w0 = Clock::now();
  engine.reap(done, min_complete, timeout);
  c.io_wait_ns += nanos(Clock::now() - w0);
  if (!done.empty()) publish_reads();
  tasks_.clear();
  for (ReadCompletion& d : done) {
    const uint32_t place = static_cast<uint32_t>(d.tag);
    if (place >= pending_.size() || !pending_[place].group || pending_[place].tag != d.tag) continue;
    PendingRead pr = std::move(pending_[place]);
    pending_[place].group.reset();
    free_places_.push_back(place);
    if (d.result > 0) c.io_bytes += static_cast<uint64_t>(d.result);
    for (uint32_t q = pr.first; q < pr.first + pr.count; ++q) {
      DecodeTask t{pr.group, q, 0, {}, ErrorCode::kIoError};
      const ReadGroup::Rec& r = pr.group->recs[q];
      if (auto bad = read_failure(d, r.at - pr.at + r.stored)) {
        t.io_error = bad->what();
        t.io_code = bad->code();
      }
      tasks_.push_back(std::move(t));
      c.io_records++;
    }
  }
  if (!tasks_.empty()) {
    {
      std::lock_guard<std::mutex> lock(qmu_);
      for (auto& t : tasks_) queue_.push_back(std::move(t));
    }
    qcv_.notify_all();
  }
  return !done.empty();
}

void RecordProducer::io_main() {
  Run& run = *run_;
  Counters& c = run.c;
  pin_and_name_this_thread(ctx_.cpu.cpus, "stoker-io");
  if (!reads_.open(run)) return;
  IoEngine& engine = reads_.engine();
  const uint64_t nb = run.sched->num_batches();
  try {
    while (!run.stop) {
      auto t0 = Clock::now();
      bool progressed = false;
      reads_.follow_queue_limit(io_limit());
      // Start the next batch when a slot is free.
      if (run.next_start < nb) {  // this thread is the only writer: reading it unlocked is safe
        size_t slot = 0;
        uint64_t k = 0;
        bool got = false;
        {
          // Advanced under the lock: the decoders read it (consumer_should_wake_locked).
          std::lock_guard<std::mutex> lock(run.ring->mu);
          slot = run.ring->find_free_locked();
          if (slot < run.ring->slots.size()) {
            run.ring->slots[slot]->state = SlotRing::State::kFilling;
            k = run.next_start++;
            got = true;
          }
        }
        if (got) {
          start_job(k, slot);
          progressed = true;
        }
      }
      if (engine.inflight() > 0) {
        progressed = reap_some(progressed ? 0 : 1, std::chrono::milliseconds(progressed ? 0 : 2)) || progressed;
      } else if (!progressed) {
        if (run.next_start >= nb) break;  // everything submitted and read
        // Waiting for the consumer to hand back a slot.
        auto w0 = Clock::now();
        std::unique_lock<std::mutex> lock(run.ring->mu);
        run.ring->producer_cv.wait_for(lock, std::chrono::milliseconds(20), [&] {
          return run.stop || run.ring->find_free_locked() < run.ring->slots.size();
        });
        c.io_wait_ns += nanos(Clock::now() - w0);
        continue;
      }
      c.io_busy_ns += nanos(Clock::now() - t0);
    }
  } catch (...) {
    run.fail(std::current_exception());
  }
  reads_.close_run();
  pending_.clear();
  free_places_.clear();
}

void RecordProducer::process(DecodeTask& t, RecordWork::Worker& worker, DecoderScratch& scratch) {
  const ReadGroup& g = *t.group;
  const ReadGroup::Rec& r = g.recs[t.rec];
  Job& job = *g.job;
  std::string& where = scratch.where;
  where.assign(shard_names_[r.shard]);
  char number[24];
  where.append(number, std::to_chars(number, number + sizeof number, r.record).ptr);
  if (!t.io_error.empty()) throw Error(t.io_code, where + ": " + t.io_error);
  const RecordLocation& loc = *r.loc;
  std::span<const uint8_t> stored(g.base + r.at, loc.stored_size);
  std::vector<uint8_t> again;
  std::vector<std::span<const uint8_t>> fields;
  try {
    fields = record_fields(ctx_.dataset->schema(), loc, stored, scratch.unpacked, where);
  } catch (const Error& e) {
    // A record fetched by ranged GET that fails its check is fetched once more (a proxy
    // or cache in between may have served a bad copy), then reported as the shard
    // cache does for whole shards.
    if (e.code() != ErrorCode::kDataLoss || !ctx_.record_reads()) throw;
    again = ctx_.cached->fetch_record(r.shard, r.record);
    fields = record_fields(ctx_.dataset->schema(), loc, again, scratch.unpacked, where + " (fetched twice)");
  }
  worker.put(*run_, job, r.use, fields, where);
}

void RecordProducer::decode_main(unsigned id) {
  Run& run = *run_;
  Counters& c = run.c;
  pin_and_name_this_thread(ctx_.cpu.cpus, "stoker-dec/" + std::to_string(id));
  std::unique_ptr<RecordWork::Worker> worker = work_->worker();
  DecoderScratch scratch;
  std::vector<DecodeTask> taken;
  // One clock reading per task, at its end, and one when tasks are taken (a reading
  // costs a fifth of a microsecond on some VMs).
  auto idle_since = Clock::now();
  for (;;) {
    taken.clear();
    {
      std::unique_lock<std::mutex> lock(qmu_);
      qcv_.wait(lock, [&] { return run.stop || (!queue_.empty() && id < active_.load()); });
      if (run.stop) {
        c.dec_wait_ns += nanos(Clock::now() - idle_since);
        return;
      }
      // Several small records at a time from a deep queue: a short document takes
      // microseconds to tokenise, and a lock taken for every one is what 8 or 16
      // decoders wait on, and what 2 wait on whenever the reader thread that holds it is
      // preempted by them on a machine with no core to spare. A large record (an image)
      // is worth the lock alone, and taking several would leave the epoch's last ones
      // to few threads; a shallow queue is shared one at a time.
      const size_t decoders = std::max<size_t>(1, std::min<size_t>(active_.load(), ctx_.threads));
      const size_t want = std::clamp<size_t>(queue_.size() / (4 * decoders), 1, kMaxTaken);
      uint64_t taken_bytes = 0;
      const size_t queued = queue_.size();
      while (taken.size() < want && !queue_.empty()) {
        const uint64_t bytes = queue_.front().group->recs[queue_.front().rec].stored;
        if (!taken.empty() && taken_bytes + bytes > kTakenBytes) break;
        DecodeTask t = std::move(queue_.front());
        queue_.pop_front();
        // A record another decoder is busy with (a long document's tokens) goes behind a
        // few other tasks, farther each time, rather than leave this thread idle until it
        // is done; after kMaxDeferrals, put() waits for it.
        if (!queue_.empty() && t.deferred < kMaxDeferrals && t.io_error.empty() &&
            worker->would_wait(*t.group->job, t.group->recs[t.rec].use)) {
          const size_t behind = std::min<size_t>(queue_.size(), size_t{8} << t.deferred++);
          queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(behind), std::move(t));
          if (taken.empty()) continue;
          break;
        }
        taken_bytes += bytes;
        taken.push_back(std::move(t));
      }
      c.queue_sum += queued * taken.size();  // the queue each task met, as one at a time
    }
    // The figures are added once per visit to the queue (the decoders adding them task
    // by task would pass their cache line back and forth), before the last hand-over:
    // stats() taken once the run's last batch is out holds them.
    auto mark = Clock::now();
    uint64_t wait_ns = nanos(mark - idle_since), busy_ns = 0, decoded = 0;
    auto add_figures = [&] {
      c.dec_wait_ns += wait_ns;
      c.dec_busy_ns += busy_ns;
      c.dec_samples += decoded;
      wait_ns = busy_ns = decoded = 0;
    };
    for (size_t i = 0; i < taken.size(); ++i) {
      if (run.stop) break;  // the rest are dropped with the run, as the queue's are
      DecodeTask& t = taken[i];
      if (i + 1 < taken.size()) {
        // The next record's location and bytes come in while this one is worked: a
        // small record's check would otherwise wait on memory for most of its lines (the
        // records of a shuffle lie far apart; the hardware's prefetch needs a run).
        const ReadGroup& ng = *taken[i + 1].group;
        const ReadGroup::Rec& nr = ng.recs[taken[i + 1].rec];
        __builtin_prefetch(nr.loc);
        const uint8_t* next = ng.base + nr.at;
        for (uint32_t at = 0; at < std::min<uint32_t>(nr.stored, kPrefetchBytes); at += 64) __builtin_prefetch(next + at);
      }
      // Not a copy of the pointer: run.jobs holds the job until it is handed over, and
      // a copy per task is two more atomic counts on a line every decoder shares.
      Job& job = *t.group->job;
      const ReadGroup::Rec& r = t.group->recs[t.rec];
      try {
        process(t, *worker, scratch);
        decoded++;
      } catch (...) {
        job.record_bytes.fetch_sub(r.stored, std::memory_order_relaxed);  // not delivered
        ctx_.sample_failed(run, job, r.use.j, std::current_exception());
      }
      reads_.done(r.shard);  // a remote shard may be closed once its records are decoded
      t.group.reset();  // the IO buffer goes back as soon as its last record is decoded
      const auto end = Clock::now();
      busy_ns += nanos(end - mark);
      mark = end;
      if (i + 1 == taken.size()) add_figures();
      run.finish_one(job);
    }
    add_figures();  // a run stopped mid-visit
    idle_since = mark;
  }
}

}  // namespace

void RecordWork::plan_record_per_sample(const Run& run, Job& job, std::vector<Use>& uses) {
  for (uint64_t j = 0; j < job.samples.size(); ++j) {
    job.samples[j] = run.order->at(run.sched->position(job.k, j));
    uses.push_back(Use{static_cast<uint32_t>(j), job.samples[j], 0});
  }
}

std::unique_ptr<Producer> make_record_producer(const Context& ctx, std::unique_ptr<RecordWork> work) {
  return std::make_unique<RecordProducer>(ctx, std::move(work));
}

}  // namespace stoker::internal
