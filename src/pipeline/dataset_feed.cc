// The feed of one dataset (dataset_feed.h).
#include "pipeline/dataset_feed.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "figures/autotune.h"
#include "pipeline/bucket_plan.h"
#include "pipeline/loader_report.h"
#include "pipeline/packed_samples.h"
#include "pipeline/padded_batches.h"
#include "pipeline/video_fields.h"
#include "pipeline/producer.h"
#include "pipeline/skip_compaction.h"
#include "pipeline/slot_ring.h"
#include "stoker/verdict.h"
#include "stoker/error.h"
#include "util/log.h"
#include "util/platform.h"

#include <sched.h>

namespace stoker::internal {

namespace {

class DatasetFeed final : public Feed {
 public:
  DatasetFeed(const LoaderOptions& options, RankInfo rank, std::shared_ptr<TuneThreadBudget> shared_threads);
  ~DatasetFeed() override { stop_run(); }
  DatasetFeed(const DatasetFeed&) = delete;
  DatasetFeed& operator=(const DatasetFeed&) = delete;

  std::optional<Batch> next(bool block, bool* would_wait) override;
  void set_epoch(uint64_t e) override;
  uint64_t epoch() const noexcept override { return epoch_; }
  uint64_t num_batches() const override;
  uint64_t epoch_samples() const noexcept override { return ctx.layout->units(); }
  OrderState state() const override;
  void load_state(const OrderState& s) override;
  void close() override;
  LoaderStats stats() const override;
  const LoaderOptions& options() const noexcept override { return opt; }
  const std::vector<Output>& outputs() const noexcept override { return outputs_; }
  const Schema& schema() const noexcept override { return ctx.dataset->schema(); }
  const std::vector<std::string>& class_names() const noexcept override {
    return ctx.dataset->manifest().class_names;
  }
  uint64_t generation() const noexcept override { return manifest_generation(ctx.dataset->manifest()); }

 private:
  LoaderOptions opt;
  Context ctx;
  std::vector<Output> outputs_;  // ctx.tensors, then ctx.vars
  bool tokens = false;
  bool packed = false;  // samples of varying length: packed into rows (seq_len) or padded (max_tokens)
  std::shared_ptr<const PackPlan> plan_;  // packed: which samples each row holds
  // max_tokens: padded batches, each one unit of the order (opt.batch_size is 1 here).
  std::optional<PaddedFacts> padded_;
  TokenCountsReport plan_counts_;  // text: how the plan's token counts came
  bool fast_crop = false;  // manifest meta "fast_crop" (LoaderStats::fast_crop)
  // Token data trims the final step to a multiple of the world size instead of padding it
  // (order.h TailPolicy): padding would need the first window decompressed again.
  // Padded batches repeat whole planned batches, read again like any record.
  TailPolicy tail_policy() const noexcept {
    return (tokens || packed) && !padded_ ? TailPolicy::kTrim : TailPolicy::kPad;
  }
  // LoaderOptions::max_skipped as a count of this run's samples.
  uint64_t skip_budget(const RankSchedule& s) const {
    const uint64_t nb = s.num_batches();
    const uint64_t samples = nb ? (nb - 1) * s.batch_size() + s.batch_length(nb - 1) : 0;
    const double m = opt.max_skipped.value_or(std::max(100.0, 0.01 * static_cast<double>(samples)));
    if (m >= 1e19) return UINT64_MAX - 1;  // infinity: no limit (and no overflow below)
    return m < 1 ? static_cast<uint64_t>(m * static_cast<double>(samples)) : static_cast<uint64_t>(m);
  }
  std::shared_ptr<SlotRing> ring;
  std::unique_ptr<Run> run;
  std::unique_ptr<Producer> producer;
  std::unique_ptr<LoaderReporter> reporter;
  std::atomic<bool> closed{false};  // close(): next() throws kCancelled

  // ---- the consumer's side of the current run ----
  uint64_t epoch_ = 0;
  uint64_t start_consumed = 0;
  std::atomic<bool> running{false};  // atomic, like the figures below: stats() may run on any thread
  uint64_t next_deliver = 0;
  // OnError::kSkip on one rank: the stream position the delivered batches reached (a
  // batch filled up from later batches reaches into them); state() resumes there.
  std::optional<uint64_t> stream_consumed;
  std::exception_ptr delivered_error;  // sticky after a throw
  std::atomic<Clock::time_point> run_start{};
  std::atomic<double> first_batch_s{0};
  std::atomic<uint64_t> batches_out{0}, samples_out{0}, record_bytes_out{0}, padding_out{0};
  // A remote dataset's cache figures when the current run started (zero for the first
  // run, which so includes opening the dataset). Written by the consumer thread between
  // runs, read by stats() on any thread.
  mutable std::mutex net_mu;
  CacheStats net_base;
  bool first_run = true;
  std::atomic<double> first_batch_fetch_wait{0};  // CacheStats::wait_s at the run's first batch

