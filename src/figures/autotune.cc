// The hill climb of threads="auto" (autotune.h).
#include "figures/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "util/platform.h"

namespace stoker::internal {

namespace {
std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * x);
  return buf;
}
std::string rate_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f samples/s", r);
  return buf;
}
}  // namespace

unsigned tune_thread_budget(const CpuPlan& plan, unsigned reserve) {
  return plan.threads > reserve ? plan.threads - reserve : 1u;
}

uint64_t tune_memory_budget(uint64_t memory_limit, const std::string& root) {
  if (memory_limit > 0) return memory_limit;
  const uint64_t cg = cgroup_memory_limit_at(root), ram = mem_total_at(root);
  return (cg > 0 && (ram == 0 || cg < ram) ? cg : ram) / 4;
}

unsigned tune_slots_max(uint64_t budget, size_t slot_bytes, unsigned start) {
  const uint64_t stride = std::max<uint64_t>(1, (slot_bytes + 4095) / 4096 * 4096);
  return static_cast<unsigned>(std::clamp<uint64_t>(budget / stride, start, std::max(start, 64u)));
}

std::string TuneChange::to_string() const {
  char head[96];
  std::snprintf(head, sizeof head, "batch %llu (%.1f s): ", static_cast<unsigned long long>(batch), at_s);
  return head + knob + " " + std::to_string(from) + " -> " + std::to_string(to) + " (" + reason + ")";
}

bool TuneThreadBudget::take() noexcept {
  int left = left_.load();
  while (left > 0)
    if (left_.compare_exchange_weak(left, left - 1)) return true;
  return false;
}

namespace {
void clamp_knob(TuneKnob& k) {
  k.min = std::max(1u, std::min(k.min, k.max));
  k.value = std::clamp(k.value, k.min, std::max(k.min, k.max));
}
}  // namespace

AutoTuner::AutoTuner(TuneKnob threads, TuneKnob slots, AutoTuneOptions options, DiagnoseOptions diagnose)
    : threads_(threads), slots_(slots), opt_(options), dopt_(diagnose) {
  clamp_knob(threads_);
  clamp_knob(slots_);
  settled_ = !threads_.tuned && !slots_.tuned;
}

void AutoTuner::set_queue_depth(TuneKnob depth) {
  depth_ = depth;
  clamp_knob(depth_);
  settled_ = !threads_.tuned && !slots_.tuned && !depth_.tuned;
}

void AutoTuner::share_threads(std::shared_ptr<TuneThreadBudget> budget) {
  budget_ = std::move(budget);
  if (!budget_) return;
  budget_->offer(threads_.max);
  budget_->hold(threads_.value);
}

unsigned AutoTuner::draw(const TuneKnob& k, unsigned from, unsigned to) {
  if (!budget_ || &k != &threads_ || to == from) return to;
  if (to < from) {
    for (unsigned i = to; i < from; ++i) budget_->give();
    return to;
  }
  unsigned got = from;
  while (got < to && budget_->take()) ++got;
  return got;  // as many as the other sources left
}

namespace {
// `b` added to `a`: counts and seconds summed, the means and values "now" taken from b.
FeedFigures add(const FeedFigures& a, const FeedFigures& b) {
  FeedFigures s = b;
  s.wall_s = a.wall_s + b.wall_s;
  s.startup_s = a.wall_s > 0 ? a.startup_s : b.startup_s;  // a run's start-up only counts at the first
  s.samples = a.samples + b.samples;
  s.batches = a.batches + b.batches;
  s.bytes_read = a.bytes_read + b.bytes_read;
  for (auto [sa, sb, ss] : {std::tuple{&a.io, &b.io, &s.io}, std::tuple{&a.decode, &b.decode, &s.decode}}) {
    ss->busy_s = sa->busy_s + sb->busy_s;
    ss->wait_s = sa->wait_s + sb->wait_s;
    ss->items = sa->items + sb->items;
  }
  s.consumer_wait_s = a.consumer_wait_s + b.consumer_wait_s;
  s.consumer_run_delay_s = a.consumer_run_delay_s + b.consumer_run_delay_s;
  s.io_engine_busy_s = a.io_engine_busy_s + b.io_engine_busy_s;
  return s;
}
}  // namespace

