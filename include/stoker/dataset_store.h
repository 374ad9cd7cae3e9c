// Where a dataset's files live, as the writers and the commit of parts see it: a local
// directory (open_local_store) or an object-store prefix (remote.h, open_dataset_store
// for s3:// URLs). One interface, so that DatasetWriter and commit_parts say once what
// a commit is, and each kind of storage says how it stores a file in one step.
//
// What every store promises:
//   - publish() stores a whole object or nothing: a reader never sees a part of it.
//     With only_if_absent, of two publishes of one name at most one succeeds; the
//     other returns false and wrote nothing (a directory: link(); S3: a conditional
//     PUT, If-None-Match: *).
//   - upload() takes a finished local file (a shard) and may return before it is
//     stored; flush() waits for every upload and throws the first failure (naming the
//     object and the reason). The local file is removed once it is stored.
//   - Errors name the store (a directory, or the URL with no credentials in it).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dataset.h"

namespace stoker {

class DatasetStore {
 public:
  virtual ~DatasetStore() = default;

  /// What messages print: the directory, or the redacted URL.
  virtual const std::string& where() const = 0;
  /// True for an object store: shards are written to staging_dir() and uploaded.
  virtual bool is_remote() const = 0;
  /// A private local directory for the files being written before upload() (removed
  /// with the store). The directory itself for a local store.
  virtual const std::string& staging_dir() = 0;

  /// Names of the files (objects) directly in the dataset, sorted; kNotFound when a
  /// local directory does not exist.
  virtual std::vector<std::string> list() = 0;
  /// The whole of a small file (a manifest); nullopt when it does not exist.
  virtual std::optional<std::string> read(const std::string& name) = 0;
  /// Stores `bytes` as `name` (see above). Returns false only for only_if_absent when
  /// `name` exists.
  virtual bool publish(const std::string& name, std::string_view bytes, bool only_if_absent) = 0;
  /// Removes `name`; nothing when it does not exist. True when something was removed
  /// (an object store: unless it answered that `name` does not exist).
  virtual bool remove(const std::string& name) = 0;
  /// Stores the local file `local_path` as `name` (see above).
  virtual void upload(const std::string& local_path, const std::string& name) = 0;
  virtual void flush() = 0;

  /// Checks that shard `entry.name` is there with the entry's size, record count and
  /// index CRC (its index is read, its records are not), and returns its header.
  /// Throws naming what differs.
  virtual ShardHeader check_shard(const ShardEntry& entry) = 0;
};

/// The store of a local dataset directory (not created here).
std::shared_ptr<DatasetStore> open_local_store(const std::string& dir);

}  // namespace stoker