  // ---- threads="auto" (figures/autotune.h) and reserve_cores ----
  unsigned reserve_ = 0;              // cores kept for the consumer, taken at the first next()
  bool reserved_ = false;             // the consumer's core was looked up
  // The thread of the first next(): its run delay is the consumer's. Atomic, as the base
  // below: stats() reads them on any thread.
  std::atomic<long> consumer_tid_{-1};
  std::atomic<double> run_delay_base_{0};  // its run delay when the run started
  std::unique_ptr<AutoTuner> tuner;   // null: explicit threads
  uint64_t tune_calls_ = 0;
  mutable std::mutex tune_mu;
  TuneStats tune_stats;               // tune_mu: what stats() reports of the tuner
  std::string reserve_note_;          // tune_mu: the CPUs kept for the consumer, for the explanation
  void reserve_consumer_core();
  void tune_step();
  void apply(const TuneChange& c);

  void start_run();
  void stop_run();
  Batch make_batch(const std::shared_ptr<Job>& job, uint64_t n, std::shared_ptr<RingLease> lease);
  LoaderStats snapshot() const;
  // Packed rows and padded batches: the records each unit of the order reads.
  CachedShards::UnitRecords unit_records() const {
    if (padded_) {
      return [p = padded_->plan](uint64_t u, const std::function<void(uint64_t)>& fn) {
        for (uint64_t x = p->begin[u]; x < p->begin[u + 1]; ++x) fn(p->samples[x]);
      };
    }
    if (plan_) {
      return [p = plan_](uint64_t u, const std::function<void(uint64_t)>& fn) {
        for (const PackedPiece& piece : p->row(u)) fn(piece.sample);
      };
    }
    return nullptr;
  }
  // Positions in an epoch's order: the records, or the bucketed order's (buckets.h).
  uint64_t order_units() const {
    return ctx.buckets ? BucketOrder::epoch_size(ctx.buckets->counts, ctx.buckets->group, ctx.buckets->fill)
                       : ctx.layout->units();
  }
};

DatasetFeed::DatasetFeed(const LoaderOptions& options, RankInfo rank, std::shared_ptr<TuneThreadBudget> shared_threads)
    : opt(options) {
  if (opt.max_tokens > 0) opt.batch_size = 1;  // a batch is one planned batch (padded_batches.h)
  ctx.opt = &opt;
  ctx.rank = rank;
  ShardReaderOptions ro;
  ro.max_record_bytes = opt.max_record_bytes;
  ctx.cached = CachedShards::open(CachedShardsOptions{opt.path, opt.cache_dir, opt.cache_limit, opt.cache_prefetch,
                                                      opt.remote, opt.max_record_bytes});
  ctx.dataset = Dataset::open(ctx.cached ? ctx.cached->local_dir() : opt.path, ro);
  const Dataset& dataset = *ctx.dataset;
  const Schema& schema = dataset.schema();
  if (auto it = dataset.manifest().meta.find("fast_crop"); it != dataset.manifest().meta.end() && it->second == "1")
    fast_crop = true;
  TokenFacts tok;
  tok.field = tokens_field(schema);
  tokens = tok.field >= 0;
  packed = !tokens && (opt.seq_len > 0 || opt.max_tokens > 0);
  if (tokens && opt.max_tokens > 0)
    throw_error(ErrorCode::kInvalidArgument, "max_tokens: " + opt.path + " holds token rows of one length (" +
                                                 schema.to_string() + "); max_tokens batches samples of varying "
                                                 "length (a var-array 'tokens' field)");
  if (tokens && opt.seq_len > 0)
    throw_error(ErrorCode::kInvalidArgument, "seq_len: " + opt.path + " holds token rows of the seq_len they were "
                                                 "packed with (" + schema.to_string() + "); seq_len packs samples of "
                                                 "varying length (a var-array 'tokens' field)");
  if (ctx.cached) ctx.cached->choose_reads(opt.remote_reads, tokens, opt.order.kind);
  if (!tokens && !packed && opt.targets)
    throw_error(ErrorCode::kInvalidArgument, "targets: next-token targets need token data, and " + opt.path +
                                                 " holds records (schema " + schema.to_string() + ")");
  if (!tokens && !packed && (opt.position_ids || opt.loss_mask || opt.doc_ids || opt.cu_seqlens))
    throw_error(ErrorCode::kInvalidArgument,
                std::string(opt.position_ids ? "position_ids" : opt.loss_mask ? "loss_mask" : opt.doc_ids ? "doc_ids" : "cu_seqlens") +
                    ": document outputs need token data packed with boundaries, and " + opt.path +
                    " holds records (schema " + schema.to_string() + ")");
  if ((tokens || packed) && !opt.fields.empty())
    throw_error(ErrorCode::kInvalidArgument,
                "fields: per-field transforms apply to datasets of records, not to token data or packed samples");

  // Threads first: opening text tokenises the dataset on them (token_counts.h).
  ctx.cpu = plan_cpus(opt.gpu_pci_bus_id);
  if (!opt.cpus.empty()) {
    ctx.cpu.cpus = opt.cpus;
    ctx.cpu.explanation = "threads pinned to the configured CPUs " + format_cpu_list(opt.cpus);
  }
  const bool auto_threads = opt.threads == LoaderOptions::kAutoThreads;
  if (opt.cpus.empty()) {
    reserve_ = opt.reserve_cores.value_or(ctx.cpu.cpus.size() >= 4 ? 1u : 0u);
    reserve_ = std::min<unsigned>(reserve_, ctx.cpu.cpus.empty() ? 0u : static_cast<unsigned>(ctx.cpu.cpus.size() - 1));
  }
  // The CPU budget: the plan's count (affinity, cgroup quota) less the reserved cores.
  const unsigned budget = tune_thread_budget(ctx.cpu, reserve_);
  ctx.threads = auto_threads || opt.threads == 0 ? budget : opt.threads;
  // The IO queue depth: tuned with the threads for records (loader.h, `io`).
  const bool auto_depth = auto_threads && opt.io.queue_depth == LoaderOptions::kAutoQueueDepth && !tokens;
  if (opt.io.queue_depth == LoaderOptions::kAutoQueueDepth)
    opt.io.queue_depth = auto_depth ? LoaderOptions::kAutoQueueDepthMax : IoOptions{}.queue_depth;

  ctx.order_opt = opt.order;
  std::vector<uint64_t> groups;
  PackedFacts pack;
  if (packed && opt.max_tokens > 0) {
    padded_ = plan_padded_batches(opt, ctx);
    plan_counts_ = padded_->fields.counts;
    groups.assign(padded_->plan->batches(), 1);
    if (ctx.order_opt.kind != OrderKind::kSequential) {
      ctx.order_opt.kind = OrderKind::kShuffled;
      ctx.order_opt.chunk_size = 1;
      ctx.order_opt.window_chunks = 1;
    }
  } else if (packed) {
    pack = plan_packed_samples(opt, ctx);
    plan_ = pack.plan;
    plan_counts_ = pack.counts;
    groups = pack.plan->group_rows;
    // Rows are made of samples from anywhere in the dataset: no chunk keeps reads local.
    // A split sample's rows (a row group) stay together: shuffled as one chunk, within it.
    const uint64_t widest = groups.empty() ? 1 : *std::max_element(groups.begin(), groups.end());
    if (ctx.order_opt.kind != OrderKind::kSequential) {
      ctx.order_opt.kind = widest > 1 ? OrderKind::kChunkLocal : OrderKind::kShuffled;
      ctx.order_opt.chunk_size = widest;
      ctx.order_opt.window_chunks = 1;
    }
  } else if (tokens) {
    groups = plan_token_rows(ctx, tok);
    if (ctx.order_opt.kind == OrderKind::kShuffled || ctx.order_opt.kind == OrderKind::kChunkLocal)
      ctx.order_opt.kind = OrderKind::kTokenWindow;
  } else {
    for (const ShardEntry& s : dataset.manifest().shards) groups.push_back(s.records);
  }
  ctx.layout = std::make_shared<UnitLayout>(groups);
  // Every shard may end up with two descriptors (the reader's and the IO engine's
  // O_DIRECT one): thousands of shards outgrow the usual soft limit of 1024.
  ensure_open_file_limit(2 * dataset.shard_count() + 256, std::to_string(dataset.shard_count()) + " shards");
  reporter = std::make_unique<LoaderReporter>(opt);

  ImageFacts img;
  VideoFacts vid;
  BucketedField bucketed;
  if (tokens) plan_token_outputs(opt, schema, tok, ctx);
  else if (!packed) {
    img = plan_image_fields(opt, schema, ctx);
    vid = plan_video_fields(opt, schema, ctx);
    bucketed = plan_bucket_outputs(opt, schema, ctx, img, vid);
  }
  ctx.buckets = plan_buckets(ctx, std::move(bucketed), img.key_field);
  outputs_ = ctx.tensors;
  outputs_.insert(outputs_.end(), ctx.vars.begin(), ctx.vars.end());

  // Slot layout: one allocation per slot, a tensor after another.
  const size_t B = opt.batch_size;
  size_t off = 0;
  for (auto& t : ctx.tensors) {
    t.offset = off;
    off += (t.item_bytes * B + 255) / 256 * 256;
  }
  ring = std::make_shared<SlotRing>();
  ring->alloc = opt.slot_allocator ? opt.slot_allocator : host_slot_allocator();
  ring->slot_bytes = off;
  const bool auto_slots = auto_threads && opt.slots == 0 && !tokens;  // tokens size their ring by windows
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
    // into their batches, as far as the memory allows.
    if (tokens)
      opt.slots = static_cast<unsigned>(
          std::clamp<size_t>(token_direct_slots(ctx, B), opt.slots, std::max<size_t>(fit, 4)));
  }
  uint64_t memory_budget = 0;
  unsigned slots_max = opt.slots;
  if (auto_threads) {
    memory_budget = tune_memory_budget(opt.memory_limit);
    if (auto_slots) slots_max = tune_slots_max(memory_budget, ring->slot_bytes, opt.slots);
    ctx.slots_max = slots_max;
  }
  ring->add_slots_locked(opt.slots);
  run = std::make_unique<Run>(ring);
  run->var_outputs = ctx.vars.size();
  run->warn = opt.warning_sink;
  for (auto& slot : ring->slots) slot->var_offsets.assign(ctx.vars.size() * (B + 1), 0);
  if (tokens) producer = make_token_producer(ctx, tok);
  else if (padded_) producer = make_record_producer(ctx, make_padded_work(ctx, *padded_));
  else if (packed) producer = make_record_producer(ctx, make_packed_work(ctx, pack));
  else if (!vid.empty()) producer = make_record_producer(ctx, make_video_work(ctx, img, vid));
  else producer = make_record_producer(ctx, make_image_work(ctx, img));
  if (auto_threads) {
    DiagnoseOptions dopt;
    dopt.cpus_available = ctx.threads;
    tuner = std::make_unique<AutoTuner>(TuneKnob{1, 1, ctx.threads, true}, TuneKnob{opt.slots, opt.slots, slots_max, auto_slots},
                                        AutoTuneOptions{}, dopt);
    // Records by ranged GET start where an untuned loader is: each read waits a round trip.
    const unsigned depth = !auto_depth ? opt.io.queue_depth
                           : ctx.record_reads() ? IoOptions{}.queue_depth
                                                : LoaderOptions::kAutoQueueDepthStart;
    tuner->set_queue_depth(TuneKnob{depth, std::min(depth, 4u), opt.io.queue_depth, auto_depth, true});
    tuner->share_threads(std::move(shared_threads));
    {
      std::lock_guard<std::mutex> lock(ring->mu);
      producer->set_active_locked(tuner->threads().value);
    }
    if (auto_depth) producer->set_io_limit(depth);
    tune_stats.enabled = true;
    tune_stats.threads = tuner->threads().value;
    tune_stats.threads_max = ctx.threads;
    tune_stats.slots = opt.slots;
    tune_stats.slots_max = slots_max;
    tune_stats.queue_depth = depth;
    tune_stats.queue_depth_max = opt.io.queue_depth;
    tune_stats.memory_budget = memory_budget;
  }
}

void DatasetFeed::reserve_consumer_core() {
  reserved_ = true;
  consumer_tid_ = static_cast<long>(gettid());
  if (reserve_ == 0) return;
  const int here = sched_getcpu();
  std::vector<int>& cpus = ctx.cpu.cpus;
  auto at = std::find(cpus.begin(), cpus.end(), here);
  if (at == cpus.end()) return;  // the consumer runs outside the loader's CPUs: nothing to keep off
  std::vector<int> kept;
  size_t i = static_cast<size_t>(at - cpus.begin());
  for (unsigned r = 0; r < reserve_; ++r) kept.push_back(cpus[(i + r) % cpus.size()]);
  std::vector<int> rest;
  for (int c : cpus)
    if (std::find(kept.begin(), kept.end(), c) == kept.end()) rest.push_back(c);
  if (rest.empty()) return;
  cpus = rest;
  std::sort(kept.begin(), kept.end());
  std::lock_guard<std::mutex> lock(tune_mu);  // stats() may read the explanation on another thread
  reserve_note_ = "; CPUs " + format_cpu_list(kept) + " kept for the consumer (reserve_cores=" +
                  std::to_string(reserve_) + ")";
}

void DatasetFeed::tune_step() {
  if (!tuner || tuner->settled()) return;
  if (++tune_calls_ % 4 != 0) return;  // a snapshot per batch would cost small batches
  const std::optional<TuneChange> c = tuner->update(FeedFigures::from(snapshot()), batches_out);
  if (c) apply(*c);
  std::lock_guard<std::mutex> lock(tune_mu);
  tune_stats.threads = tuner->threads().value;
  tune_stats.slots = tuner->slots().value;
  tune_stats.queue_depth = tuner->queue_depth().value;
  tune_stats.settled = tuner->settled();
  tune_stats.noise = tuner->noise();
  if (c) {
    tune_stats.changes.push_back(c->to_string());
    tune_stats.last_change_s = c->at_s;
  }
}

void DatasetFeed::apply(const TuneChange& c) {
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    if (c.knob == "threads") {
      producer->set_active_locked(c.to);
    } else if (c.knob == "queue_depth") {
      producer->set_io_limit(c.to);
    } else {
      if (c.to > ring->slots.size()) {
        const size_t before = ring->slots.size();
        ring->add_slots_locked(c.to - before);
        for (size_t i = before; i < ring->slots.size(); ++i)
          ring->slots[i]->var_offsets.assign(ctx.vars.size() * (opt.batch_size + 1), 0);
      }
      ring->limit = c.to;
    }
  }
  producer->wake();
  ring->producer_cv.notify_all();
  log_info("auto-tune: " + c.to_string());
}