std::optional<TuneChange> AutoTuner::update(const FeedFigures& run_cumulative, uint64_t run_batches) {
  if (settled_) return std::nullopt;
  // Runs (epochs) restart the loader's counters; short ones would never fill an
  // interval, so the figures are carried over from one run to the next.
  if (run_last_ && (run_cumulative.wall_s < run_last_->wall_s || run_cumulative.samples < run_last_->samples ||
                    run_batches < run_batches_)) {
    carried_ = add(carried_, *run_last_);
    carried_batches_ += run_batches_;
  }
  run_last_ = run_cumulative;
  run_batches_ = run_batches;
  const FeedFigures cumulative = add(carried_, run_cumulative);
  const uint64_t batches = carried_batches_ + run_batches;
  if (!last_) {
    last_ = cumulative;
    last_batches_ = batches;
    return std::nullopt;
  }
  if (batches - last_batches_ < opt_.interval_batches || cumulative.wall_s - last_->wall_s < opt_.interval_s)
    return std::nullopt;
  const FeedFigures f = FeedFigures::between(*last_, cumulative);
  last_ = cumulative;
  last_batches_ = batches;
  if (!warm_) {
    warm_ = true;  // the run's first interval holds its start-up (threads, first reads)
    return std::nullopt;
  }
  return interval(f, batches);
}

