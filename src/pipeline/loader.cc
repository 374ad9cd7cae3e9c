// The Loader: options and dataset in, one producer (producer.h) filling a ring of batch
// slots (slot_ring.h), and the consumer side: next() hands batches out in order,
// compacting those that lost samples under OnError::kSkip (skip_compaction.h), and
// reports as it goes (diagnose/loader_report.h).
#include "stoker/loader.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "diagnose/loader_report.h"
#include "pipeline/mixture_feed.h"
#include "pipeline/producer.h"
#include "pipeline/skip_compaction.h"
#include "pipeline/slot_ring.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "util/enum_names.h"
#include "util/platform.h"

namespace stoker {

namespace {
constexpr internal::EnumName<OnError> kOnErrorNames[] = {{OnError::kError, "error"}, {OnError::kSkip, "skip"}};
constexpr internal::EnumName<RemoteReads> kRemoteReadsNames[] = {
    {RemoteReads::kAuto, "auto"}, {RemoteReads::kShards, "shards"}, {RemoteReads::kRecords, "records"}};
}  // namespace

const char* remote_reads_name(RemoteReads r) noexcept { return internal::enum_name(kRemoteReadsNames, r, "auto"); }
RemoteReads remote_reads_from_name(const std::string& s) {
  return internal::enum_from_name(kRemoteReadsNames, s, "remote_reads");
}

const char* on_error_name(OnError e) noexcept { return internal::enum_name(kOnErrorNames, e, "error"); }
OnError on_error_from_name(const std::string& s) { return internal::enum_from_name(kOnErrorNames, s, "on_error"); }

namespace {

using internal::Clock;
using internal::SlotRing;



}  // namespace

namespace {
// Marks a consumer call for its duration; a second one meanwhile (another thread) is
// refused instead of interleaving with it.
class ConsumerCall {
 public:
  ConsumerCall(std::atomic<bool>& busy, const char* what) : busy_(busy) {
    if (busy_.exchange(true))
      throw_error(ErrorCode::kInvalidArgument,
                  std::string(what) + " while another thread is inside this Loader's next(), try_next(), set_epoch() "
                                      "or load_state(): a Loader has one consumer thread (use one Loader per thread)");
  }
  ~ConsumerCall() { busy_ = false; }
  ConsumerCall(const ConsumerCall&) = delete;
  ConsumerCall& operator=(const ConsumerCall&) = delete;

 private:
  std::atomic<bool>& busy_;
};
}  // namespace

// Hidden: its members take stoker::internal types, which libstoker.so does not export.
struct __attribute__((visibility("hidden"))) Loader::Impl {
  LoaderOptions opt;
  internal::Context ctx;
  bool tokens = false;
  bool fast_crop = false;  // manifest meta "fast_crop" (LoaderStats::fast_crop)
  // Token data trims the final step to a multiple of the world size instead of padding it
  // (order.h TailPolicy): padding would need the first window decompressed again.
  TailPolicy tail_policy() const noexcept { return tokens ? TailPolicy::kTrim : TailPolicy::kPad; }
  // LoaderOptions::max_skipped as a count of this run's samples.
  uint64_t skip_budget(const RankSchedule& s) const {
    const uint64_t nb = s.num_batches();
    const uint64_t samples = nb ? (nb - 1) * s.batch_size() + s.batch_length(nb - 1) : 0;
    const double m = opt.max_skipped.value_or(std::max(100.0, 0.01 * static_cast<double>(samples)));
    if (m >= 1e19) return UINT64_MAX - 1;  // infinity: no limit (and no overflow below)
    return m < 1 ? static_cast<uint64_t>(m * static_cast<double>(samples)) : static_cast<uint64_t>(m);
  }
  std::shared_ptr<SlotRing> ring;
  std::unique_ptr<internal::Run> run;
  std::unique_ptr<internal::Producer> producer;
  std::unique_ptr<internal::LoaderReporter> reporter;
  std::unique_ptr<internal::MixtureFeed> mix;  // LoaderOptions::sources: the mixture does it all