void DatasetFeed::start_run() {
  Run& r = *run;
  r.epoch = epoch_;
  r.order = ctx.buckets ? bucket_epoch_order(ctx, *ctx.buckets, epoch_)
                       : std::make_unique<EpochOrder>(ctx.order_opt, ctx.layout, epoch_);
  r.sched = std::make_unique<RankSchedule>(rank_schedule(r.order->size(), opt, ctx.rank, start_consumed, tail_policy()));
  if (ctx.cached) {
    std::lock_guard<std::mutex> lock(net_mu);
    if (!first_run) net_base = ctx.cached->stats();
    first_run = false;
  }
  if (ctx.cached) ctx.cached->prefetch_run(*r.order, *r.sched, *ctx.dataset, tokens, unit_records());
  r.stop = false;
  r.next_start = 0;
  r.jobs.clear();
  r.fatal = nullptr;
  r.c.reset();
  r.skip_budget = skip_budget(*r.sched);
  {
    std::lock_guard<std::mutex> lock(ctx.skip_log_mu);
    ctx.skip_first.clear();
  }
  next_deliver = 0;
  stream_consumed.reset();
  delivered_error = nullptr;
  first_batch_s = 0;
  batches_out = 0;
  samples_out = 0;
  record_bytes_out = 0;
  padding_out = 0;
  run_start = Clock::now();
  if (const long tid = consumer_tid_.load(); tid >= 0) run_delay_base_ = std::max(0.0, thread_run_delay_s("/", tid));
  reporter->start_run();
  running = true;
  producer->start(r);
}

