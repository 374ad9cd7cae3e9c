#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "util/bytes.h"

namespace stoker {

std::shared_ptr<Dataset> Dataset::open(const std::string& dir, ShardReaderOptions options) {
  std::shared_ptr<Dataset> d(new Dataset());
  d->dir_ = dir;
  d->options_ = options;
  d->manifest_ = read_manifest(dir);
  d->offsets_.reserve(d->manifest_.shards.size() + 1);
  d->offsets_.push_back(0);
  for (const ShardEntry& s : d->manifest_.shards) d->offsets_.push_back(d->offsets_.back() + s.records);
  d->cache_.resize(d->manifest_.shards.size());
  return d;
}

std::string Dataset::shard_path(size_t s) const { return dir_ + "/" + manifest_.shards.at(s).name; }

std::pair<size_t, uint64_t> Dataset::locate(uint64_t global) const {
  if (global >= record_count())
    throw_error(ErrorCode::kInvalidArgument, dir_ + ": record " + std::to_string(global) + " does not exist (dataset has " +
                                                 std::to_string(record_count()) + ")");
  auto it = std::upper_bound(offsets_.begin(), offsets_.end(), global);
  size_t s = static_cast<size_t>(it - offsets_.begin()) - 1;
  return {s, global - offsets_[s]};
}

void Dataset::close_shard(size_t s) const {
  std::shared_ptr<const ShardReader> gone;  // destroyed after the lock is let go
  std::lock_guard<std::mutex> lock(mu_);
  gone = std::move(cache_.at(s));
}

std::shared_ptr<const ShardReader> Dataset::shard(size_t s) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.at(s)) return cache_[s];
  }
  const ShardEntry& e = manifest_.shards.at(s);
  auto reader = ShardReader::open(shard_path(s), options_);
  if (reader->record_count() != e.records || reader->file_size() != e.file_size || reader->index_crc() != e.index_crc) {
    char b[160];
    std::snprintf(b, sizeof b, ": does not match the manifest (records %llu/%llu, bytes %llu/%llu, index crc %08x/%08x): replaced or rewritten?",
                  static_cast<unsigned long long>(reader->record_count()), static_cast<unsigned long long>(e.records),
                  static_cast<unsigned long long>(reader->file_size()), static_cast<unsigned long long>(e.file_size),
                  reader->index_crc(), e.index_crc);
    throw_error(ErrorCode::kDataLoss, shard_path(s) + b);
  }
  if (reader->header().version != manifest_.version)
    throw_error(ErrorCode::kDataLoss, shard_path(s) + ": shard version " + std::to_string(reader->header().version) +
                                          " differs from the manifest's " + std::to_string(manifest_.version));
  if (!(reader->schema() == manifest_.schema))
    throw_error(ErrorCode::kDataLoss, shard_path(s) + ": schema " + reader->schema().to_string() +
                                          " differs from the manifest's " + manifest_.schema.to_string());
  std::lock_guard<std::mutex> lock(mu_);
  if (!cache_[s]) cache_[s] = std::move(reader);
  return cache_[s];
}

Record Dataset::read(uint64_t global) const {
  auto [s, r] = locate(global);
  return shard(s)->read_record(r);
}

}  // namespace stoker
