// DatasetWriter: shards in order, then the manifest, committed in steps that each leave
// one valid dataset (a local directory), or uploaded to an object store and published
// by one PUT of the manifest (DatasetWriterOptions::store).
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
#include "stoker/dataset_store.h"
#include "stoker/error.h"
#include "util/bytes.h"

namespace stoker {

namespace {

// A suffix no other writer (process, thread or earlier run) uses.
std::string unique_token() {
  static std::atomic<uint64_t> counter{0};
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%d-%llx-%llu", static_cast<int>(::getpid()), static_cast<unsigned long long>(t),
                static_cast<unsigned long long>(counter++));
  return buf;
}

bool is_pending(const std::string& name) { return name.find(kPendingMarker) != std::string::npos; }

bool parse_count(const std::string& s, uint64_t& v) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  v = std::stoull(s);
  return true;
}

}  // namespace

DatasetWriter::DatasetWriter(std::string dir, Schema schema, DatasetWriterOptions options, bool overwrite)
    : dir_(std::move(dir)), token_(unique_token()), options_(std::move(options)) {
  store_ = options_.store ? options_.store : open_local_store(dir_);
  where_ = store_->where();
  schema.validate();
  if (options_.shard.version < kShardVersionMin || options_.shard.version > kShardVersion ||
      schema.min_version() > options_.shard.version)
    throw_error(ErrorCode::kInvalidArgument, "schema " + schema.to_string() + " cannot be written as version " +
                                                 std::to_string(options_.shard.version));
  options_.part.validate();
  if (store_->is_remote() && overwrite)
    throw_error(ErrorCode::kInvalidArgument, where_ + ": overwriting a dataset in an object store is not supported; "
                                             "remove it (or pack to a new prefix)");
  const std::optional<std::string> existing = store_->read(kManifestName);
  if (options_.append) {
    if (options_.part.enabled() || overwrite)
      throw_error(ErrorCode::kInvalidArgument, "append cannot be combined with a part or with overwrite");
    if (!existing)
      throw_error(ErrorCode::kInvalidArgument, where_ + " holds no dataset (no " + kManifestName + ") to append to");
    base_ = Manifest::parse(*existing, where_ + "/" + kManifestName);
    if (base_.version != options_.shard.version || !(base_.schema == schema))
      throw_error(ErrorCode::kInvalidArgument, "cannot append to " + where_ + ": it holds schema " +
                                                   base_.schema.to_string() + " (version " + std::to_string(base_.version) +
                                                   "), the new records have " + schema.to_string() + " (version " +
                                                   std::to_string(options_.shard.version) + ")");
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "gen-%05llu", static_cast<unsigned long long>(manifest_generation(base_) + 1));
    options_.shard_prefix = prefix;
  }
  if (options_.part.enabled()) {
    options_.shard_prefix = part_shard_prefix(options_.part);
    if (existing)
      throw_error(ErrorCode::kInvalidArgument,
                  where_ + " already holds a committed dataset (" + kManifestName + " exists); part " +
                      options_.part.to_string() + " cannot be written into it (pack the parts into a new directory)");
  }
  if (options_.shard_size < 4096) throw_error(ErrorCode::kInvalidArgument, "shard size must be at least 4 KiB");
  if (!is_safe_shard_name(options_.shard_prefix + "-00000.stk"))
    throw_error(ErrorCode::kInvalidArgument, "shard prefix '" + options_.shard_prefix + "' is not a plain file name");
  if (store_->is_remote()) {
    dir_ = store_->staging_dir();
    // A re-run part: its old part manifest goes first, so that until this run
    // publishes a new one the part counts as missing, never as the old shards'.
    if (options_.part.enabled()) store_->remove(part_manifest_name(options_.part));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw_error(ErrorCode::kIoError, "create directory " + dir_ + ": " + ec.message());
  // The old dataset stays whole until finish() commits the new one.
  if (!options_.part.enabled() && !options_.append && existing && !overwrite)
    throw_error(ErrorCode::kInvalidArgument,
                where_ + " already holds a dataset (" + kManifestName + " exists); refusing to overwrite");
  manifest_.version = options_.shard.version;
  manifest_.schema = std::move(schema);
}

DatasetWriter::~DatasetWriter() {
  if (!finished_) discard();
}

std::string DatasetWriter::shard_name(size_t shard) const {
  char name[64];
  std::snprintf(name, sizeof name, "-%05zu.stk", shard);
  return options_.shard_prefix + name;
}

