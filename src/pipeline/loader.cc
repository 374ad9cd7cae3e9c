// The Loader: the options checked and rank and world size resolved once, one feed
// (pipeline/feed.h) made for them, and what every feed shares: the one-consumer guard,
// close(), and set_epoch()'s rule after load_state().
#include "stoker/loader.h"

#include <atomic>
#include <string>

#include "pipeline/feed.h"
#include "pipeline/loader_metrics.h"
#include "stoker/error.h"
#include "util/enum_names.h"

namespace stoker {

namespace {
constexpr internal::EnumName<OnError> kOnErrorNames[] = {{OnError::kError, "error"}, {OnError::kSkip, "skip"}};
constexpr internal::EnumName<LongSamples> kLongSampleNames[] = {
    {LongSamples::kError, "error"}, {LongSamples::kTruncate, "truncate"}, {LongSamples::kSplit, "split"}};
}  // namespace

const char* on_error_name(OnError e) noexcept { return internal::enum_name(kOnErrorNames, e, "error"); }
OnError on_error_from_name(const std::string& s) { return internal::enum_from_name(kOnErrorNames, s, "on_error"); }
const char* long_samples_name(LongSamples l) noexcept { return internal::enum_name(kLongSampleNames, l, "error"); }
LongSamples long_samples_from_name(const std::string& s) {
  return internal::enum_from_name(kLongSampleNames, s, "long_samples");
}


namespace {
// Marks a consumer call for its duration; a second one meanwhile (another thread) is
// refused instead of interleaving with it.
class ConsumerCall {
 public:
  ConsumerCall(std::atomic<bool>& busy, const char* what) : busy_(busy) {
    if (busy_.exchange(true))
      throw_error(ErrorCode::kInvalidArgument,
                  std::string(what) + " while another thread is inside this Loader's next(), try_next(), set_epoch() "
                                      "or load_state(): a Loader has one consumer thread (use one Loader per thread)");
  }
  ~ConsumerCall() { busy_ = false; }
  ConsumerCall(const ConsumerCall&) = delete;
  ConsumerCall& operator=(const ConsumerCall&) = delete;

 private:
  std::atomic<bool>& busy_;
};
}  // namespace

// Hidden: its members take stoker::internal types, which libstoker.so does not export.
struct __attribute__((visibility("hidden"))) Loader::Impl {
  RankInfo rank;
  std::unique_ptr<internal::Feed> feed;
  std::atomic<bool> in_call{false};  // a consumer call (next, try_next, set_epoch, load_state) runs
  std::atomic<bool> closed{false};   // close() was called
  // load_state() restored a position and no batch was asked for since: set_epoch() of the
  // restored epoch keeps it (the README loop calls set_epoch at every epoch's top).
  bool resume_pending = false;
  MetricsRegistration metrics;  // after the feed: goes first, so no scrape reads a feed being destroyed
  void check_open() const {
    if (closed) throw_error(ErrorCode::kCancelled, "the Loader was closed (close()); it delivers no more batches");
  }
};

Loader::Loader(LoaderOptions options) : impl_(std::make_unique<Impl>()) {
  internal::check_options(options);
  impl_->rank = internal::resolve_rank(options);
  impl_->feed = internal::open_feed(options, impl_->rank);
  internal::Feed* feed = impl_->feed.get();
  impl_->metrics = internal::register_loader_metrics(feed->options(), static_cast<int>(impl_->rank.rank),
                                                     [feed] { return feed->stats(); });
}

Loader::~Loader() = default;

std::optional<Batch> Loader::next() {
  ConsumerCall call(impl_->in_call, "next()");
  impl_->check_open();
  impl_->resume_pending = false;
  return impl_->feed->next(true, nullptr);
}

std::optional<Batch> Loader::try_next(bool* would_wait) {
  ConsumerCall call(impl_->in_call, "try_next()");
  *would_wait = false;
  impl_->check_open();
  impl_->resume_pending = false;
  return impl_->feed->next(false, would_wait);
}

void Loader::set_epoch(uint64_t e) {
  ConsumerCall call(impl_->in_call, "set_epoch()");
  impl_->check_open();
  if (impl_->resume_pending) {
    const OrderState s = state();
    if (e == s.epoch) return;  // the restored position stands
    if (num_batches() != 0)
      throw_error(ErrorCode::kInvalidArgument,
                  "set_epoch(" + std::to_string(e) + ") after load_state() restored epoch " + std::to_string(s.epoch) +
                      " at sample " + std::to_string(s.consumed) + " of " + std::to_string(s.total) +
                      ": starting another epoch would drop the rest of the restored one. Resume the loop at epoch " +
                      std::to_string(s.epoch) + " (set_epoch(" + std::to_string(s.epoch) +
                      ") keeps the restored position), or make a new Loader to start afresh");
    impl_->resume_pending = false;  // the restored epoch was over: the next one starts
  }
  impl_->feed->set_epoch(e);
  impl_->metrics.observe();  // the stopped run's final counts, before the next run restarts them
}

uint64_t Loader::epoch() const noexcept { return impl_->feed->epoch(); }
uint64_t Loader::num_batches() const { return impl_->feed->num_batches(); }
uint64_t Loader::epoch_samples() const noexcept { return impl_->feed->epoch_samples(); }
OrderState Loader::state() const { return impl_->feed->state(); }

void Loader::load_state(const OrderState& s) {
  ConsumerCall call(impl_->in_call, "load_state()");
  impl_->check_open();
  impl_->feed->load_state(s);
  impl_->metrics.observe();  // as in set_epoch()
  impl_->resume_pending = true;
}

void Loader::close() {
  if (impl_->closed.exchange(true)) return;
  impl_->feed->close();
}

LoaderStats Loader::stats() const { return impl_->feed->stats(); }
const LoaderOptions& Loader::options() const noexcept { return impl_->feed->options(); }
int Loader::rank() const noexcept { return static_cast<int>(impl_->rank.rank); }
int Loader::world_size() const noexcept { return static_cast<int>(impl_->rank.world_size); }
const std::vector<std::string>& Loader::class_names() const noexcept { return impl_->feed->class_names(); }
const Schema& Loader::schema() const noexcept { return impl_->feed->schema(); }
uint64_t Loader::generation() const noexcept { return impl_->feed->generation(); }

}  // namespace stoker
