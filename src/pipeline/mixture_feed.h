// The mixture feed: a Loader over a weighted mixture of datasets (LoaderOptions::sources).
//
// The epoch's sequence is MixtureOrder's (stoker/mixture.h): global position p draws
// sample `position` of source `source`'s epoch `source_epoch`. This rank takes the
// positions RankSchedule gives it, as for one dataset, so the sequence does not depend
// on the world size and resumes from OrderState::consumed. Each source is read by a
// dataset feed of its own (dataset_feed.h; world size 1: it runs through its epoch
// order front to back, as the mixture's draws of a source increase with p), and this
// rank copies the samples
// it draws into its batch, passing over the others' (on W ranks a source's rows are
// each unpacked on every rank, as a single token dataset's are, and copied W times).
// Batches carry the outputs every source has (planned from the sources' feeds before
// any batch: each must agree across them in kind, dtype and shape, else
// kInvalidArgument naming it and the two sources) plus "source" int64 [B]; "index" is
// the sample's index in its own source. Dense outputs are copied per sample; text,
// bytes and ragged ones (`__key__` among them) gather each sample's values and offsets;
// cu_seqlens (cumulative) is summed again over the mixture's batch. An output only some
// sources have is left out with one warning naming it. OnError::kSkip is refused.
// With max_tokens, a source's batches are planned by the source (padded_batches.h), one
// unit of its order each: the mixture's positions draw whole batches, handed on as the
// source delivered them (zero-copy, the source's slot held by the mixture's batch) with
// "source" [B] beside them.
//
// Threading: Feed's (feed.h); close() closes every source's feed.
#pragma once

#include <memory>

#include "pipeline/feed.h"

namespace stoker::internal {

/// Opens every one of opt.sources (options already checked: check_options) for `rank`
/// and plans the mixture's outputs. What a source's opening throws is rethrown naming
/// the source.
std::unique_ptr<Feed> open_mixture_feed(const LoaderOptions& opt, RankInfo rank);

}  // namespace stoker::internal