  // ---- the one-consumer contract (loader.h "Threading") ----
  std::atomic<bool> in_call{false};  // a consumer call (next, try_next, set_epoch, load_state) runs
  std::atomic<bool> closed{false};   // close() was called
  // load_state() restored a position and no batch was asked for since: set_epoch() of the
  // restored epoch keeps it (the README loop calls set_epoch at every epoch's top).
  bool resume_pending = false;
  void check_open() const {
    if (closed) throw_error(ErrorCode::kCancelled, "the Loader was closed (close()); it delivers no more batches");
  }

  // ---- the consumer's side of the current run ----
  uint64_t epoch = 0;
  uint64_t start_consumed = 0;
  std::atomic<bool> running{false};  // atomic, like the figures below: stats() may run on any thread
  uint64_t next_deliver = 0;
  // OnError::kSkip on one rank: the stream position the delivered batches reached (a
  // batch filled up from later batches reaches into them); state() resumes there.
  std::optional<uint64_t> stream_consumed;
  std::exception_ptr delivered_error;  // sticky after a throw
  std::atomic<Clock::time_point> run_start{};
  std::atomic<double> first_batch_s{0};
  std::atomic<uint64_t> batches_out{0}, samples_out{0}, record_bytes_out{0};
  // A remote dataset's cache figures when the current run started (zero for the first
  // run, which so includes opening the dataset). Written by the consumer thread between
  // runs, read by stats() on any thread.
  mutable std::mutex net_mu;
  CacheStats net_base;
  bool first_run = true;
  std::atomic<double> first_batch_fetch_wait{0};  // CacheStats::wait_s at the run's first batch