void DatasetFeed::stop_run() {
  if (!running) return;
  {
    // Under the ring's lock: a thread between checking `stop` and waiting cannot miss it.
    std::lock_guard<std::mutex> lock(ring->mu);
    run->stop = true;
  }
  ring->cv.notify_all();
  ring->producer_cv.notify_all();
  producer->wake();
  producer->join();
  std::lock_guard<std::mutex> lock(ring->mu);
  for (auto& s : ring->slots)
    if (s->state == SlotRing::State::kFilling || s->state == SlotRing::State::kReady) s->state = SlotRing::State::kFree;
  run->jobs.clear();
  producer->clear();
  if (ctx.cached) ctx.cached->end_run();  // the uses of reads and decodes the stop dropped
  running = false;
}

std::optional<Batch> DatasetFeed::next(bool block, bool* would_wait) {
  if (closed) throw_error(ErrorCode::kCancelled, "the Loader was closed (close()); it delivers no more batches");
  if (!reserved_) reserve_consumer_core();
  if (!running) start_run();
  if (delivered_error) std::rethrow_exception(delivered_error);
  Run& r = *run;
  auto snap = [this] { return snapshot(); };
  for (;;) {
    const uint64_t k = next_deliver;
    if (k >= r.sched->num_batches()) {
      {
        // A run that failed after its last batch was ready (the skip budget ran out on
        // batches that were then all compacted away) must not end as a quiet epoch.
        std::lock_guard<std::mutex> lock(ring->mu);
        if (r.fatal) {
          delivered_error = r.fatal;
          std::rethrow_exception(r.fatal);
        }
      }
      reporter->epoch_end(snap, epoch_);
      return std::nullopt;
    }
    reporter->tick(snap, epoch_);
    std::shared_ptr<Job> job;
    uint64_t n = 0;
    std::shared_ptr<RingLease> lease;
    {
      std::unique_lock<std::mutex> lock(ring->mu);
      auto w0 = Clock::now();
      if (!block) {
        auto it = r.jobs.find(k);
        // Not ready, or it must borrow samples from batches that may not be: the caller
        // waits elsewhere (a failed run also goes that way, to be rethrown there).
        if (it == r.jobs.end() || !it->second->ready || r.fatal ||
            needs_compaction(opt, *it->second, it->second->samples.size())) {
          *would_wait = true;
          return std::nullopt;
        }
      }
      try {
        job = r.wait_ready(k, lock, opt.grow_when_held, next_deliver);
      } catch (...) {
        delivered_error = std::current_exception();
        throw;
      }
      r.jobs.erase(k);
      ring->slots[job->slot]->state = SlotRing::State::kLeased;
      lease = std::make_shared<RingLease>(ring, job->slot);
      {
        std::lock_guard<std::mutex> jl(job->mu);
        if (job->error) {
          delivered_error = job->error;
          std::rethrow_exception(job->error);
        }
      }
      n = job->samples.size();
      std::optional<Compacted> compacted;
      if (needs_compaction(opt, *job, n)) {
        try {
          compacted = compact_batch(ctx, r, job, lock);
          n = compacted->n;
        } catch (...) {
          delivered_error = std::current_exception();
          throw;
        }
      }
      // Where this rank's stream stands once the batch is out: a batch filled from later
      // ones used part of them, which a resume must not deliver again.
      if (n > 0) {
        if (!compacted) stream_consumed = r.sched->consumed_after(k + 1);
        else if (compacted->through_j == 0) stream_consumed = r.sched->consumed_after(compacted->through_k);
        else stream_consumed = r.sched->position(compacted->through_k, compacted->through_j - 1) + 1;
      }
      if (opt.on_error == OnError::kSkip && r.fatal) {  // e.g. past the skip budget: stop here
        delivered_error = r.fatal;
        std::rethrow_exception(r.fatal);
      }
      r.c.consumer_wait_ns += nanos(Clock::now() - w0);
      r.c.ready_sum += ring->count_locked(SlotRing::State::kReady);
      r.c.free_sum += ring->count_locked(SlotRing::State::kFree);
      r.c.samples_n++;
    }
    next_deliver++;
    record_bytes_out += job->record_bytes.load(std::memory_order_relaxed);
    padding_out += job->padding;
    // One rank: an empty batch had every sample dropped or moved earlier, and a short one
    // under drop_last used up every later batch. Several ranks keep every batch, however
    // short, so that each rank delivers the same number (skip_compaction.h).
    const bool every_batch_out = ctx.rank.world_size > 1;
    if (n == 0 && !every_batch_out) continue;
    if (opt.drop_last && n < opt.batch_size && !every_batch_out) {
      next_deliver = r.sched->num_batches();
      return std::nullopt;
    }
    Batch b = make_batch(job, n, std::move(lease));
    tune_step();
    return b;
  }
}

