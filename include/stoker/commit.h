// Committing a dataset packed in parts (dataset.h, "Parts"): N writers, on any number of
// machines, each wrote `MANIFEST.part-IIIII-of-NNNNN` and its shards into one directory;
// commit_parts checks them and publishes the dataset's MANIFEST, which lists the parts'
// shards in part order (so the records keep the order of a one-part pack).
//
// What it promises:
//   - It publishes nothing unless every part 0..N-1 has a valid part manifest, all agree
//     on N, format version, schema, class names and meta (below), and every shard they
//     name opens with the record count, size and index CRC its part manifest pins (the
//     shard index is read and its CRC checked; records are not read: that is `verify`).
//     Otherwise it throws, listing every problem: kNotFound when a part is missing or
//     incomplete ("part 2/4: missing (no MANIFEST.part-00002-of-00004); 3 pending files
//     of a writer that was killed or is still running"), kDataLoss when the parts
//     disagree or a shard does not match its part manifest, kInvalidArgument when the
//     directory holds parts of two part counts.
//   - MANIFEST is published in one step that cannot replace an existing one: written to
//     a temporary file (fsync), then hard-linked to MANIFEST (link() fails when it
//     exists). Of two concurrent commits exactly one publishes; the other finds MANIFEST
//     taken and reports kCommitLostRace (it wrote nothing).
//   - Idempotent: when MANIFEST already holds exactly the merge of the parts, the commit
//     reports kAlreadyCommitted and changes nothing; when it holds something else, it
//     throws kInvalidArgument.
//   - Meta merge: "part" is dropped; the counts "tokens", "rows", "documents" and
//     "tokens_dropped" are summed (each part states its own); every other key must be
//     equal in all parts; "parts" = N is added.
//   - Strays: files that look like shards or a writer's pending files (`*.stk`,
//     `*.pending-*`) and that no committed manifest names are listed in the report
//     (a killed writer's leftovers, a part re-run with another N); with `clean` they are
//     removed after the commit. Nothing else is ever removed. Part manifests stay.
//
// Blocking, one call per directory per process; safe against other processes doing
// the same (above).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/dataset_store.h"

namespace stoker {

struct CommitOptions {
  bool clean = false;  ///< remove the strays (after a successful or idempotent commit)
};

struct CommitReport {
  enum class Outcome { kCommitted, kAlreadyCommitted, kCommitLostRace };
  Outcome outcome = Outcome::kCommitted;
  uint32_t parts = 0;
  uint64_t shards = 0, records = 0, bytes = 0;
  std::vector<std::string> strays;  ///< file names (removed when clean)
  bool strays_removed = false;
  double seconds = 0;
};

/// Commits the parts in `dir` as described above.
CommitReport commit_parts(const std::string& dir, const CommitOptions& options = {});
/// The same in any store (an object-store prefix: remote.h, open_dataset_store). The
/// publish there is a conditional PUT (If-None-Match: *); a store that ignores the
/// condition lets both of two racing commits publish, each the same bytes (the merge
/// of the same parts is deterministic).
CommitReport commit_parts(DatasetStore& store, const CommitOptions& options = {});

/// The merged manifest of the parts in `dir` (every check above but the shard opens
/// when `check_shards` is false). Throws as commit_parts, listing the problems.
Manifest merge_parts(const std::string& dir, bool check_shards = true);
Manifest merge_parts(DatasetStore& store, bool check_shards = true);

}  // namespace stoker