  void setup();
  void start_run();
  void stop_run();
  std::optional<Batch> next_batch(bool block, bool* would_wait);
  Batch make_batch(const std::shared_ptr<internal::Job>& job, uint64_t n, std::shared_ptr<internal::RingLease> lease);
  LoaderStats snapshot() const;
};

void Loader::Impl::setup() {
  if (opt.batch_size == 0) throw_error(ErrorCode::kInvalidArgument, "batch_size must be >= 1");
  if (opt.max_skipped && !(*opt.max_skipped >= 0))
    throw_error(ErrorCode::kInvalidArgument, "max_skipped = " + std::to_string(*opt.max_skipped) +
                                                 " is not a fraction in [0, 1), a count >= 1 or infinity");
  // Normalisation is (x / 255 - mean) / std: a std of 0 divides by zero, and values
  // above 1 are almost surely given on the pixel scale (0..255) by mistake.
  for (int c = 0; c < 3; ++c) {
    if (!(opt.std[c] > 0) || opt.std[c] > 1)
      throw_error(ErrorCode::kInvalidArgument,
                  "std[" + std::to_string(c) + "] = " + std::to_string(opt.std[c]) +
                      " is not in (0, 1]: pixels are normalised as (x / 255 - mean) / std, so give std on the "
                      "0..1 scale (e.g. 0.229, not 58.4)");
    if (!(opt.mean[c] >= 0) || opt.mean[c] > 1)
      throw_error(ErrorCode::kInvalidArgument,
                  "mean[" + std::to_string(c) + "] = " + std::to_string(opt.mean[c]) +
                      " is not in [0, 1]: pixels are normalised as (x / 255 - mean) / std, so give mean on the "
                      "0..1 scale (e.g. 0.485, not 123.7)");
  }
  ctx.opt = &opt;
  ShardReaderOptions ro;
  ro.max_record_bytes = opt.max_record_bytes;
  ctx.cached = internal::CachedShards::open(opt);
  ctx.dataset = Dataset::open(ctx.cached ? ctx.cached->local_dir() : opt.path, ro);
  const Dataset& dataset = *ctx.dataset;
  const Schema& schema = dataset.schema();
  if (auto it = dataset.manifest().meta.find("fast_crop"); it != dataset.manifest().meta.end() && it->second == "1")
    fast_crop = true;
  internal::TokenFacts tok;
  for (size_t i = 0; i < schema.fields.size(); ++i)
    if (schema.fields[i].kind == FieldKind::kTokens && tok.field < 0) tok.field = static_cast<int>(i);
  tokens = tok.field >= 0;
  if (ctx.cached) ctx.cached->choose_reads(opt, tokens);
  if (!tokens && opt.targets)
    throw_error(ErrorCode::kInvalidArgument, "targets: next-token targets need token data, and " + opt.path +
                                                 " holds records (schema " + schema.to_string() + ")");
  if (tokens && !opt.fields.empty())
    throw_error(ErrorCode::kInvalidArgument, "fields: per-field transforms apply to datasets of records, not to token data");

  // Rank and world size: explicit, else torchrun's environment.
  if (opt.rank >= 0 || opt.world_size >= 0) {
    if (opt.rank < 0 || opt.world_size < 1 || opt.rank >= opt.world_size)
      throw_error(ErrorCode::kInvalidArgument,
                  "rank " + std::to_string(opt.rank) + " / world_size " + std::to_string(opt.world_size) +
                      " is not a valid pair: give both (or neither, for RANK / WORLD_SIZE), world_size >= 1 "
                      "and 0 <= rank < world_size");
    ctx.rank = RankInfo{static_cast<uint32_t>(opt.rank), static_cast<uint32_t>(opt.world_size)};
  } else {
    ctx.rank = rank_from_env();
  }

  ctx.order_opt = opt.order;
  std::vector<uint64_t> groups;
  if (tokens) {
    const Field& f = schema.fields[static_cast<size_t>(tok.field)];
    tok.seq_len = f.seq_len;
    tok.row_bytes = (static_cast<size_t>(tok.seq_len) + 1) * dtype_size(f.dtype);
    // Units are rows; groups are records (one per compressed chunk).
    for (size_t s = 0; s < dataset.shard_count(); ++s) {
      // A remote dataset: every shard's record index is needed now, one shard at a time
      // in the cache (its reader closed before the pin goes: see cached_shards.h).
      ShardCache::Pin pin;
      if (ctx.cached) pin = ctx.cached->pin(s);
      struct Close {
        const Dataset& d;
        size_t s;
        bool remote;
        ~Close() {
          if (remote) d.close_shard(s);
        }
      } close{dataset, s, ctx.cached != nullptr};
      auto r = dataset.shard(s);
      for (uint64_t i = 0; i < r->record_count(); ++i) {
        const RecordLocation& loc = r->location(i);
        groups.push_back(loc.field_sizes[static_cast<size_t>(tok.field)] / tok.row_bytes);
        tok.capacity = std::max<size_t>(tok.capacity, loc.raw_size);
        tok.largest_stored = std::max<uint64_t>(tok.largest_stored, loc.stored_size);
      }
    }
    if (ctx.order_opt.kind == OrderKind::kShuffled || ctx.order_opt.kind == OrderKind::kChunkLocal)
      ctx.order_opt.kind = OrderKind::kTokenWindow;
  } else {
    for (const ShardEntry& s : dataset.manifest().shards) groups.push_back(s.records);
  }
  ctx.layout = std::make_shared<UnitLayout>(groups);
  // Every shard may end up with two descriptors (the reader's and the IO engine's
  // O_DIRECT one): thousands of shards outgrow the usual soft limit of 1024.
  internal::ensure_open_file_limit(2 * dataset.shard_count() + 256, std::to_string(dataset.shard_count()) + " shards");
  reporter = std::make_unique<internal::LoaderReporter>(opt);

  ctx.cpu = plan_cpus(opt.gpu_pci_bus_id);
  if (!opt.cpus.empty()) {
    ctx.cpu.cpus = opt.cpus;
    ctx.cpu.explanation = "threads pinned to the configured CPUs " + format_cpu_list(opt.cpus);
  }
  ctx.threads = opt.threads ? opt.threads : ctx.cpu.threads;

  // Slot layout: one allocation per slot, a tensor after another.
  const size_t B = opt.batch_size;
  internal::ImageFacts img;
  if (!tokens) {
    img = internal::plan_image_fields(opt, schema, ctx);
  } else {
    const Field& f = schema.fields[static_cast<size_t>(tok.field)];
    ElemType tt = opt.token_type_is_stored ? internal::elem_type_of(f.dtype).value_or(ElemType::kUint8) : opt.token_type;
    if (tt != ElemType::kUint16 && tt != ElemType::kUint32 && tt != ElemType::kInt32 && tt != ElemType::kInt64)
      throw_error(ErrorCode::kInvalidArgument, "token_type must be uint16, uint32, int32 or int64");
    tok.tokens_t = ctx.add_tensor("tokens", tt, {static_cast<int64_t>(tok.seq_len)});
    if (opt.targets) tok.targets_t = ctx.add_tensor("targets", tt, {static_cast<int64_t>(tok.seq_len)});
    tok.index_t = ctx.add_tensor("index", ElemType::kInt64, {});
    if (opt.position_ids || opt.loss_mask || opt.doc_ids || opt.cu_seqlens) {
      const int d = schema.find("doc_starts");
      if (d < 0 || schema.fields[static_cast<size_t>(d)].kind != FieldKind::kVarArray ||
          schema.fields[static_cast<size_t>(d)].dtype != DType::kInt32)
        throw_error(ErrorCode::kInvalidArgument,
                    opt.path + ": position_ids, loss_mask, doc_ids and cu_seqlens need document boundaries, which "
                               "this dataset was packed without; pack it with `stoker pack tokens FILE OUT --eos ID` "
                               "(or from a Megatron .bin/.idx pair)");
      tok.docs_field = d;
      const int64_t N = tok.seq_len;
      if (opt.position_ids) tok.position_t = ctx.add_tensor("position_ids", ElemType::kInt32, {N});
      // uint8, not bool: the torch of Debian 12 takes no bool tensors over DLPack.
      if (opt.loss_mask) tok.mask_t = ctx.add_tensor("loss_mask", ElemType::kUint8, {N});
      if (opt.doc_ids) tok.doc_ids_t = ctx.add_tensor("doc_ids", ElemType::kInt32, {N});
      if (opt.cu_seqlens) {
        internal::VarOut v{"cu_seqlens", TensorKind::kRagged, ElemType::kInt32, {}, 4};
        v.cumulative = true;
        ctx.vars.push_back(std::move(v));
        tok.seqlens_var = static_cast<int>(ctx.vars.size() - 1);
      }
    }
  }
  size_t off = 0;
  for (auto& t : ctx.tensors) {
    t.offset = off;
    off += (t.sample_bytes * B + 255) / 256 * 256;
  }
  ring = std::make_shared<SlotRing>();
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
    // into their batches, as far as the memory allows.
    if (tokens)
      opt.slots = static_cast<unsigned>(
          std::clamp<size_t>(internal::token_direct_slots(ctx, B), opt.slots, std::max<size_t>(fit, 4)));
  }
  ring->add_slots_locked(opt.slots);
  run = std::make_unique<internal::Run>(ring);
  run->var_outputs = ctx.vars.size();
  run->warn = opt.warning_sink;
  for (auto& slot : ring->slots) slot->var_offsets.assign(ctx.vars.size() * (B + 1), 0);
  producer = tokens ? internal::make_token_producer(ctx, tok) : internal::make_image_producer(ctx, img);
}

