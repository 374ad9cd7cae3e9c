// Producers: what turns a dataset's records into batches in the ring's slots.
//
// A Producer runs one epoch's run at a time on its own threads (a "stoker-io" reader and
// "stoker-dec/N" workers). For each batch k of the rank's schedule, in batch order, it
// claims a free slot (Run::claim_locked), writes every sample's tensors at their
// Output offsets (output.h), and hands the batch over with Run::finish_one / finish_all. A
// sample that cannot be read, checked or decoded goes to Context::sample_failed, which
// fails the batch (OnError::kError) or marks the sample bad for skip compaction
// (OnError::kSkip). A failure of the producer itself goes to Run::fail. Once Run::stop is
// set and wake() called, every thread returns promptly; join() waits for them, and
// clear() drops what the run left (after join, no thread running).
//
// Two producers: RecordProducer (datasets of records, a record at a time, as a RecordWork
// says: images decoded per sample, or packed samples' pieces of rows) and TokenProducer
// (token rows, a shuffle window of compressed records at a time).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "pipeline/output.h"
#include "pipeline/slot_ring.h"
#include "remote/cached_shards.h"
#include "stoker/cpu.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/io.h"
#include "stoker/loader.h"

namespace stoker::internal {

struct BucketPlan;  // bucket_plan.h

/// What every producer reads, fixed when the Loader opens (run state is in Run).
struct Context {
  const LoaderOptions* opt = nullptr;
  /// A remote dataset's shards (null when local). Declared before `dataset` so that the
  /// readers' descriptors close before the pins go.
  std::shared_ptr<CachedShards> cached;
  std::shared_ptr<Dataset> dataset;
  OrderOptions order_opt;  ///< effective (token data: kTokenWindow when shuffled)
  std::shared_ptr<const UnitLayout> layout;
  RankInfo rank;
  CpuPlan cpu;
  unsigned threads = 1;   ///< decode threads in the pool (threads="auto": the CPU budget)
  unsigned slots_max = 0;  ///< threads="auto": ring slots the tuner may reach (sizes the read slab)
  std::vector<Output> tensors;  ///< the dense outputs, each at its offset in a slot
  /// The variable-size outputs (text, bytes, an image as stored, a variable-length
  /// array): gathered per sample by the producer into Job::var, laid out as values +
  /// offsets when the batch goes out.
  std::vector<Output> vars;
  /// LoaderOptions::buckets: every record's bucket and the bucket sizes (bucket_plan.h);
  /// null without buckets.
  std::shared_ptr<const BucketPlan> buckets;

  /// Appends a dense output of `shape` per sample (laid out in the slot later); returns
  /// its index in `tensors`.
  int add_tensor(std::string name, ElemType t, std::vector<int64_t> shape) {
    tensors.push_back(Output::dense(std::move(name), t, std::move(shape)));
    return static_cast<int>(tensors.size() - 1);
  }
  /// Appends a variable-size output; returns its index in `vars`.
  int add_var(Output v) {
    vars.push_back(std::move(v));
    return static_cast<int>(vars.size() - 1);
  }
  uint8_t* tensor_ptr(const Job& job, int t) const { return job.mem + tensors[static_cast<size_t>(t)].offset; }
  /// A remote dataset read record by record (ranged GETs, CachedShards::record_reads).
  bool record_reads() const { return cached && cached->record_reads(); }
  std::string record_name(size_t shard, uint64_t rec) const { return record_name_prefix(shard) + std::to_string(rec); }
  /// record_name(shard, rec) up to the record's number.
  std::string record_name_prefix(size_t shard) const {
    return (record_reads() ? cached->shard_url(shard) : dataset->shard_path(shard)) + ": record ";
  }
  /// Where record `rec` of `shard` lies: from the shard's reader (opened on first use),
  /// or for records fetched by ranged GET from the shard's remote index. Valid while the
  /// shard is in use (a local dataset's readers stay open).
  const RecordLocation& location(size_t shard, uint64_t rec) const {
    if (record_reads()) return cached->location(shard, rec);
    return dataset->shard(shard)->location(rec);
  }
  /// A sample could not be read, checked or decoded: fail its batch (kError) or drop it
  /// (kSkip: counted in run.c.skipped, each distinct reason logged once). Past the run's
  /// skip budget (Run::skip_budget) the run fails with kDataLoss naming the count and
  /// the first reasons. `shard_failure`: the record's shard itself cannot be opened (or
  /// does not match the manifest): logged and listed once per shard, not per record.
  struct ShardFailure {
    size_t shard;
    std::string reason;
  };
  void sample_failed(Run& run, Job& job, uint32_t j, std::exception_ptr e,
                     const ShardFailure* shard_failure = nullptr) const;
  mutable std::mutex skip_log_mu;
  mutable std::set<std::string> skip_logged;
  mutable std::vector<std::string> skip_first;  ///< this run's first distinct reasons (skip_log_mu)
};

/// `e` naming the record it is about: `record` in front, unless the message names it.
Error naming(const Error& e, const std::string& record);

class Producer {
 public:
  virtual ~Producer() = default;
  /// Starts the run's threads (run.order, run.sched set; run state cleared).
  virtual void start(Run& run) = 0;
  /// run.stop is set: wakes every thread that may be waiting on the producer's own
  /// condition variables (the ring's are woken by the Loader).
  virtual void wake() = 0;
  virtual void join() = 0;
  /// After join(): drops what the run left.
  virtual void clear() = 0;
  /// The IO engine's figures, published by the reader thread (any thread may call).
  virtual IoStats io_stats() const = 0;
  /// Decode threads that take work (threads="auto"): the pool has Context::threads, and
  /// those numbered from `n` on sleep until it is raised again. Call with the ring's
  /// mutex held, then wake().
  void set_active_locked(unsigned n) noexcept { active_ = std::max(1u, n); }
  unsigned active() const noexcept { return active_; }
  /// Reads in flight at most (the IO queue depth knob of threads="auto"): the reader
  /// thread applies it at its next turn (IoEngine::set_queue_limit). 0: as the engine opened.
  void set_io_limit(unsigned n) noexcept { io_limit_ = n; }
  unsigned io_limit() const noexcept { return io_limit_; }

