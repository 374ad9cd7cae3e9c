#include "pipeline/cached_shards.h"

#include <algorithm>

#include "stoker/error.h"

namespace stoker::internal {

std::shared_ptr<CachedShards> CachedShards::open(const LoaderOptions& opt) {
  if (!is_remote_url(opt.path)) return nullptr;
  if (opt.cache_dir.empty())
    throw_error(ErrorCode::kInvalidArgument,
                redact_url(opt.path) + ": a remote dataset is read through a local cache: set cache_dir");
  auto store = RemoteStore::open(opt.path, opt.remote);
  const Manifest m = store->read_manifest();
  // Every shard stays pinned while the loader holds it open (see the header): the whole
  // dataset must fit.
  const uint64_t need = m.total_bytes() + 1;
  if (opt.cache_limit != 0 && opt.cache_limit < need)
    throw_error(ErrorCode::kInvalidArgument,
                redact_url(opt.path) + ": cache_limit " + std::to_string(opt.cache_limit) +
                    " bytes is below the dataset's " + std::to_string(m.total_bytes()) +
                    ": the loader keeps every shard it has opened in the cache");
  CacheOptions co;
  co.dir = opt.cache_dir;
  co.limit = opt.cache_limit ? opt.cache_limit : need;
  co.prefetch = opt.cache_prefetch;
  auto c = std::make_shared<CachedShards>();
  c->cache_ = ShardCache::open(std::move(store), co);
  c->pins_.resize(c->cache_->manifest().shards.size());
  c->touched_.assign(c->pins_.size(), 0);
  return c;
}

void CachedShards::prefetch_run(const EpochOrder& order, const RankSchedule& sched, const Dataset& dataset,
                                bool rows_of_records) {
  const size_t shards = dataset.shard_count();
  std::vector<char> seen(shards, 0);
  std::vector<size_t> seq;
  std::vector<uint64_t> units;
  const UnitLayout& layout = order.layout();
  for (uint64_t k = 0; k < sched.num_batches() && seq.size() < shards; ++k) {
    const uint64_t n = sched.batch_length(k);
    units.resize(n);
    order.at_strided(sched.position(k, 0), sched.world_size(), n, units.data());
    for (uint64_t u : units) {
      // Image data: groups are shards. Token data: groups are records.
      const uint64_t group = layout.locate(u).first;
      const size_t s = rows_of_records ? dataset.locate(group).first : group;
      if (!seen[s]) {
        seen[s] = 1;
        seq.push_back(s);
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_run_) ++run_;
    first_run_ = false;
  }
  cache_->prefetch(std::move(seq));
}

void CachedShards::hold(size_t s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pins_.at(s)) {
      if (touched_[s] != run_) ++held_hits_;
      touched_[s] = run_;
      return;
    }
  }
  ShardCache::Pin pin = cache_->acquire(s);  // may download: not under the lock
  std::lock_guard<std::mutex> lock(mu_);
  touched_[s] = run_;
  if (!pins_[s]) pins_[s] = std::move(pin);
}

}  // namespace stoker::internal