void Loader::Impl::start_run() {
  internal::Run& r = *run;
  r.epoch = epoch;
  r.order = std::make_unique<EpochOrder>(ctx.order_opt, ctx.layout, epoch);
  r.sched = std::make_unique<RankSchedule>(r.order->size(), opt.batch_size, ctx.rank.world_size, ctx.rank.rank,
                                           opt.drop_last, start_consumed, tail_policy());
  if (ctx.cached) {
    std::lock_guard<std::mutex> lock(net_mu);
    if (!first_run) net_base = ctx.cached->stats();
    first_run = false;
  }
  if (ctx.cached) ctx.cached->prefetch_run(*r.order, *r.sched, *ctx.dataset, tokens);
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
  run_start = Clock::now();
  reporter->start_run();
  running = true;
  producer->start(r);
}

void Loader::Impl::stop_run() {
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

Loader::Loader(LoaderOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  if (!impl_->opt.sources.empty()) {
    impl_->mix = std::make_unique<internal::MixtureFeed>(impl_->opt);
    return;
  }
  impl_->setup();
}

Loader::~Loader() {
  if (!impl_->mix) impl_->stop_run();
}

std::optional<Batch> Loader::next() {
  ConsumerCall call(impl_->in_call, "next()");
  impl_->check_open();
  impl_->resume_pending = false;
  if (impl_->mix) return impl_->mix->next();
  return impl_->next_batch(true, nullptr);
}

std::optional<Batch> Loader::try_next(bool* would_wait) {
  ConsumerCall call(impl_->in_call, "try_next()");
  *would_wait = false;
  impl_->check_open();
  impl_->resume_pending = false;
  if (impl_->mix) {  // its next() waits on its sources and copies: always the caller's other thread
    *would_wait = true;
    return std::nullopt;
  }
  return impl_->next_batch(false, would_wait);
}

std::optional<Batch> Loader::Impl::next_batch(bool block, bool* would_wait) {
  if (!running) start_run();
  if (delivered_error) std::rethrow_exception(delivered_error);
  internal::Run& r = *run;
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
      reporter->epoch_end(snap, epoch);
      return std::nullopt;
    }
    reporter->tick(snap, epoch);
    std::shared_ptr<internal::Job> job;
    uint64_t n = 0;
    std::shared_ptr<internal::RingLease> lease;
    {
      std::unique_lock<std::mutex> lock(ring->mu);
      auto w0 = Clock::now();
      if (!block) {
        auto it = r.jobs.find(k);
        // Not ready, or it must borrow samples from batches that may not be: the caller
        // waits elsewhere (a failed run also goes that way, to be rethrown there).
        if (it == r.jobs.end() || !it->second->ready || r.fatal ||
            internal::needs_compaction(opt, *it->second, it->second->samples.size())) {
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
      lease = std::make_shared<internal::RingLease>(ring, job->slot);
      {
        std::lock_guard<std::mutex> jl(job->mu);
        if (job->error) {
          delivered_error = job->error;
          std::rethrow_exception(job->error);
        }
      }
      n = job->samples.size();
      std::optional<internal::Compacted> compacted;
      if (internal::needs_compaction(opt, *job, n)) {
        try {
          compacted = internal::compact_batch(ctx, r, job, lock);
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
      r.c.consumer_wait_ns += internal::nanos(Clock::now() - w0);
      r.c.ready_sum += ring->count_locked(SlotRing::State::kReady);
      r.c.free_sum += ring->count_locked(SlotRing::State::kFree);
      r.c.samples_n++;
    }
    next_deliver++;
    record_bytes_out += job->record_bytes.load(std::memory_order_relaxed);
    if (n == 0) continue;  // every sample of this batch was dropped or moved earlier
    if (opt.drop_last && n < opt.batch_size) {  // shortened by drops at the tail: every later batch is used up
      next_deliver = r.sched->num_batches();
      return std::nullopt;
    }
    return make_batch(job, n, std::move(lease));
  }
}

Batch Loader::Impl::make_batch(const std::shared_ptr<internal::Job>& job, uint64_t n,
                               std::shared_ptr<internal::RingLease> lease) {
  std::vector<TensorView> views;
  for (size_t t = 0; t < ctx.tensors.size(); ++t) {
    TensorView v;
    v.name = ctx.tensors[t].name;
    v.data = ctx.tensor_ptr(*job, static_cast<int>(t));
    v.dtype = ctx.tensors[t].dtype;
    v.shape.push_back(static_cast<int64_t>(n));
    for (int64_t d : ctx.tensors[t].sample_shape) v.shape.push_back(d);
    views.push_back(std::move(v));
  }
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
      const internal::VarOut& vo = ctx.vars[v];
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
        offs[j + 1] = static_cast<int64_t>((at - begin) / vo.row_bytes);
      }
      TensorView tv;
      tv.name = vo.name;
      tv.data = slot.var_mem.data() + begin;
      tv.dtype = vo.dtype;
      tv.kind = vo.kind;
      tv.offsets = offs;
      tv.shape.push_back(offs[n]);
      for (int64_t d : vo.inner) tv.shape.push_back(d);
      views.push_back(std::move(tv));
      at = (at + 7) / 8 * 8;  // the next output's values start aligned for any element type
    }
  }
  if (batches_out == 0) {
    first_batch_s = internal::seconds(Clock::now() - run_start.load());
    if (ctx.cached) first_batch_fetch_wait = ctx.cached->stats().wait_s;
  }
  batches_out++;
  samples_out += n;
  return Batch(std::move(views), std::move(lease), epoch, job->k, n);
}