 protected:
  std::atomic<unsigned> active_{UINT32_MAX};
  std::atomic<unsigned> io_limit_{0};
};

/// Token data's facts, from the schema and the shard indexes.
struct TokenFacts {
  int field = -1;               ///< the tokens field
  uint32_t seq_len = 0;
  size_t row_bytes = 0;         ///< (seq_len + 1) stored tokens
  size_t capacity = 0;          ///< the largest record's raw size
  uint64_t largest_stored = 0;  ///< the largest record as stored (sizes the read slab)
  int tokens_t = -1, targets_t = -1, index_t = -1;  ///< tensors (targets_t -1: not asked for)
  int docs_field = -1;  ///< `doc_starts`, when an output below needs it
  int position_t = -1, mask_t = -1, doc_ids_t = -1;  ///< tensors, -1: not asked for
  int seqlens_var = -1;  ///< Context::vars: per-row piece lengths for cu_seqlens
};

/// The schema's first tokens field (token data), or -1 (a dataset of records).
int tokens_field(const Schema& schema);

/// fn(shard, its first record's global index) for shards [0, shards) in order, each with
/// the shard at hand: a remote dataset's shard pinned in the cache meanwhile, one at a
/// time, and its reader closed before the pin goes.
void for_each_shard_at_hand(const Context& ctx, size_t shards, const std::function<void(size_t, uint64_t)>& fn);

/// fn(shard, record, its location) for every record of the dataset, in order. A remote
/// dataset's shards are pinned in the cache one at a time meanwhile.
void for_each_record_location(const Context& ctx,
                              const std::function<void(size_t, uint64_t, const RecordLocation&)>& fn);

/// Token data: the rows of every record (the order's groups, one per record), read from
/// the shard indexes; fills tok's row and record sizes (tok.field set). A remote
/// dataset's shards are pinned in the cache one at a time meanwhile.
std::vector<uint64_t> plan_token_rows(const Context& ctx, TokenFacts& tok);

/// Token data's outputs under `opt` (tokens, targets, index, the document outputs); adds
/// them to `ctx`. kInvalidArgument for a token_type that is not an integer type, or
/// document outputs asked of a dataset packed without boundaries.
void plan_token_outputs(const LoaderOptions& opt, const Schema& schema, TokenFacts& tok, Context& ctx);

/// How one record field reaches the batch (image datasets).
struct FieldOut {
  enum class How { kImage, kFollow, kCopy, kVar };
  How how = How::kCopy;
  int field = -1;   ///< in the schema
  int tensor = -1;  ///< in Context::tensors (kImage, kFollow, kCopy)
  int var = -1;     ///< in Context::vars (kVar)
  ImageTransform transform;  ///< kImage
  uint64_t seed_salt = 0;    ///< kImage: 0 for the first image field (its draws as ever)
  int leader = -1;           ///< kFollow: the FieldOut (kImage) it follows
  FollowOutput follow;       ///< kFollow
  bool bucketed = false;     ///< kImage, kFollow: written at the batch's bucket size (bucket_plan.h)
  size_t bytes = 0;          ///< kCopy: the payload's exact size
  bool media = false;        ///< kVar: a video or audio field, delivered without its media index
};

/// Images: every field's way into the batch, leaders before the fields that follow them.
struct ImageFacts {
  std::vector<FieldOut> outs;
  int missing_label_t = -1;  ///< version-1 datasets without an int64 field: "label" is -1
  int index_t = -1;
  int key_field = -1;        ///< `__key__`, to name a record's source in errors
  int bucket_t = -1;         ///< LoaderOptions::buckets: the "bucket" int64 [B] output (bucket_plan.h)
};

/// The tensor element type of a stored dtype; nullopt for kNone.
std::optional<ElemType> elem_type_of(DType d) noexcept;

/// The outputs of an image dataset's fields under `opt` (LoaderOptions::fields, else the
/// defaults); adds their tensors and variable-size outputs to `ctx`. kInvalidArgument
/// names the field and the parameter of a spec that cannot be used.
ImageFacts plan_image_fields(const LoaderOptions& opt, const Schema& schema, Context& ctx);

/// A record's payloads in schema order, from its bytes as stored: zstd records unpacked
/// into `scratch`, raw ones CRC-checked and sliced out of `stored` itself (no copy).
/// kDataLoss naming `where` when the check fails.
std::vector<std::span<const uint8_t>> record_fields(const Schema& schema, const RecordLocation& loc,
                                                    std::span<const uint8_t> stored, std::vector<uint8_t>& scratch,
                                                    const std::string& where);

/// Writes sample `j` of `job` from a record's `fields` as `f` plans: images decoded and
/// transformed (draws from ctx.order_opt.seed, `epoch`, `sample`), followers given their
/// leader's geometry, scalars and arrays copied, variable-size fields gathered into
/// job.var, then "index". `pixels` and `results` are the caller's scratch, reused. An
/// error is rethrown naming `where` and the record's source (its `__key__`), so the
/// user can find the file.
void put_image_fields(const Context& ctx, const ImageFacts& f, uint64_t epoch, Job& job, uint32_t j,
                      const std::vector<std::span<const uint8_t>>& fields, uint64_t sample, ImageDecoder& dec,
                      std::vector<uint8_t>& pixels, std::vector<DecodeResult>& results, const std::string& where);

/// What a record producer does with a batch of a dataset of records: which records the
/// batch needs, and how each goes into it. Images: a record per sample, decoded; packed
/// samples (sample_packing.h): the pieces of each row.
class RecordWork {
 public:
  struct Use {
    uint32_t j = 0;       ///< the batch's sample (row) the record goes into (the first, when several)
    uint64_t record = 0;  ///< global record index
    /// The work's own reference (packed samples: `count` entries of Job::refs from here,
    /// every piece of the record the batch holds, so the record is read and unpacked, or
    /// tokenised, once for all of them).
    uint64_t piece = 0;
    uint32_t count = 1;
  };
  /// A worker thread's own: its scratch (a decoder), and the writing of one use.
  class Worker {
   public:
    virtual ~Worker() = default;
    /// Writes `use` into `job` from its record's payloads (schema order). Throws naming
    /// `where` (the record) and the record's source.
    virtual void put(const Run& run, Job& job, const Use& use, const std::vector<std::span<const uint8_t>>& fields,
                     const std::string& where) = 0;
    /// Whether put() of `use` would wait now for another thread's work on its record (a
    /// long document another decoder is tokenising): the decoder then takes other tasks
    /// first. A hint, read without the record: put() is right either way.
    virtual bool would_wait(const Job& /*job*/, const Use& /*use*/) const { return false; }
  };
  virtual ~RecordWork() = default;
  /// ring->mu held: sets job.samples (the order's samples of batch job.k) and appends the
  /// records the batch needs, one hand-over each (at least one per sample).
  virtual void plan_locked(const Run& run, Job& job, std::vector<Use>& uses) const = 0;
  /// Before any use of the batch is read (no lock): writes what needs no record.
  virtual void prepare(Job& /*job*/) const {}
  virtual std::unique_ptr<Worker> worker() const = 0;
  /// About how many records a batch reads (sizes the IO slab).
  virtual uint64_t records_per_batch() const = 0;

 protected:
  /// plan_locked of a work that reads one record per sample (images, clips): the
  /// order's samples of batch job.k, each its own use.
  static void plan_record_per_sample(const Run& run, Job& job, std::vector<Use>& uses);
};

std::unique_ptr<Producer> make_record_producer(const Context& ctx, std::unique_ptr<RecordWork> work);
std::unique_ptr<RecordWork> make_image_work(const Context& ctx, const ImageFacts& facts);
std::unique_ptr<Producer> make_token_producer(const Context& ctx, const TokenFacts& facts);
/// The ring slots a token producer wants: every worker holding a window's batches, plus
/// a window's more (so each worker can fill its window's batches directly).
size_t token_direct_slots(const Context& ctx, uint64_t batch_size);

}  // namespace stoker::internal
