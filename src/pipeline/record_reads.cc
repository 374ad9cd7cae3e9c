#include "pipeline/record_reads.h"
#include "io/throttled_engine.h"
#include "util/log.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace stoker::internal {

namespace {

// The largest hole merged reads take in, in mean records.
constexpr uint64_t kHoleRecords = 4;

uint64_t mean_record_bytes(const Dataset& ds) {
  return ds.manifest().total_bytes() / std::max<uint64_t>(1, ds.record_count());
}

// Records smaller than a block are read through the page cache (unaligned reads go to
// the file's buffered descriptor): an O_DIRECT read costs the kernel a block-layer
// request (pinned pages, a device command, an interrupt) to move a block or two, where
// a cached read is one copy, and such records are read a request each.
bool read_buffered(uint64_t mean_bytes) { return mean_bytes < kDirectAlignment; }

}  // namespace

uint64_t RecordReads::slab_bytes_per_record(const Dataset& ds) {
  const uint64_t mean = mean_record_bytes(ds);
  // Buffered: the record, a share of a hole, a cache line's alignment; direct: the
  // record rounded out to blocks at both ends.
  return read_buffered(mean) ? mean * (1 + kHoleRecords) + 64 : mean + 2 * kDirectAlignment;
}

RecordReads::RecordReads(const Context& ctx, uint64_t slab_need)
    : ctx_(ctx),
      slab_need_(slab_need),
      mean_record_bytes_(mean_record_bytes(*ctx.dataset)),
      close_([this](size_t s) { close_shard(s); }) {
  const IoOptions& io = ctx.opt->io;
  // Rehearsed storage and a wrapped engine must see every read; a remote dataset's
  // shards come and go with its cache.
  if (io.map_cached && read_buffered(mean_record_bytes_) && !ctx.cached && !ctx.opt->wrap_io &&
      io.limit_bytes_per_s == 0 && io.read_latency_s == 0)
    maps_ = std::make_unique<MappedShards>(ctx.dataset->shard_count());
}

bool RecordReads::open(Run& run) {
  try {
    if (!engine_) {
      IoOptions io = ctx_.opt->io;
      io.slab_bytes = static_cast<size_t>(std::min<uint64_t>(io.slab_bytes, std::max<uint64_t>(slab_need_, 4u << 20)));
      engine_ = ctx_.record_reads() ? limit_io_rate(ctx_.cached->make_record_engine(io.queue_depth), io)
                                    : make_io_engine(io);
      if (ctx_.opt->wrap_io) engine_ = ctx_.opt->wrap_io(std::move(engine_));
      limit_ = 0;
      file_ids_.assign(ctx_.dataset->shard_count(), -1);
    }
    if (maps_) maps_->new_run();
    return true;
  } catch (...) {
    run.fail(std::current_exception());
    return false;
  }
}

std::optional<RecordRange> RecordReads::range(size_t shard, uint64_t record) {
  // A remote dataset: the shard in the cache, held while the record is in use.
  if (ctx_.cached && !ctx_.cached->use(shard, close_)) return std::nullopt;
  try {
    const RecordLocation& loc = ctx_.location(shard, record);
    if (file_ids_[shard] < 0)
      file_ids_[shard] = engine_->add_file(ctx_.record_reads() ? ctx_.dataset->manifest().shards.at(shard).name
                                                               : ctx_.dataset->shard_path(shard));
    const uint32_t fid = static_cast<uint32_t>(file_ids_[shard]);
    return RecordRange{fid, loc.offset, loc.stored_size, engine_->file_size(fid)};
  } catch (...) {
    done(shard);
    throw;
  }
}

void RecordReads::close_shard(size_t shard) {
  // No read of it is in flight: its uses are over, and a use lasts past its read.
  if (engine_ && file_ids_[shard] >= 0) engine_->remove_file(static_cast<uint32_t>(file_ids_[shard]));
  file_ids_[shard] = -1;
  ctx_.dataset->close_shard(shard);
}

void RecordReads::wait_for_room() const {
  if (ctx_.cached) ctx_.cached->wait_release(std::chrono::milliseconds(2));
}

PlanOptions RecordReads::plan_options() const {
  PlanOptions po;
  const uint64_t mean = mean_record_bytes_;
  po.alignment = engine_->direct() && !read_buffered(mean) ? kDirectAlignment : 1;
  // Holes between merged records are read only up to a few records' worth: small records
  // scattered by a shuffle would otherwise bring in many times their bytes, which the
  // device moves and the decoders' caches take in, to save fewer requests than that costs.
  po.max_gap_bytes = std::min(po.max_gap_bytes, std::max<uint64_t>(po.alignment, kHoleRecords * mean));
  // Records by ranged GET: one request per record, its exact bytes (a hole between two
  // records would cross the network to be thrown away, and a record that fails its
  // check is fetched again on its own).
  if (ctx_.record_reads()) po.max_request_bytes = 0;
  return po;
}

void RecordReads::publish() {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = engine_->stats();
  stats_.mapped_records = mapped_records_;
  stats_.mapped_bytes = mapped_bytes_;
  stats_.mapped_shard_bytes = maps_ ? maps_->mapped_bytes() : 0;
}

IoStats RecordReads::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void RecordReads::close_run() {
  if (!engine_) return;
  publish();
  if (engine_->inflight() == 0) return;
  try {
    engine_->cancel_all();
    std::vector<ReadCompletion> done;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (engine_->inflight() > 0 && Clock::now() < deadline) {
      done.clear();
      engine_->reap(done, 1, std::chrono::milliseconds(5));
    }
  } catch (const std::exception& e) {
    log_warn(std::string("draining the IO engine at shutdown: ") + e.what());
  }
  engine_.reset();
}

std::optional<Error> read_failure(const ReadCompletion& d, uint64_t need) {
  if (d.result < 0)
    return Error(d.result == -ECANCELED ? ErrorCode::kCancelled : ErrorCode::kIoError,
                 d.error.empty() ? std::string(std::strerror(static_cast<int>(-d.result))) : d.error);
  if (static_cast<uint64_t>(d.result) < need)
    return Error(ErrorCode::kDataLoss, "short read: got " + std::to_string(d.result) + " bytes of a range needing " +
                                           std::to_string(need) + " (file truncated or replaced?)");
  return std::nullopt;
}

Error naming(const Error& e, const std::string& record) {
  const std::string what = e.what();
  return what.find(record) == std::string::npos ? Error(e.code(), record + ": " + what) : e;
}

}  // namespace stoker::internal