void Loader::set_epoch(uint64_t e) {
  ConsumerCall call(impl_->in_call, "set_epoch()");
  impl_->check_open();
  if (impl_->resume_pending) {
    const OrderState s = state();
    if (e == s.epoch) return;  // the restored position stands
    if (num_batches() != 0)
      throw_error(ErrorCode::kInvalidArgument,
                  "set_epoch(" + std::to_string(e) + ") after load_state() restored epoch " + std::to_string(s.epoch) +
                      " at sample " + std::to_string(s.consumed) + " of " + std::to_string(s.total) +
                      ": starting another epoch would drop the rest of the restored one. Resume the loop at epoch " +
                      std::to_string(s.epoch) + " (set_epoch(" + std::to_string(s.epoch) +
                      ") keeps the restored position), or make a new Loader to start afresh");
    impl_->resume_pending = false;  // the restored epoch was over: the next one starts
  }
  if (impl_->mix) return impl_->mix->set_epoch(e);
  impl_->stop_run();
  impl_->epoch = e;
  impl_->start_consumed = 0;
}

uint64_t Loader::epoch() const noexcept { return impl_->mix ? impl_->mix->epoch() : impl_->epoch; }

uint64_t Loader::num_batches() const {
  const Impl& m = *impl_;
  if (m.mix) return m.mix->num_batches();
  if (m.running) return m.run->sched->num_batches();
  RankSchedule s(m.ctx.layout->units(), m.opt.batch_size, m.ctx.rank.world_size, m.ctx.rank.rank, m.opt.drop_last,
                 m.start_consumed, m.tail_policy());
  return s.num_batches();
}