std::string DatasetWriter::pending_name(size_t shard) const { return shard_name(shard) + kPendingMarker + token_; }

void DatasetWriter::roll() {
  if (current_) {
    ShardWriter::Summary s = current_->finish();
    current_.reset();
    std::string name = std::filesystem::path(s.path).filename().string();
    if (store_->is_remote()) {
      // An object is invisible until a manifest names it: it goes under its plain name.
      name = shard_name(manifest_.shards.size());
      store_->upload(s.path, name);
    }
    manifest_.shards.push_back(ShardEntry{name, s.records, s.file_size, s.index_crc});
  }
}

void DatasetWriter::add(std::span<const std::span<const uint8_t>> fields) {
  add_prepared(prepare_record(manifest_.schema, fields, options_.shard));
}

void DatasetWriter::add_prepared(const PreparedRecord& record) {
  if (finished_) throw_error(ErrorCode::kInvalidArgument, "add to a finished dataset " + where_);
  if (current_ && current_->record_count() > 0 &&
      current_->projected_size() + record.stored.size() + options_.shard.align > options_.shard_size)
    roll();
  if (!current_)
    current_ = std::make_unique<ShardWriter>(dir_ + "/" + pending_name(manifest_.shards.size()), manifest_.schema,
                                             options_.shard);
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
  try {
    if (store_->is_remote()) store_->flush();
  } catch (const Error&) {
    // An upload that failed left nothing to remove.
  }
  for (const ShardEntry& s : manifest_.shards) {
    try {
      if (store_->remove(s.name)) ++removed;
    } catch (const Error&) {
      // Left for `stoker commit --clean` to list and remove.
    }
  }
  manifest_.shards.clear();
  finished_ = true;
  return removed;
}

Manifest DatasetWriter::finish() {
  if (finished_) throw_error(ErrorCode::kInvalidArgument, "dataset " + where_ + " finished twice");
  try {
    roll();
  } catch (...) {
    discard();
    throw;
  }
  if (store_->is_remote())
    publish();
  else
    commit();
  return manifest_;
}

// What the manifest will say: this writer's shards, after the old ones for an append
// (whose class names and meta must agree; the counts are summed).
Manifest DatasetWriter::next_manifest() {
  if (options_.part.enabled()) manifest_.meta["part"] = options_.part.to_string();
  Manifest next = manifest_;  // what MANIFEST will say (an append: the old shards first)
  if (!options_.append) return next;
  next.shards = base_.shards;
  next.shards.insert(next.shards.end(), manifest_.shards.begin(), manifest_.shards.end());
  std::string clash;
  if (!next.class_names.empty() && !base_.class_names.empty() && next.class_names != base_.class_names)
    clash = "other class names";
  std::set<std::string> keys;
  for (const auto& [k, v] : base_.meta) keys.insert(k);
  for (const auto& [k, v] : next.meta) keys.insert(k);
  for (const std::string& k : keys) {
    if (!clash.empty() || k == "tokens" || k == "rows" || k == "documents" || k == "tokens_dropped" ||
        k == "generation" || k == "parts")
      continue;
    auto a = next.meta.find(k), b = base_.meta.find(k);
    const std::string mine = a == next.meta.end() ? "(none)" : a->second;
    const std::string theirs = b == base_.meta.end() ? "(none)" : b->second;
    if (mine != theirs) clash = "meta " + k + " '" + mine + "' (the dataset has '" + theirs + "')";
  }
  if (!clash.empty())
    throw_error(ErrorCode::kInvalidArgument, "cannot append to " + where_ + ": the new records have " + clash +
                                                 "; nothing was appended");
  for (const auto& [k, v] : base_.meta) {
    auto it = next.meta.find(k);
    if (it == next.meta.end()) {
      next.meta[k] = v;
    } else if (k == "tokens" || k == "rows" || k == "documents" || k == "tokens_dropped") {
      uint64_t a = 0, b = 0;
      if (parse_count(it->second, a) && parse_count(v, b)) it->second = std::to_string(a + b);
    }
  }
  next.meta["generation"] = std::to_string(manifest_generation(base_) + 1);
  if (next.class_names.empty()) next.class_names = base_.class_names;
  return next;
}