Batch DatasetFeed::make_batch(const std::shared_ptr<Job>& job, uint64_t n,
                               std::shared_ptr<RingLease> lease) {
  std::vector<TensorView> views;
  for (size_t t = 0; t < ctx.tensors.size(); ++t) {
    TensorView v;
    v.name = ctx.tensors[t].name;
    v.data = ctx.tensor_ptr(*job, static_cast<int>(t));
    v.dtype = ctx.tensors[t].dtype;
    v.shape.push_back(static_cast<int64_t>(n));
    for (int64_t d : ctx.tensors[t].shape) v.shape.push_back(d);
    views.push_back(std::move(v));
  }
  if (ctx.buckets && n > 0) shape_bucket_views(*ctx.buckets, batch_bucket(*ctx.buckets, job->samples[0]), n, views);
  if (padded_ && n > 0) n = shape_padded_views(*padded_, job->samples[0], views);
  if (!ctx.vars.empty()) {
    // Variable-size outputs: each one's samples back to back in the slot's own buffer
    // (leased with it), and B + 1 offsets.
    SlotRing::Slot& slot = *ring->slots[job->slot];
    size_t total = 0;
    for (size_t v = 0; v < ctx.vars.size(); ++v) {
      for (uint64_t j = 0; j < n; ++j) total += (job->var[v][j].size() + 7) / 8 * 8;
      if (ctx.vars[v].cumulative) total += 8;  // the leading 0
    }
    slot.var_mem.resize(std::max<size_t>(total, 8));
    slot.var_offsets.resize(ctx.vars.size() * (opt.batch_size + 1));
    size_t at = 0;
    for (size_t v = 0; v < ctx.vars.size(); ++v) {
      const Output& vo = ctx.vars[v];
      int64_t* offs = slot.var_offsets.data() + v * (opt.batch_size + 1);
      if (vo.cumulative) {
        // One int32 array for the batch: 0, then the running sum of the samples' values;
        // sample j's sums are entries [offs[j], offs[j + 1]) (sample 0 also has the 0).
        int32_t* out = reinterpret_cast<int32_t*>(slot.var_mem.data() + at);
        int64_t count = 0, sum = 0;
        out[count++] = 0;
        offs[0] = 0;
        for (uint64_t j = 0; j < n; ++j) {
          const auto& bytes = job->var[v][j];
          for (size_t x = 0; x + 4 <= bytes.size(); x += 4) {
            int32_t len;
            std::memcpy(&len, bytes.data() + x, 4);
            sum += len;
            out[count++] = static_cast<int32_t>(sum);
          }
          offs[j + 1] = count;
        }
        TensorView tv;
        tv.name = vo.name;
        tv.data = out;
        tv.dtype = ElemType::kInt32;
        tv.kind = TensorKind::kRagged;
        tv.offsets = offs;
        tv.shape = {count};
        views.push_back(std::move(tv));
        at = (at + static_cast<size_t>(count) * 4 + 7) / 8 * 8;
        continue;
      }
      const size_t begin = at;
      offs[0] = 0;
      for (uint64_t j = 0; j < n; ++j) {
        const auto& bytes = job->var[v][j];
        if (!bytes.empty()) std::memcpy(slot.var_mem.data() + at, bytes.data(), bytes.size());
        at += bytes.size();
        offs[j + 1] = static_cast<int64_t>((at - begin) / vo.item_bytes);
      }
      TensorView tv;
      tv.name = vo.name;
      tv.data = slot.var_mem.data() + begin;
      tv.dtype = vo.dtype;
      tv.kind = vo.kind;
      tv.offsets = offs;
      tv.shape.push_back(offs[n]);
      for (int64_t d : vo.shape) tv.shape.push_back(d);
      views.push_back(std::move(tv));
      at = (at + 7) / 8 * 8;  // the next output's values start aligned for any element type
    }
  }
  if (batches_out == 0) {
    first_batch_s = seconds(Clock::now() - run_start.load());
    if (ctx.cached) first_batch_fetch_wait = ctx.cached->stats().wait_s;
  }
  batches_out++;
  samples_out += n;
  return Batch(std::move(views), std::move(lease), epoch_, job->k, n);
}


