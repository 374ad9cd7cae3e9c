#include "pipeline/skip_compaction.h"
#include "util/log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace stoker::internal {
namespace {

void move_sample(const Context& ctx, Job& from, uint64_t j, Job& to, uint64_t i) {
  if (&from == &to && i == j) return;
  for (size_t t = 0; t < ctx.tensors.size(); ++t) {
    const size_t n = ctx.tensors[t].item_bytes;
    std::memmove(ctx.tensor_ptr(to, static_cast<int>(t)) + i * n, ctx.tensor_ptr(from, static_cast<int>(t)) + j * n, n);
  }
  for (size_t v = 0; v < ctx.vars.size(); ++v) to.var[v][i] = std::move(from.var[v][j]);
}

}  // namespace

void Context::sample_failed(Run& run, Job& job, uint32_t j, std::exception_ptr e,
                            const ShardFailure* shard_failure) const {
  if (opt->on_error == OnError::kError) {
    job.fail(std::move(e));
    return;
  }
  job.mark_bad(j);
  const uint64_t skipped = ++run.c.skipped;
  std::string what = "unknown error";
  if (shard_failure) {
    // One line per shard: a shard that cannot be opened would otherwise name each of its
    // records, hundreds of lines for one cause.
    // The reason names the shard already, when it comes from opening it.
    const std::string shard = dataset->shard_path(shard_failure->shard);
    what = "every record of " + shard + ": " +
           (shard_failure->reason.rfind(shard + ": ", 0) == 0 ? shard_failure->reason.substr(shard.size() + 2)
                                                               : shard_failure->reason);
  } else {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = ex.what();
    } catch (...) {
    }
  }
  std::lock_guard<std::mutex> lock(skip_log_mu);
  if (skip_logged.insert(what).second) log_warn("skipping " + what + " (on_error=skip)");
  if (skip_first.size() < 3 && std::find(skip_first.begin(), skip_first.end(), what) == skip_first.end())
    skip_first.push_back(what);
  if (skipped == run.skip_budget + 1) {
    // Past the budget a damaged dataset is more likely than a few bad samples: an epoch
    // that silently drops a whole shard trains on something else than intended.
    std::string first;
    for (const std::string& r : skip_first) first += (first.empty() ? "" : "; ") + r;
    run.fail(std::make_exception_ptr(Error(
        ErrorCode::kDataLoss,
        "on_error=skip: " + std::to_string(skipped) + " samples skipped in this epoch, more than max_skipped allows (" +
            std::to_string(run.skip_budget) + "); first reasons: " + first +
            ". Repair or re-pack the dataset, or raise max_skipped")));
  }
}

bool needs_compaction(const LoaderOptions& opt, const Job& job, uint64_t n) {
  return job.any_bad || job.taken_front > 0 || (opt.on_error == OnError::kSkip && n < opt.batch_size);
}

Compacted compact_batch(const Context& ctx, Run& run, const std::shared_ptr<Job>& job,
                        std::unique_lock<std::mutex>& lock) {
  Compacted c;
  c.through_k = job->k;
  c.through_j = job->samples.size();  // its own samples all used or dropped
  uint64_t n = 0, skip = job->taken_front;
  for (uint64_t j = 0; j < job->samples.size(); ++j) {
    if (job->bad[j]) continue;
    if (skip) { --skip; continue; }
    move_sample(ctx, *job, j, *job, n++);
  }
  const uint64_t B = ctx.opt->batch_size, nb = run.sched->num_batches();
  const bool fill_from_later = ctx.rank.world_size == 1;
  for (uint64_t q = job->k + 1; fill_from_later && n < B && q < nb; ++q) {
    std::shared_ptr<Job> next = run.wait_ready(q, lock, ctx.opt->grow_when_held, job->k);
    uint64_t skip_q = next->taken_front;
    for (uint64_t j = 0; j < next->samples.size() && n < B; ++j) {
      if (next->bad[j]) continue;
      if (skip_q) { --skip_q; continue; }
      move_sample(ctx, *next, j, *job, n++);
      next->taken_front++;
      c.through_k = q;
      c.through_j = j + 1;
    }
    // `next` used up: keep filling from the one after.
  }
  c.n = n;
  return c;
}

}  // namespace stoker::internal
