#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "stoker/dataset.h"
#include "stoker/error.h"

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

DatasetWriter::DatasetWriter(std::string dir, Schema schema, DatasetWriterOptions options, bool overwrite)
    : dir_(std::move(dir)), options_(std::move(options)) {
  schema.validate();
  if (options_.shard.version < kShardVersionMin || options_.shard.version > kShardVersion ||
      schema.min_version() > options_.shard.version)
    throw_error(ErrorCode::kInvalidArgument, "schema " + schema.to_string() + " cannot be written as version " +
                                                 std::to_string(options_.shard.version));
  if (options_.shard_size < 4096) throw_error(ErrorCode::kInvalidArgument, "shard size must be at least 4 KiB");
  if (!is_safe_shard_name(options_.shard_prefix + "-00000.stk"))
    throw_error(ErrorCode::kInvalidArgument, "shard prefix '" + options_.shard_prefix + "' is not a plain file name");
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw_error(ErrorCode::kIoError, "create directory " + dir_ + ": " + ec.message());
  const std::string manifest = dir_ + "/" + kManifestName;
  if (std::filesystem::exists(manifest)) {
    if (!overwrite)
      throw_error(ErrorCode::kInvalidArgument, dir_ + " already holds a dataset (" + kManifestName + " exists); refusing to overwrite");
    // Removing the manifest first means a crash mid-pack leaves no valid-looking dataset.
    std::filesystem::remove(manifest, ec);
  }
  manifest_.version = options_.shard.version;
  manifest_.schema = std::move(schema);
}

DatasetWriter::~DatasetWriter() = default;

void DatasetWriter::roll() {
  if (current_) {
    ShardWriter::Summary s = current_->finish();
    current_.reset();
    manifest_.shards.push_back(ShardEntry{std::filesystem::path(s.path).filename().string(), s.records, s.file_size, s.index_crc});
  }
}

void DatasetWriter::add(std::span<const std::span<const uint8_t>> fields) {
  add_prepared(prepare_record(manifest_.schema, fields, options_.shard));
}

void DatasetWriter::add_prepared(const PreparedRecord& record) {
  if (finished_) throw_error(ErrorCode::kInvalidArgument, "add to a finished dataset " + dir_);
  if (current_ && current_->record_count() > 0 &&
      current_->projected_size() + record.stored.size() + options_.shard.align > options_.shard_size)
    roll();
  if (!current_) {
    char name[64];
    std::snprintf(name, sizeof name, "-%05zu.stk", manifest_.shards.size());
    current_ = std::make_unique<ShardWriter>(dir_ + "/" + options_.shard_prefix + name, manifest_.schema, options_.shard);
  }
  current_->add_prepared(record);
  ++records_;
  stored_bytes_ += record.location.stored_size;
  raw_bytes_ += record.location.raw_size;
}

size_t DatasetWriter::discard() noexcept {
  size_t removed = 0;
  if (current_) {
    current_.reset();  // an unfinished ShardWriter removes its temporary file
    ++removed;
  }
  for (const ShardEntry& s : manifest_.shards) {
    std::error_code ec;
    if (std::filesystem::remove(dir_ + "/" + s.name, ec)) ++removed;
  }
  manifest_.shards.clear();
  finished_ = true;
  return removed;
}

Manifest DatasetWriter::finish() {
  if (finished_) throw_error(ErrorCode::kInvalidArgument, "dataset " + dir_ + " finished twice");
  roll();
  finished_ = true;
  write_manifest(dir_, manifest_);
  return manifest_;
}

}  // namespace stoker
