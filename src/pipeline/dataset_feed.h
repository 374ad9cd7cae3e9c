// The feed of one dataset (LoaderOptions::path, local or a URL): one producer
// (producer.h) filling a ring of batch slots (slot_ring.h) for this rank's schedule,
// and the consumer's side, which hands the batches out in order, compacting those that
// lost samples under OnError::kSkip (skip_compaction.h), and reports as it goes.
//
// Opening reads the MANIFEST (once, also for a remote dataset: the cached shard adapter
// hands its copy on), checks the options against the schema, plans the outputs (images:
// field_plan.cc; tokens: token_plan.cc), lays out the ring and makes the producer;
// threads start with the first next(). Each epoch (or resume) is a run: started by the
// first next(), stopped by set_epoch(), load_state(), close() or the destructor, which
// joins every thread.
//
// Threading: Feed's (feed.h).
#pragma once

#include <memory>

#include "figures/autotune.h"
#include "pipeline/feed.h"

namespace stoker::internal {

/// Opens opt.path's dataset for `rank` (options already checked: check_options).
/// Throws what opening the dataset throws, and kInvalidArgument for an option the
/// dataset cannot take (naming it).
/// `threads`: under threads="auto", the decode threads this feed's tuner draws on,
/// shared with other feeds (a mixture's sources); null: its own CPU budget.
std::unique_ptr<Feed> open_dataset_feed(const LoaderOptions& opt, RankInfo rank,
                                        std::shared_ptr<TuneThreadBudget> threads = nullptr);

}  // namespace stoker::internal