LoaderStats DatasetFeed::snapshot() const {
  const Counters& c = run->c;
  LoaderStats s;
  s.wall_s = running ? seconds(Clock::now() - run_start.load()) : 0;
  s.first_batch_s = first_batch_s;
  s.batches = batches_out;
  s.samples = samples_out;
  s.bytes_read = c.io_bytes;
  s.record_bytes = record_bytes_out;
  s.skipped = c.skipped;
  s.padding_tokens = padding_out;
  s.tokenize = packed && !opt.tokenizer.empty();
  if (plan_) {
    s.truncated_tokens = plan_->truncated_tokens;
    s.empty_samples = plan_->empty_samples;
  }
  s.plan_s = plan_counts_.seconds;
  s.plan_tokenised = plan_counts_.tokenised;
  if (padded_) {
    s.truncated_tokens = padded_->plan->truncated_tokens;
    s.empty_samples = padded_->plan->empty_samples;
  }
  s.tokens = tokens;
  s.fast_crop = fast_crop;
  s.io.threads = 1;
  s.io.busy_s = c.io_busy_ns / 1e9;
  s.io.wait_s = c.io_wait_ns / 1e9;
  s.io.items = c.io_records;
  s.decode.threads = tuner ? std::min(ctx.threads, producer->active()) : ctx.threads;
  s.decode.busy_s = c.dec_busy_ns / 1e9;
  s.decode.wait_s = c.dec_wait_ns / 1e9;
  s.decode.items = c.dec_samples;
  s.consumer_wait_s = c.consumer_wait_ns / 1e9;
  if (const long tid = consumer_tid_.load(); tid >= 0)
    s.consumer_run_delay_s = std::max(0.0, thread_run_delay_s("/", tid) - run_delay_base_.load());
  const double n = static_cast<double>(std::max<uint64_t>(1, c.samples_n));
  s.slots_ready_avg = c.ready_sum / n;
  s.slots_free_avg = c.free_sum / n;
  s.decode_queue_avg = c.dec_samples ? static_cast<double>(c.queue_sum) / std::max<uint64_t>(1, c.dec_samples) : 0;
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    s.slots = static_cast<unsigned>(ring->usable_locked());
  }
  s.io_engine = producer->io_stats();
  if (ctx.cached) {
    const CacheStats now = ctx.cached->stats();
    CacheStats base;
    {
      std::lock_guard<std::mutex> lock(net_mu);
      base = net_base;
    }
    auto sub = [](uint64_t a, uint64_t b) { return a >= b ? a - b : 0; };
    NetworkStats& n = s.network;
    n.remote = true;
    n.record_reads = ctx.cached->record_reads();
    n.bytes_fetched = sub(now.remote.bytes_fetched, base.remote.bytes_fetched);
    n.requests = sub(now.remote.requests, base.remote.requests);
    n.retries = sub(now.remote.retries, base.remote.retries);
    n.range_ignored = now.remote.range_ignored;
    n.whole_fetches = sub(now.remote.whole_fetches, base.remote.whole_fetches);
    n.busy_s = std::max(0.0, now.remote.busy_s - base.remote.busy_s);
    n.request_s = std::max(0.0, now.remote.request_s - base.remote.request_s);
    n.requests_in_flight = now.remote.requests_in_flight;
    n.fetch_wait_s = std::max(0.0, now.wait_s - base.wait_s);
    n.startup_fetch_wait_s =
        batches_out > 0 ? std::clamp(first_batch_fetch_wait.load() - base.wait_s, 0.0, n.fetch_wait_s) : n.fetch_wait_s;
    n.hits = sub(now.hits, base.hits);
    n.misses = sub(now.misses, base.misses);
    n.cache_bytes = now.bytes_cached;
    n.cache_limit = now.limit;
  }
  s.cpu_explanation = ctx.cpu.explanation;
  s.slot_memory = ring->alloc->name();
  {
    std::lock_guard<std::mutex> lock(tune_mu);
    s.tune = tune_stats;
    s.cpu_explanation += reserve_note_;
  }
  return s;
}

