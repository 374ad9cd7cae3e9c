// What every feed shares: the options checked once, rank and world size resolved once,
// the schedule built one way; and the choice of feed (feed.h).
#include "pipeline/feed.h"

#include <string>

#include "pipeline/dataset_feed.h"
#include "pipeline/mixture_feed.h"
#include "stoker/error.h"

namespace stoker::internal {

void check_options(const LoaderOptions& opt) {
  if (!opt.sources.empty()) {
    if (opt.weights.size() != opt.sources.size())
      throw_error(ErrorCode::kInvalidArgument, "a mixture of " + std::to_string(opt.sources.size()) + " sources needs " +
                                                   std::to_string(opt.sources.size()) + " weights, got " +
                                                   std::to_string(opt.weights.size()));
    if (!opt.source_fields.empty() && opt.source_fields.size() != opt.sources.size())
      throw_error(ErrorCode::kInvalidArgument, "source_fields: one map per source (" +
                                                   std::to_string(opt.sources.size()) + "), got " +
                                                   std::to_string(opt.source_fields.size()));
    if (opt.buckets.enabled())
      throw_error(ErrorCode::kInvalidArgument, "buckets: a mixture cannot be bucketed yet; bucket one dataset");
    if (opt.on_error != OnError::kError)
      throw_error(ErrorCode::kInvalidArgument,
                  "mixtures take on_error 'error' only (a skipped sample would shift a source's positions)");
  }
  if (opt.batch_size == 0) throw_error(ErrorCode::kInvalidArgument, "batch_size must be >= 1");
  if (opt.seq_len > 0 && opt.max_tokens > 0)
    throw_error(ErrorCode::kInvalidArgument, "seq_len packs samples into rows, max_tokens pads them into batches "
                                             "under a token budget: give one of them");
  if (!opt.tokenizer.empty() && opt.seq_len == 0 && opt.max_tokens == 0)
    throw_error(ErrorCode::kInvalidArgument, "tokenizer: text tokenised in the loader is packed into rows of seq_len "
                                             "tokens or padded into batches of max_tokens: give one of them");
  if ((opt.seq_len > 0 || opt.max_tokens > 0) && opt.pack_window == 0)
    throw_error(ErrorCode::kInvalidArgument, "pack_window must be >= 1");
  if (opt.seq_len > 0 && opt.on_error != OnError::kError)
    throw_error(ErrorCode::kInvalidArgument,
                "packed samples (seq_len) take on_error 'error' only: a dropped sample would leave a hole in a row "
                "whose other samples are planned around it");
  if (opt.max_tokens > 0 && opt.on_error != OnError::kError)
    throw_error(ErrorCode::kInvalidArgument,
                "max_tokens batches take on_error 'error' only: a dropped sample would change a planned batch");
  if (opt.max_skipped && !(*opt.max_skipped >= 0))
    throw_error(ErrorCode::kInvalidArgument, "max_skipped = " + std::to_string(*opt.max_skipped) +
                                                 " is not a fraction in [0, 1), a count >= 1 or infinity");
  // Normalisation is (x / 255 - mean) / std: a std of 0 divides by zero, and values
  // above 1 are almost surely given on the pixel scale (0..255) by mistake.
  for (int c = 0; c < 3; ++c) {
    if (!(opt.std[c] > 0) || opt.std[c] > 1)
      throw_error(ErrorCode::kInvalidArgument,
                  "std[" + std::to_string(c) + "] = " + std::to_string(opt.std[c]) +
                      " is not in (0, 1]: pixels are normalised as (x / 255 - mean) / std, so give std on the "
                      "0..1 scale (e.g. 0.229, not 58.4)");
    if (!(opt.mean[c] >= 0) || opt.mean[c] > 1)
      throw_error(ErrorCode::kInvalidArgument,
                  "mean[" + std::to_string(c) + "] = " + std::to_string(opt.mean[c]) +
                      " is not in [0, 1]: pixels are normalised as (x / 255 - mean) / std, so give mean on the "
                      "0..1 scale (e.g. 0.485, not 123.7)");
  }
}

RankInfo resolve_rank(const LoaderOptions& opt) {
  if (opt.rank < 0 && opt.world_size < 0) return rank_from_env();
  if (opt.rank < 0 || opt.world_size < 1 || opt.rank >= opt.world_size)
    throw_error(ErrorCode::kInvalidArgument,
                "rank " + std::to_string(opt.rank) + " / world_size " + std::to_string(opt.world_size) +
                    " is not a valid pair: give both (or neither, for RANK / WORLD_SIZE), world_size >= 1 "
                    "and 0 <= rank < world_size");
  return RankInfo{static_cast<uint32_t>(opt.rank), static_cast<uint32_t>(opt.world_size)};
}

RankSchedule rank_schedule(uint64_t units, const LoaderOptions& opt, RankInfo rank, uint64_t start_consumed,
                           TailPolicy tail) {
  return RankSchedule(units, opt.batch_size, rank.world_size, rank.rank, opt.drop_last, start_consumed, tail);
}

std::unique_ptr<Feed> open_feed(const LoaderOptions& opt, RankInfo rank) {
  if (!opt.sources.empty()) return open_mixture_feed(opt, rank);
  return open_dataset_feed(opt, rank);
}

}  // namespace stoker::internal