std::optional<TuneChange> AutoTuner::interval(const FeedFigures& f, uint64_t batches) {
  feed_s_ += f.wall_s;
  const double rate = f.samples_per_s();
  verdict_ = diagnose(f, dopt_, verdict_.raw);
  const double threshold = std::max(opt_.min_gain, noise_);
  if (trial_) {
    trial_->samples += static_cast<double>(f.samples);
    trial_->wall_s += f.wall_s;
    if (++trial_->intervals < opt_.trial_intervals) return std::nullopt;
    const Trial t = *trial_;
    trial_.reset();
    const double trial_rate = t.wall_s > 0 ? t.samples / t.wall_s : 0;
    const bool kept =
        t.dir == kUp ? trial_rate > t.base_rate * (1 + threshold) : trial_rate >= t.base_rate * (1 - threshold);
    if (kept) {
      rate_ = trial_rate;
      if (t.dir == kDown) undos(*t.knob, kUp) = opt_.max_undos;  // a step back is final: no way up again
    } else {
      ++undos(*t.knob, t.dir);
      prev_samples_ = prev_wall_s_ = 0;
      TuneChange c;
      c.batch = batches;
      c.at_s = feed_s_;
      c.knob = t.name;
      c.from = t.knob->value;
      c.to = t.from;
      c.reason = "undone: " + rate_text(t.base_rate) + " -> " + rate_text(trial_rate) + " (" +
                 percent(trial_rate / t.base_rate - 1) +
                 (t.dir == kUp ? ", not above" : ", below") + " the noise of " + percent(threshold).substr(1) + ")";
      // Back where it was: a step up's threads return to a shared budget, a step down's is
      // held again (overdrawing it if another source took it meanwhile).
      if (budget_ && t.knob == &threads_) {
        if (t.from < t.knob->value) draw(*t.knob, t.knob->value, t.from);
        else budget_->hold(t.from - t.knob->value);
      }
      t.knob->value = t.from;
      history_.push_back(c);
      return c;
    }
  } else if (history_.empty() && base_rates_.size() < 2) {
    // Two intervals at the starting settings measure the noise a move must beat.
    base_rates_.push_back(rate);
    rate_ = rate;
    if (base_rates_.size() < 2) return std::nullopt;
    const double hi = std::max(base_rates_[0], base_rates_[1]), lo = std::min(base_rates_[0], base_rates_[1]);
    noise_ = hi > 0 ? std::min(opt_.max_noise, 2 * (hi - lo) / hi) : 0;
  }
  if (moves_ >= opt_.max_moves) {
    settled_ = true;
    return std::nullopt;
  }
  std::optional<TuneChange> c;
  const std::string why = verdict_.evidence;
  // The move's base: this interval and the one before when the settings were the same.
  const double base_samples = static_cast<double>(f.samples) + prev_samples_, base_wall = f.wall_s + prev_wall_s_;
  prev_samples_ = static_cast<double>(f.samples);
  prev_wall_s_ = f.wall_s;
  FeedFigures base = f;
  base.samples = static_cast<uint64_t>(base_samples);
  base.wall_s = base_wall;
  // Reads waiting in the engine for room in its queue: its depth holds them back.
  const double full = f.wall_s > 0 ? f.io_queue_full_s / f.wall_s : 0;
  const bool reads_wait = depth_.tuned && full >= opt_.queue_full;
  const std::string waited = "reads waited for room in the IO queue " + std::to_string(static_cast<int>(100 * full)) +
                             "% of the time";
  const double decode_busy = f.decode.busy_frac(f.wall_s);
  switch (verdict_.raw) {
    case Bottleneck::kDecode:
    case Bottleneck::kTokenize:  // the decode threads, tokenising
      // Decoders short of busy whose records come in bursts (a wave of held-back reads
      // completing at once) look behind by their queue; reads that waited say the depth
      // came first, and it costs memory, not cores.
      if (reads_wait && decode_busy < dopt_.busy_high)
        c = move(depth_, "queue_depth", kUp, base, batches,
                 waited + " while the decoders were " + std::to_string(static_cast<int>(100 * decode_busy)) +
                     "% busy: " + why);
      // A consumer that mostly waits (a GPU starving) gets twice the threads a move, until
      // a step up is undone: a big machine reaches its count in a few trials, not dozens.
      if (!c)
        c = move(threads_, "threads", kUp, base, batches, why,
                 f.consumer_wait_frac() >= opt_.starving_wait && undos(threads_, kUp) == 0);
      break;
    case Bottleneck::kStorage:
    case Bottleneck::kNetwork:
      // More reads ahead (slots) would only wait too.
      if (reads_wait)
        c = move(depth_, "queue_depth", kUp, base, batches, waited + ": " + why);
      else if (verdict_.raw == Bottleneck::kStorage)
        c = move(slots_, "slots", kUp, base, batches, why);
      break;
    case Bottleneck::kConsumerStarved:
      c = move(threads_, "threads", kDown, base, batches, why);
      break;
    case Bottleneck::kConsumer:
      if (f.consumer_wait_frac() < opt_.idle_wait)
        c = move(threads_, "threads", kDown, base, batches, "the consumer no longer waits: " + why);
      break;
    default:
      break;
  }
  if (c) {
    quiet_ = 0;
    prev_samples_ = prev_wall_s_ = 0;
    return c;
  }
  if (++quiet_ >= opt_.settle_intervals) settled_ = true;
  return std::nullopt;
}

std::optional<TuneChange> AutoTuner::move(TuneKnob& k, const char* name, Dir dir, const FeedFigures& f,
                                          uint64_t batches, std::string reason, bool double_up) {
  if (!k.tuned || undos(k, dir) >= opt_.max_undos) return std::nullopt;
  if (dir == kUp ? k.value >= k.max : k.value <= k.min) return std::nullopt;
  const bool doubles = k.doubles || (double_up && dir == kUp);
  unsigned to = doubles ? (dir == kUp ? std::min(k.max, 2 * k.value) : std::max(k.min, k.value / 2))
                        : (dir == kUp ? k.value + 1 : k.value - 1);
  to = draw(k, k.value, to);
  if (to == k.value) return std::nullopt;  // the other sources hold the shared budget
  TuneChange c;
  c.batch = batches;
  c.at_s = feed_s_;
  c.knob = name;
  c.from = k.value;
  c.to = to;
  c.reason = std::move(reason);
  trial_ = Trial{&k, name, dir, k.value, f.samples_per_s()};
  k.value = c.to;
  ++moves_;
  history_.push_back(c);
  return c;
}

}  // namespace stoker::internal