void DatasetFeed::set_epoch(uint64_t e) {
  stop_run();
  epoch_ = e;
  start_consumed = 0;
}

uint64_t DatasetFeed::num_batches() const {
  if (running) return run->sched->num_batches();
  return rank_schedule(order_units(), opt, ctx.rank, start_consumed, tail_policy()).num_batches();
}

OrderState DatasetFeed::state() const {
  OrderState s = OrderState::start(ctx.order_opt, order_units(), epoch_);
  if (ctx.buckets) s.bucket_batch = ctx.buckets->group;
  if (running) {
    s.consumed = run->sched->consumed_after(next_deliver);
    // Skipped samples filled in from later batches (one rank only): the stream is the
    // global order, and the resume point is the last sample taken.
    if (stream_consumed && ctx.rank.world_size == 1 && next_deliver < run->sched->num_batches())
      s.consumed = std::max(s.consumed, *stream_consumed);
  } else {
    s.consumed = start_consumed;
  }
  return s;
}

void DatasetFeed::load_state(const OrderState& s) {
  const uint64_t group = ctx.buckets ? ctx.buckets->group : 0;
  auto what = [](uint64_t g) { return g ? "buckets of global batch " + std::to_string(g) : std::string("no buckets"); };
  if (s.bucket_batch != group)
    throw_error(ErrorCode::kInvalidArgument, "order state: taken with " + what(s.bucket_batch) + ", this Loader has " +
                                                 what(group) + " (batch_size x world size): a bucketed order is made "
                                                 "of whole global batches, so a resume must keep it");
  s.check_matches(ctx.order_opt, order_units());
  stop_run();
  epoch_ = s.epoch;
  start_consumed = s.consumed;
}

void DatasetFeed::close() {
  if (closed.exchange(true)) return;
  {
    // Under the ring's lock, as stop_run: a thread between checking and waiting cannot
    // miss it. The consumer's wait (Run::wait_ready) sees `closed` and throws; the
    // threads stop here and are joined by the consumer's thread (destructor, stop_run).
    std::lock_guard<std::mutex> lock(ring->mu);
    run->closed = true;
    run->stop = true;
  }
  ring->cv.notify_all();
  ring->producer_cv.notify_all();
  producer->wake();
}

LoaderStats DatasetFeed::stats() const {
  LoaderStats s = snapshot();
  record_verdict(s, diagnose(FeedFigures::from(s)));
  return s;
}

}  // namespace

std::unique_ptr<Feed> open_dataset_feed(const LoaderOptions& opt, RankInfo rank,
                                        std::shared_ptr<TuneThreadBudget> threads) {
  return std::make_unique<DatasetFeed>(opt, rank, std::move(threads));
}

}  // namespace stoker::internal
