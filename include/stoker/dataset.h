// Datasets: a directory of shards plus one manifest file (`MANIFEST`).
//
// The manifest lists every shard (name, record count, size, index CRC), the schema,
// class names and free-form metadata, and ends with a CRC32C of everything before
// it, so opening a dataset of 10,000 shards costs one file read and a flipped byte
// anywhere in the directory is caught (by the manifest CRC or by the shard CRCs that
// the manifest pins). Shards are opened lazily and cached.
//
// DatasetWriter rolls shards at a size limit and writes the manifest last, atomically:
// a directory without a valid MANIFEST is not a dataset. The MANIFEST is the commit
// point of every write: shards are written under pending names that no dataset uses
// (`shard-00000.stk.pending-<token>`), so a dataset already in the directory stays
// whole and readable until the new MANIFEST replaces it in one rename; only then are
// the old shards removed and the new ones given their plain names (a second manifest
// rename; a hard link keeps the dataset valid at every step). A writer killed at any
// point leaves the old dataset or the new one, never a mix; its pending files are
// ignored by verify and removed by the next writer of that directory.
//
// Parts (a dataset packed by N independent writers, on one machine or many): a writer
// given a PartSpec writes part I of N into the shared directory under names no other
// part uses (`part-IIIII-of-NNNNN-SSSSS.stk`) and, as its commit point, a *part
// manifest* `MANIFEST.part-IIIII-of-NNNNN` (the manifest syntax, meta "part" = "I/N")
// instead of MANIFEST; re-running a part replaces it in the same steps as above. No part
// ever writes MANIFEST: commit_parts (commit.h) merges the N part manifests into it.
//
// Threading: Dataset is safe to share between threads (shard cache is locked).
// DatasetWriter is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/shard.h"

namespace stoker {

class DatasetStore;  // dataset_store.h

inline constexpr const char* kManifestName = "MANIFEST";
/// In the name of a file a DatasetWriter has not committed yet (a pending shard, its
/// .tmp, the manifest being written): not part of any dataset.
inline constexpr const char* kPendingMarker = ".pending-";

struct ShardEntry {
  std::string name;        ///< file name inside the dataset directory (no '/')
  uint64_t records = 0;
  uint64_t file_size = 0;
  uint32_t index_crc = 0;  ///< must equal the shard's own index CRC
  bool operator==(const ShardEntry&) const = default;
};

struct Manifest {
  uint32_t version = kShardVersion;  ///< format version of the manifest and every shard
  Schema schema;
  std::vector<std::string> class_names;       ///< label i is class_names[i]
  std::map<std::string, std::string> meta;    ///< e.g. "source", "seq_len"
  std::vector<ShardEntry> shards;

  uint64_t total_records() const noexcept;
  uint64_t total_bytes() const noexcept;

  /// Serialises, CRC line included. Deterministic (no timestamps).
  std::string serialize() const;
  /// Parses untrusted text; throws kDataLoss naming `where` and the line on any
  /// problem (bad CRC, bad syntax, names escaping the directory, absurd counts).
  static Manifest parse(std::string_view text, const std::string& where);
};

/// True when `name` is a plain file name that stays inside the dataset directory
/// ([A-Za-z0-9._-], no leading '.', not the manifest's name).
bool is_safe_shard_name(std::string_view name);

/// True when `name` is a name DatasetWriter gives a committed shard: `<prefix>-NNNNN.stk`
/// (five or more digits). An empty `prefix` stands for any.
bool is_writer_shard_name(std::string_view name, std::string_view prefix = {});

/// Reads `dir/MANIFEST`. Throws kNotFound / kDataLoss.
Manifest read_manifest(const std::string& dir);
/// Reads and parses a manifest file at `path` (a part manifest, say). Throws kNotFound /
/// kDataLoss naming it.
Manifest read_manifest_file(const std::string& path);
/// Writes `dir/MANIFEST` atomically (temporary name, fsync, rename, fsync dir).
void write_manifest(const std::string& dir, const Manifest& manifest);

class Dataset {
 public:
  /// Opens a dataset directory (reads only the manifest).
  static std::shared_ptr<Dataset> open(const std::string& dir, ShardReaderOptions options = {});

  const std::string& dir() const noexcept { return dir_; }
  const Manifest& manifest() const noexcept { return manifest_; }
  const Schema& schema() const noexcept { return manifest_.schema; }
  size_t shard_count() const noexcept { return manifest_.shards.size(); }
  uint64_t record_count() const noexcept { return offsets_.back(); }
  std::string shard_path(size_t s) const;

  /// Global record index -> (shard, record within shard). Throws kInvalidArgument.
  std::pair<size_t, uint64_t> locate(uint64_t global) const;
  /// First global index of shard s.
  uint64_t shard_begin(size_t s) const { return offsets_.at(s); }

  /// Opens (or returns the cached) reader of shard s and checks it against the
  /// manifest entry (record count, size, index CRC): a replaced shard is kDataLoss.
  std::shared_ptr<const ShardReader> shard(size_t s) const;
  /// Forgets the cached reader of shard s: its descriptor closes once no caller holds
  /// the reader, and the next shard(s) opens the file again. (A remote dataset's loader
  /// does this before its cache may evict the shard.)
  void close_shard(size_t s) const;

  Record read(uint64_t global) const;