uint64_t Loader::epoch_samples() const noexcept {
  return impl_->mix ? impl_->mix->epoch_samples() : impl_->ctx.layout->units();
}

OrderState Loader::state() const {
  const Impl& m = *impl_;
  if (m.mix) return m.mix->state();
  OrderState s = OrderState::start(m.ctx.order_opt, m.ctx.layout->units(), m.epoch);
  if (m.running) {
    s.consumed = m.run->sched->consumed_after(m.next_deliver);
    // Skipped samples filled in from later batches: on one rank the stream is the global
    // order, and the resume point is the last sample taken. (On several ranks each fills
    // from its own later batches, so no global point covers them all; a resume there may
    // repeat the samples taken ahead, at most those skipped since.)
    if (m.stream_consumed && m.ctx.rank.world_size == 1 && m.next_deliver < m.run->sched->num_batches())
      s.consumed = std::max(s.consumed, *m.stream_consumed);
  } else {
    s.consumed = m.start_consumed;
  }
  return s;
}

void Loader::load_state(const OrderState& s) {
  ConsumerCall call(impl_->in_call, "load_state()");
  impl_->check_open();
  if (impl_->mix) {
    impl_->mix->load_state(s);
  } else {
    s.check_matches(impl_->ctx.order_opt, impl_->ctx.layout->units());
    impl_->stop_run();
    impl_->epoch = s.epoch;
    impl_->start_consumed = s.consumed;
  }
  impl_->resume_pending = true;
}

