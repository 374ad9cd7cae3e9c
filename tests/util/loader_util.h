// Loader fixtures shared by the loader suites (tests/loader_*_test.cc): the options the
// suites start from, whole epochs collected as indices, pixels and labels, token rows
// checked against the values write_token_dataset stored, records corrupted on disk, the
// read-fault table, and a watchdog that turns a deadlock into a named failure.
// Part of the stoker_testutil library, not of libstoker.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "stoker/error.h"
#include "stoker/loader.h"
#include "util/fault_engine.h"

namespace stoker::testing {

/// The library's defaults but for the path and the batch size (rank 0 of 1).
LoaderOptions default_options(const std::string& path, uint64_t batch_size);
/// Image loading: batch 8, crops of 24, 2 threads, rank 0 of 1, order seed 7.
LoaderOptions image_options(const std::string& dir);
/// Token loading: batch 7, 2 threads, rank 0 of 1, order seed 3, windows of 4 records.
LoaderOptions token_options(const std::string& dir);

/// token_options for a lone worker under a held ring: one thread, windows of one record,
/// batches of one row, 7 slots, world size 4, order seed 997.
LoaderOptions lone_worker_options(const std::string& dir);

/// One epoch as the consumer saw it: each batch's index tensor, and for image batches the
/// pixels of each batch and every sample's label in delivery order.
struct Epoch {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<uint8_t>> images;
  std::vector<int64_t> labels;
};

/// Batches from `next` until it gives none.
template <typename Next>
Epoch collect_epoch(Next&& next) {
  Epoch e;
  while (auto b = next()) {
    const auto& idx = (*b)["index"];
    e.indices.emplace_back(static_cast<const int64_t*>(idx.data), static_cast<const int64_t*>(idx.data) + idx.numel());
    if (auto* img = b->find("image")) {
      const auto* p = static_cast<const uint8_t*>(img->data);
      e.images.emplace_back(p, p + img->bytes());
      const auto* lab = static_cast<const int64_t*>((*b)["label"].data);
      e.labels.insert(e.labels.end(), lab, lab + b->size());
    }
  }
  return e;
}

/// The rest of the epoch through next().
Epoch run_epoch(Loader& l);
/// The rest of the epoch through try_next(), and next() only when it would wait (what
/// the Python binding does); counts the batches try_next gave in `taken_ready`.
Epoch run_epoch_trying(Loader& l, uint64_t* taken_ready);

/// The rest of the epoch by a consumer that keeps its last `keep` batches alive (their
/// slots cannot be reused); returns the samples or rows delivered.
uint64_t drain_holding(Loader& l, size_t keep);

/// The rest of a token epoch: the rows delivered, in order. Checks every batch's slot is
/// page-aligned and each row's first and last token against write_token_dataset's values.
std::vector<int64_t> token_epoch_rows(Loader& l, uint32_t L);

/// Rows a world delivers without drop_last: the final step is trimmed to a multiple of
/// the world size (order.h TailPolicy::kTrim).
uint64_t token_rows_delivered(uint64_t rows, uint64_t batch, uint64_t world);

/// Corrupts the stored bytes of the given global records (CRC mismatch on read).
void corrupt_records(const std::string& dir, const std::vector<uint64_t>& globals);

/// Runs `body` on its own thread; a loader that deadlocks fails here, by name, instead of
/// hanging the suite until ctest's timeout (the process exits 3 after 3 minutes).
void finishes_or_abort(const char* what, const std::function<void()>& body);

/// A read fault the loader's error policy is tested under.
struct FaultCase {
  const char* name;
  FaultPlan plan;
  ErrorCode code;  ///< what the error policy stops with
  bool drops;      ///< whether the fault loses records
};

/// Makes `o` read through a fault-injecting engine (make_faulty_engine) that follows `plan`.
void inject_faults(LoaderOptions& o, const FaultPlan& plan);
/// `o` with OnError::kSkip and no skip budget (max_skipped infinite).
LoaderOptions skip_without_budget(LoaderOptions o);

/// fail, short, corrupt, delay and mixed faults (seed 11; 15 % of reads where they drop).
std::vector<FaultCase> fault_cases();

/// The error policy under a fault that drops records: next() throws the fault's code
/// (any, for the mixed case) with a message naming the record (`where`).
void expect_stop_naming_a_record(Loader& l, const FaultCase& fc, const std::string& where);

}  // namespace stoker::testing