 private:
  Dataset() = default;
  std::string dir_;
  Manifest manifest_;
  std::vector<uint64_t> offsets_;  // size shard_count+1
  ShardReaderOptions options_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const ShardReader>> cache_;
};

/// Part `index` of `count` (0-based) of a dataset written by several writers. count 0:
/// not a part (the writer commits MANIFEST itself).
struct PartSpec {
  uint32_t index = 0;
  uint32_t count = 0;
  bool enabled() const noexcept { return count > 0; }
  /// "I/N".
  std::string to_string() const;
  /// Parses "I/N" (0 <= I < N <= kMaxParts); throws kInvalidArgument saying why.
  static PartSpec parse(std::string_view text);
  /// The range [first, last) of `n` items this part takes when the items are cut into
  /// `count` contiguous ranges of sizes differing by at most one (earlier parts smaller).
  std::pair<uint64_t, uint64_t> range(uint64_t n) const noexcept;
  /// Throws kInvalidArgument unless 0 <= index < count <= kMaxParts (or count == 0).
  void validate() const;
};
inline constexpr uint32_t kMaxParts = 99999;
/// "part-IIIII-of-NNNNN": the shard prefix of a part (its shards are PREFIX-SSSSS.stk).
std::string part_shard_prefix(const PartSpec& part);
/// "MANIFEST.part-IIIII-of-NNNNN": the file a part commits.
std::string part_manifest_name(const PartSpec& part);

struct DatasetWriterOptions {
  uint64_t shard_size = 256ull << 20;  ///< roll to a new shard past this many bytes
  std::string shard_prefix = "shard";  ///< shard-00000.stk, shard-00001.stk, ... (a part uses part_shard_prefix)
  ShardWriterOptions shard;
  /// Write one part of a dataset (see "Parts" above). The writer refuses a directory
  /// that already holds a committed MANIFEST (kInvalidArgument), whatever `overwrite`
  /// says: the parts' shards are named by it.
  PartSpec part;
  /// Add to the dataset already in the directory instead of writing a new one: its
  /// MANIFEST (which must exist, with the same format version and schema) is replaced
  /// by one that lists its shards, untouched, then the new ones (named
  /// `gen-GGGGG-SSSSS.stk`, G the new generation), with meta "generation" one higher
  /// (a dataset never appended to is generation 1) and the counts "tokens", "rows",
  /// "documents" and "tokens_dropped" summed. Old shards are never rewritten or
  /// removed, so a reader that opened the old manifest keeps reading that version. The
  /// packers check the class names and the other meta. One appender at a time per
  /// directory (a second one that commits later would drop the first one's shards from
  /// MANIFEST: they stay on disk, in no dataset). Not with `part` or `overwrite`.
  bool append = false;
  /// Where the dataset goes instead of the directory given (which is then unused): an
  /// object-store prefix (remote.h, open_dataset_store). Each shard is written to the
  /// store's staging directory and uploaded once finished, under its plain name (an
  /// object no manifest names is in no dataset); the manifest (or part manifest) is
  /// published last, in one PUT, once every upload is in. A failed upload fails
  /// finish(), which removes the shards uploaded. Not with overwrite.
  std::shared_ptr<DatasetStore> store;
};

/// The manifest generation of `m`: meta "generation", 1 when absent.
uint64_t manifest_generation(const Manifest& m);

/// Writes a dataset directory: shards in order, then the manifest.
class DatasetWriter {
 public:
  /// Creates `dir` if needed. Throws kInvalidArgument when `dir` already holds a
  /// MANIFEST (refuses to overwrite a dataset) unless `overwrite`; with `overwrite`
  /// the old dataset is left untouched until finish() commits the new one.
  DatasetWriter(std::string dir, Schema schema, DatasetWriterOptions options = {},
                bool overwrite = false);
  ~DatasetWriter();
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  void add(std::span<const std::span<const uint8_t>> fields);
  /// Appends a record prepared with prepare_record(schema, fields, options().shard).
  void add_prepared(const PreparedRecord& record);
  const DatasetWriterOptions& options() const noexcept { return options_; }
  Manifest& manifest() noexcept { return manifest_; }  ///< set class names / meta before finish
  /// With DatasetWriterOptions::append: the dataset's manifest before the append.
  const Manifest& base() const noexcept { return base_; }
  uint64_t records() const noexcept { return records_; }
  uint64_t stored_bytes() const noexcept { return stored_bytes_; }
  uint64_t raw_bytes() const noexcept { return raw_bytes_; }
  /// Finishes the open shard and commits: the manifest replaces any old one in one
  /// rename, then the old dataset's shards are removed. Returns the manifest. When it
  /// throws before the commit, the new shards are removed and the old dataset stays.
  Manifest finish();
  /// Gives up: removes every file this writer created (finished shards and the open
  /// shard's temporary file) and returns how many. The writer is finished afterwards;
  /// a dataset already in the directory is untouched. The destructor of a writer that
  /// was neither finished nor discarded does the same (an exception, ENOSPC).
  size_t discard() noexcept;

 private:
  void roll();
  Manifest next_manifest();
  void commit();   // a local directory
  void publish();  // an object store
  std::string shard_name(size_t shard) const;
  std::string pending_name(size_t shard) const;
  std::string dir_;    ///< where shards are written (an object store's staging directory)
  std::string where_;  ///< what messages name: the directory or the store's URL
  std::shared_ptr<DatasetStore> store_;
  std::string token_;  ///< this writer's pending-name suffix
  DatasetWriterOptions options_;
  Manifest manifest_;
  Manifest base_;  ///< append: the manifest appended to
  std::unique_ptr<ShardWriter> current_;
  uint64_t records_ = 0, stored_bytes_ = 0, raw_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace stoker
