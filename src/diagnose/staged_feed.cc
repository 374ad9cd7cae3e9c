// The verdict on a staged feed: the Stager's copy stream as a station, and the
// trainer's wait on the Stager (see include/stoker/diagnose.h).
#include <algorithm>

#include "stoker/diagnose.h"
#include "stoker/error.h"

namespace stoker {

FeedFigures staged_figures(const LoaderStats& s, const StagerStats& staged) {
  FeedFigures f = FeedFigures::from(s);
  if (staged.wall_s <= 0) return f;
  const double scale = f.wall_s / staged.wall_s;
  StageStats copy;
  copy.threads = 1;
  copy.busy_s = std::min(staged.copy_busy_s, staged.wall_s) * scale;
  copy.wait_s = std::min(staged.source_wait_s, staged.wall_s) * scale;
  copy.items = staged.batches;
  f.copy = copy;
  // The trainer waits on the device when it queued work behind a copy still in flight,
  // and on the host when next() finds nothing staged. A host thread that runs ahead of
  // its GPU also blocks in next() while every device slot is still being read: that is
  // the consumer's own pace (the copy thread waited for the slots), not a wait on input.
  const double host_wait = std::max(0.0, staged.consumer_wait_s - staged.slot_wait_s);
  f.consumer_wait_s = std::min(host_wait + staged.device_wait_s, staged.wall_s) * scale;
  return f;
}

StagedFeed diagnose_staged(Stager& stager) {
  const Loader* loader = stager.loader();
  if (!loader)
    throw_error(ErrorCode::kInvalidArgument, "diagnose_staged: the Stager stages a raw source, not a Loader");
  StagedFeed feed;
  feed.loader = loader->stats();
  feed.stager = stager.stats();
  const FeedFigures f = staged_figures(feed.loader, feed.stager);
  feed.loader.consumer_wait_s = f.consumer_wait_s;
  feed.verdict = diagnose(f);
  record_verdict(feed.loader, feed.verdict);
  return feed;
}

}  // namespace stoker
