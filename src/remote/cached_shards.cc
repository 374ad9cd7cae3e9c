#include "remote/cached_shards.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>

#include "remote/record_engine.h"
#include "stoker/error.h"
#include "util/enum_names.h"
#include "util/log.h"

namespace stoker {

namespace {
constexpr internal::EnumName<RemoteReads> kRemoteReadsNames[] = {
    {RemoteReads::kAuto, "auto"}, {RemoteReads::kShards, "shards"}, {RemoteReads::kRecords, "records"}};
}  // namespace

const char* remote_reads_name(RemoteReads r) noexcept { return internal::enum_name(kRemoteReadsNames, r, "auto"); }
RemoteReads remote_reads_from_name(const std::string& s) {
  return internal::enum_from_name(kRemoteReadsNames, s, "remote_reads");
}

}  // namespace stoker

namespace stoker::internal {

namespace {
// The shard sequence handed to the cache is cut here: past it, a run's reads are not
// prefetched, which only a global shuffle of a huge dataset through a small cache
// reaches (and there prefetching whole shards is the wrong tool anyway).
constexpr size_t kMaxSequence = size_t{1} << 20;
}  // namespace

std::shared_ptr<CachedShards> CachedShards::open(const CachedShardsOptions& o) {
  if (!is_remote_url(o.url)) return nullptr;
  if (o.cache_dir.empty())
    throw_error(ErrorCode::kInvalidArgument,
                redact_url(o.url) + ": a remote dataset is read through a local cache: set cache_dir");
  auto store = RemoteStore::open(o.url, o.remote);
  Manifest manifest = store->read_manifest();
  CacheOptions co;
  co.dir = o.cache_dir;
  co.limit = o.cache_limit ? o.cache_limit : std::max<uint64_t>(manifest.total_bytes(), 1);  // 0: room for all of it
  co.prefetch = o.cache_prefetch;
  auto c = std::make_shared<CachedShards>();
  c->url_ = redact_url(o.url);
  c->store_ = store;
  c->reader_opt_.max_record_bytes = o.max_record_bytes;
  // A limit below the largest shard throws, naming both.
  c->cache_ = ShardCache::open(std::move(store), co, std::move(manifest));
  // The most shards that fit whichever they are: as many of the largest as the limit
  // holds (at least one: ShardCache::open checked that the largest fits).
  std::vector<uint64_t> sizes;
  for (const ShardEntry& e : c->cache_->manifest().shards) sizes.push_back(e.file_size);
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  uint64_t sum = 0;
  c->hard_ = 0;
  while (c->hard_ < sizes.size() && sum + sizes[c->hard_] <= co.limit) sum += sizes[c->hard_++];
  c->hard_ = std::max<size_t>(c->hard_, 1);
  if (c->hard_ == sizes.size()) {
    c->soft_ = c->hard_;  // the whole dataset fits: nothing held is in the way of the window
  } else {
    const size_t window = c->cache_->stats().prefetch_window;
    c->soft_ = c->hard_ > window ? c->hard_ - window : 1;
  }
  c->shards_.resize(c->cache_->manifest().shards.size());
  c->indexes_.resize(c->shards_.size());
  return c;
}

void CachedShards::choose_reads(RemoteReads asked, bool tokens, OrderKind order) {
  const std::string& url = url_;
  if (asked == RemoteReads::kRecords && tokens)
    throw_error(ErrorCode::kInvalidArgument,
                url + ": remote_reads records reads records of a dataset of records one by one; token data is "
                      "read a window of shards at a time: use remote_reads auto or shards");
  // A global shuffle of records through a cache that holds only some of the shards
  // (token data's shuffle reads a window of shards at a time, which whole shards serve).
  const bool small_shuffle = !tokens && order == OrderKind::kShuffled && hard_ < shards_.size();
  records_ = asked == RemoteReads::kRecords || (asked == RemoteReads::kAuto && small_shuffle);
  // A server that ignores Range answers each record's GET with its whole shard: whole
  // shards through the cache cost less whatever the order (the store warned, naming it).
  if (records_ && !shards_.empty() && !store_->serves_ranges(cache_->manifest().shards.front().name)) {
    records_ = false;
    log_info(url + ": its server ignores Range, so shards are read whole through the cache instead of records "
                   "by ranged GET (remote_reads " + std::string(remote_reads_name(asked)) + ")");
  }
  const std::string holds = "cache_limit " + std::to_string(cache_->stats().limit) + " bytes holds " +
                            std::to_string(hard_) + " of the dataset's " + std::to_string(shards_.size()) + " shards";
  if (records_ && small_shuffle) {
    log_info(url + ": " + holds + ", and a global shuffle draws every batch from most of them: records are read "
                   "one by one by ranged GETs (remote_reads records; nothing cached, each record fetched once "
                   "per epoch). Order kind chunk_local with chunk_size = a shard's records fetches whole shards "
                   "once per epoch instead, and a cache_limit that holds the dataset fetches it once");
  } else if (!records_ && small_shuffle) {
    log_warn(url + ": " + holds + ", and a global shuffle (order kind shuffled) draws every batch from most of "
                   "them: shards will be fetched again and again (about one fetch per record read). Use "
                   "remote_reads auto or records (a ranged GET per record), order kind chunk_local with "
                   "chunk_size = a shard's records (each shard fetched once per epoch; sequential for token "
                   "data), or a cache_limit that holds the dataset");
  }
}

const RecordLocation& CachedShards::location(size_t s, uint64_t r) {
  std::shared_ptr<const RemoteShard> index;
  {
    std::lock_guard<std::mutex> lock(index_mu_);
    index = indexes_.at(s);
  }
  if (!index) {
    // Fetched outside the lock (a few round trips); two threads may both fetch it, and
    // the first stored is kept.
    auto fresh = RemoteShard::open(store_, cache_->manifest().shards.at(s), reader_opt_);
    std::lock_guard<std::mutex> lock(index_mu_);
    if (!indexes_[s]) indexes_[s] = std::move(fresh);
    index = indexes_[s];
  }
  if (r >= index->record_count())
    throw_error(ErrorCode::kInvalidArgument, shard_url(s) + ": record " + std::to_string(r) + " does not exist");
  return index->location(r);  // the index lives as long as this object
}

std::vector<uint8_t> CachedShards::fetch_record(size_t s, uint64_t r) {
  const RecordLocation& loc = location(s, r);
  std::vector<uint8_t> stored(loc.stored_size);
  const std::string& name = cache_->manifest().shards.at(s).name;
  store_->read(name, loc.offset, stored, "shard " + name + " record " + std::to_string(r));
  return stored;
}

std::unique_ptr<IoEngine> CachedShards::make_record_engine(unsigned queue_depth) const {
  std::map<std::string, uint64_t> sizes;
  for (const ShardEntry& e : cache_->manifest().shards) sizes[e.name] = e.file_size;
  return make_remote_record_engine(store_, std::move(sizes), queue_depth, record_wait_ns_);
}

void CachedShards::prefetch_run(const EpochOrder& order, const RankSchedule& sched, const Dataset& dataset,
                                bool rows_of_records, const UnitRecords& records_of) {
  if (records_) return;  // no shard is fetched whole
  const size_t shards = dataset.shard_count();
  // When every shard fits, nothing read is evicted: each shard is listed once, in the
  // order first read. Otherwise a shard is listed again when read again after others,
  // but not on a return to one of the last `hard_` shards listed, which the loader most
  // likely still holds (a batch of a windowed order alternates between a few shards).
  const bool all_fit = hard_ >= shards;
  std::vector<size_t> seq;
  std::vector<uint64_t> listed_at(shards, UINT64_MAX);  // seq.size() when last listed or read
  auto visit = [&](size_t s) {
    const uint64_t at = listed_at[s];
    if (at != UINT64_MAX && (all_fit || seq.size() - at <= hard_)) {
      if (!all_fit) listed_at[s] = seq.size();
      return;
    }
    listed_at[s] = seq.size();
    seq.push_back(s);
  };
  auto done = [&] { return seq.size() >= kMaxSequence || (all_fit && seq.size() == shards); };
  if (rows_of_records) {
    // Token data is read a record at a time, however many rows a record holds: walk
    // records, not rows (windows: their records in the epoch's chunk order; sequential:
    // storage order, from the record the rank starts in).
    if (sched.num_batches() > 0) {
      const uint64_t first = std::min<uint64_t>(sched.position(0, 0), order.size() - 1);
      if (order.windowed()) {
        for (uint64_t w = order.window_of(first); w < order.window_count() && !done(); ++w)
          for (uint64_t chunk : order.window_chunks(w)) visit(dataset.locate(order.chunk_group(chunk)).first);
      } else {
        for (size_t s = dataset.locate(order.layout().locate(order.at(first)).first).first; s < shards && !done(); ++s)
          visit(s);
      }
    }
  } else {
    std::vector<uint64_t> units;
    for (uint64_t k = 0; k < sched.num_batches() && !done(); ++k) {
      const uint64_t n = sched.batch_length(k);
      units.resize(n);
      order.at_strided(sched.position(k, 0), sched.world_size(), n, units.data());
      for (uint64_t u : units) {
        if (records_of) records_of(u, [&](uint64_t record) { visit(dataset.locate(record).first); });
        else visit(order.layout().locate(u).first);  // groups are shards
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

bool CachedShards::close_lru_idle_locked(size_t keep, const CloseFn& close) {
  if (idle_ == 0) return false;
  size_t at = held_.size();
  for (size_t i = 0; i < held_.size(); ++i) {
    const Shard& h = shards_[held_[i]];
    if (held_[i] == keep || h.uses > 0) continue;
    if (at == held_.size() || h.idle_since < shards_[held_[at]].idle_since) at = i;
  }
  if (at == held_.size()) return false;
  const size_t s = held_[at];
  close(s);                // descriptors first ...
  shards_[s].pin.reset();  // ... then the cache may evict it
  held_[at] = held_.back();
  held_.pop_back();
  --idle_;
  return true;
}

bool CachedShards::use(size_t s, const CloseFn& close) {
  if (records_) return true;  // nothing held: the record's own GET reads it
  std::unique_lock<std::mutex> lock(mu_);
  Shard& sh = shards_.at(s);
  const bool fresh = !sh.pin;
  // Idle shards past the room the prefetch window leaves go first (for a fresh one, to
  // leave it room too).
  while (held_.size() + (fresh ? 1 : 0) > soft_ && close_lru_idle_locked(s, close)) {
  }
  if (fresh) {
    if (held_.size() >= hard_) return false;  // all in use: the caller lets some finish
    held_.push_back(s);  // reserved: only this thread holds shards
    lock.unlock();
    ShardCache::Pin pin;
    try {
      pin = cache_->acquire(s);  // may download: not under the lock
    } catch (...) {
      lock.lock();
      held_.erase(std::find(held_.begin(), held_.end(), s));
      throw;
    }
    lock.lock();
    sh.pin = std::move(pin);
  } else {
    if (sh.uses == 0) --idle_;
    if (sh.used_in_run != run_) ++held_hits_;  // served without asking the cache
  }
  sh.used_in_run = run_;
  ++sh.uses;
  return true;
}

void CachedShards::release(size_t s) {
  if (records_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Shard& sh = shards_.at(s);
    if (sh.uses == 0) return;  // end_run() has counted it over already
    if (--sh.uses == 0) {
      ++idle_;
      sh.idle_since = ++tick_;
    }
    ++releases_;
  }
  released_.notify_all();
}

void CachedShards::wait_release(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t seen = releases_;
  released_.wait_for(lock, timeout, [&] { return releases_ != seen; });
}

void CachedShards::end_run() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t s : held_) {
    if (shards_[s].uses > 0) shards_[s].idle_since = ++tick_;
    shards_[s].uses = 0;
  }
  idle_ = held_.size();
}

size_t CachedShards::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

}  // namespace stoker::internal