void Loader::close() {
  Impl& m = *impl_;
  if (m.closed.exchange(true)) return;
  if (m.mix) return m.mix->close();
  {
    // Under the ring's lock, as stop_run: a thread between checking and waiting cannot
    // miss it. The consumer's wait (Run::wait_ready) sees `closed` and throws; the
    // threads stop here and are joined by the consumer's thread (destructor, stop_run).
    std::lock_guard<std::mutex> lock(m.ring->mu);
    m.run->closed = true;
    m.run->stop = true;
  }
  m.ring->cv.notify_all();
  m.ring->producer_cv.notify_all();
  m.producer->wake();
}

LoaderStats Loader::stats() const {
  if (impl_->mix) return impl_->mix->stats();
  LoaderStats s = impl_->snapshot();
  record_verdict(s, diagnose(FeedFigures::from(s)));
  return s;
}

LoaderStats Loader::Impl::snapshot() const {
  const internal::Counters& c = run->c;
  LoaderStats s;
  s.wall_s = running ? internal::seconds(Clock::now() - run_start.load()) : 0;
  s.first_batch_s = first_batch_s;
  s.batches = batches_out;
  s.samples = samples_out;
  s.bytes_read = c.io_bytes;
  s.record_bytes = record_bytes_out;
  s.skipped = c.skipped;
  s.tokens = tokens;
  s.fast_crop = fast_crop;
  s.io.threads = 1;
  s.io.busy_s = c.io_busy_ns / 1e9;
  s.io.wait_s = c.io_wait_ns / 1e9;
  s.io.items = c.io_records;
  s.decode.threads = ctx.threads;
  s.decode.busy_s = c.dec_busy_ns / 1e9;
  s.decode.wait_s = c.dec_wait_ns / 1e9;
  s.decode.items = c.dec_samples;
  s.consumer_wait_s = c.consumer_wait_ns / 1e9;
  const double n = static_cast<double>(std::max<uint64_t>(1, c.samples_n));
  s.slots_ready_avg = c.ready_sum / n;
  s.slots_free_avg = c.free_sum / n;
  s.decode_queue_avg = c.dec_samples ? static_cast<double>(c.queue_sum) / std::max<uint64_t>(1, c.dec_samples) : 0;
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    s.slots = static_cast<unsigned>(ring->slots.size());
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
  return s;
}

const LoaderOptions& Loader::options() const noexcept { return impl_->opt; }

std::vector<internal::OutputSpec> internal::LoaderOutputs::of(const Loader& l) {
  if (l.impl_->mix) throw std::logic_error("a mixture's outputs are not planned ahead");
  const internal::Context& ctx = l.impl_->ctx;
  std::vector<internal::OutputSpec> out;
  for (const internal::TensorLayout& t : ctx.tensors) out.push_back({t.name, TensorKind::kDense, t.dtype, t.sample_shape, false});
  for (const internal::VarOut& v : ctx.vars) out.push_back({v.name, v.kind, v.dtype, v.inner, v.cumulative});
  return out;
}
int Loader::rank() const noexcept {
  return impl_->mix ? impl_->mix->rank() : static_cast<int>(impl_->ctx.rank.rank);
}
int Loader::world_size() const noexcept {
  return impl_->mix ? impl_->mix->world_size() : static_cast<int>(impl_->ctx.rank.world_size);
}
const std::vector<std::string>& Loader::class_names() const noexcept {
  static const std::vector<std::string> none;
  return impl_->mix ? none : impl_->ctx.dataset->manifest().class_names;
}

}  // namespace stoker