// An object store: every shard is uploaded under its plain name already, so the
// commit is one PUT of the manifest once the uploads are in. Shards of this writer's
// naming that no manifest names any more (a part re-run with fewer shards) go after.
void DatasetWriter::publish() {
  const std::string manifest_name = options_.part.enabled() ? part_manifest_name(options_.part) : kManifestName;
  Manifest next;
  try {
    store_->flush();
    next = next_manifest();
    store_->publish(manifest_name, next.serialize(), false);
  } catch (...) {
    discard();
    throw;
  }
  finished_ = true;
  manifest_ = std::move(next);
  std::set<std::string> live;
  for (const ShardEntry& s : manifest_.shards) live.insert(s.name);
  try {
    for (const std::string& name : store_->list())
      if (is_writer_shard_name(name, options_.shard_prefix) && !live.count(name)) store_->remove(name);
  } catch (const Error&) {
    // Left for `stoker commit --clean` to list and remove.
  }
}

// The commit, in steps that each leave one valid dataset in dir_:
//   1. MANIFEST (pending shard names) replaces the old one: the new dataset is live;
//   2. the old shards go;
//   3. each pending shard gets its plain name as a hard link, and a second MANIFEST
//      names those; 4. the pending names go.
// A failure before 1 removes the new shards; after it, the new dataset stands (under
// pending names if step 3 cannot be done, e.g. on a file system without hard links).
// A part commits its part manifest in the same steps, and touches only files of its
// own naming (other parts may be writing into the directory at the same time).
void DatasetWriter::commit() {
  const bool part = options_.part.enabled();
  const std::string manifest_path = dir_ + "/" + (part ? part_manifest_name(options_.part) : kManifestName);
  std::set<std::string> old_shards;
  const size_t first_new = options_.append ? base_.shards.size() : 0;  // next.shards[first_new..] are this writer's
  Manifest next;
  try {
    next = next_manifest();
  } catch (...) {
    discard();
    throw;
  }
  if (!options_.append) {
    try {
      const Manifest old = read_manifest_file(manifest_path);
      for (const ShardEntry& s : old.shards) old_shards.insert(s.name);
    } catch (const Error&) {
      // No old dataset, or an unreadable one: nothing of it to keep or remove.
    }
  }
  try {
    internal::write_file_atomic(manifest_path, next.serialize(), manifest_path + kPendingMarker + token_);
  } catch (...) {
    discard();
    throw;
  }
  finished_ = true;
  manifest_ = std::move(next);
  std::vector<std::string> pending;
  for (size_t i = first_new; i < manifest_.shards.size(); ++i) pending.push_back(manifest_.shards[i].name);
  std::error_code ec;
  for (const std::string& name : old_shards) std::filesystem::remove(dir_ + "/" + name, ec);

  Manifest plain = manifest_;
  bool linked = true;
  size_t made = 0;
  for (; made < pending.size() && linked; ++made) {
    char name[64];
    std::snprintf(name, sizeof name, "-%05zu.stk", made);
    ShardEntry& entry = plain.shards[first_new + made];
    entry.name = options_.shard_prefix + name;
    const std::string to = dir_ + "/" + entry.name;
    std::filesystem::remove(to, ec);  // a stray file of that name is in no dataset
    linked = ::link((dir_ + "/" + pending[made]).c_str(), to.c_str()) == 0;
  }
  try {
    if (!linked) throw_error(ErrorCode::kIoError, "link");
    internal::write_file_atomic(manifest_path, plain.serialize(), manifest_path + kPendingMarker + token_);
    manifest_ = std::move(plain);
    for (const std::string& name : pending) std::filesystem::remove(dir_ + "/" + name, ec);
  } catch (const Error&) {
    // The dataset stands under its pending names; the plain links made are strays.
    for (size_t i = 0; i < made; ++i) std::filesystem::remove(dir_ + "/" + plain.shards[first_new + i].name, ec);
  }
  // Leftovers of writers killed earlier: pending files, and shards of this writer's
  // naming that a commit killed before step 2 left behind, that the live manifest does
  // not name.
  std::set<std::string> live;
  for (const ShardEntry& s : manifest_.shards) live.insert(s.name);
  const std::string own = part ? options_.shard_prefix + "-" : std::string();
  const std::string own_manifest = part ? part_manifest_name(options_.part) + kPendingMarker : std::string();
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (part && !name.starts_with(own) && !name.starts_with(own_manifest)) continue;
    if ((is_pending(name) || is_writer_shard_name(name, options_.shard_prefix)) && !live.count(name))
      std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace stoker
