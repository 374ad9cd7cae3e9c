// Verification of datasets and shards: every checksum, every byte.
//
// verify_path() reads a dataset directory (manifest + every listed shard) or single
// shard files end to end and reports each problem with the file, the part (header,
// index, trailer, record N, padding before record N, manifest line N) and the
// reason. It never throws for bad data: problems are collected so one run lists them
// all. Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stoker/dataset.h"

namespace stoker {

struct VerifyProblem {
  std::string file;    ///< path of the shard or manifest
  std::string where;   ///< "header", "index", "trailer", "record 17", "padding before record 3", "manifest"
  std::string reason;  ///< "checksum mismatch (stored 0x..., computed 0x...)"
  std::string to_string() const { return file + ": " + where + ": " + reason; }
};

struct VerifyReport {
  uint64_t shards = 0;
  uint64_t records = 0;
  uint64_t bytes = 0;  ///< bytes read and checked
  /// JPEG fields whose fast-crop index (image.h check_fast_crop_index) was checked.
  uint64_t fast_crop_indexes = 0;
  std::vector<VerifyProblem> problems;
  /// What is not a problem of the dataset but worth saying: a shard file of a writer's
  /// naming (is_writer_shard_name) that the manifest does not list is in no dataset (an
  /// overwrite killed after its commit, before it removed the old shards, leaves them;
  /// the next writer removes them). Any other unlisted .stk file is a problem.
  std::vector<std::string> notes;
  bool ok() const noexcept { return problems.empty(); }
};

/// Progress callback: bytes checked so far (called from the verifying thread).
using VerifyProgress = std::function<void(uint64_t bytes_done)>;

struct VerifyOptions {
  /// Shards checked in parallel by verify_path (0 = the CPUs this process may keep busy:
  /// affinity mask, cgroup quota).
  unsigned threads = 0;
  /// Also decode every image field, as pack's check does (JPEG: header and every scan's
  /// entropy-coded data; PNG, WebP: a full decode): an image the loader would fail on,
  /// though its checksum is right (damaged before it was packed, or packed with
  /// --no-check), is a problem naming its record, `__key__` and field. About as fast as
  /// a decode (~1,000 JPEG/s per thread), where the checksums alone run at disk speed.
  bool decode = false;
  VerifyProgress progress;
};

/// Checks one shard file: header, trailer, index, every record's CRC, zero padding,
/// that records tile the data region, the reader's content rules (the fast-crop index of
/// every uncompressed image field that has one: CRC, geometry, RST markers; a token
/// record's doc_starts) and, with `options.decode`, that every image decodes. When
/// `expected` is given, also checks it against that manifest entry.
VerifyReport verify_shard(const std::string& path, const ShardEntry* expected, const VerifyOptions& options);
VerifyReport verify_shard(const std::string& path, const ShardEntry* expected = nullptr,
                          const VerifyProgress& progress = {});

/// A dataset directory (manifest and every shard, in parallel) or a single shard file.
VerifyReport verify_path(const std::string& path, const VerifyOptions& options);
VerifyReport verify_path(const std::string& path, unsigned threads = 0,
                         const VerifyProgress& progress = {});

}  // namespace stoker
