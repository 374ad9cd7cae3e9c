// The hill climb of threads="auto" (autotune.h).
#include "figures/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

AutoTuner::AutoTuner(TuneKnob threads, TuneKnob slots, AutoTuneOptions options, DiagnoseOptions diagnose)
    : threads_(threads), slots_(slots), opt_(options), dopt_(diagnose) {
  for (TuneKnob* k : {&threads_, &slots_}) {
    k->min = std::max(1u, std::min(k->min, k->max));
    k->value = std::clamp(k->value, k->min, std::max(k->min, k->max));
  }
  settled_ = !threads_.tuned && !slots_.tuned;
}

std::optional<TuneChange> AutoTuner::update(const FeedFigures& cumulative, uint64_t batches) {
  if (settled_) return std::nullopt;
  if (!last_ || cumulative.wall_s < last_->wall_s || cumulative.samples < last_->samples || batches < last_batches_) {
    // The first call, or a new run (epoch): its start-up is not an interval to judge.
    last_ = cumulative;
    last_batches_ = batches;
    warm_ = false;
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
    const Trial t = *trial_;
    trial_.reset();
    const bool kept = t.dir == kUp ? rate > t.base_rate * (1 + threshold) : rate >= t.base_rate * (1 - threshold);
    if (kept) {
      rate_ = rate;
      if (t.dir == kDown) blocked(*t.knob, kUp) = true;  // a step back is final: no way up again
    } else {
      blocked(*t.knob, t.dir) = true;
      TuneChange c;
      c.batch = batches;
      c.at_s = feed_s_;
      c.knob = t.name;
      c.from = t.knob->value;
      c.to = t.from;
      c.reason = "undone: " + rate_text(t.base_rate) + " -> " + rate_text(rate) + " (" + percent(rate / t.base_rate - 1) +
                 (t.dir == kUp ? ", not above" : ", below") + " the noise of " + percent(threshold).substr(1) + ")";
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
  switch (verdict_.raw) {
    case Bottleneck::kDecode:
      c = move(threads_, "threads", kUp, f, batches, why);
      break;
    case Bottleneck::kStorage:
      c = move(slots_, "slots", kUp, f, batches, why);
      break;
    case Bottleneck::kConsumerStarved:
      c = move(threads_, "threads", kDown, f, batches, why);
      break;
    case Bottleneck::kConsumer:
      if (f.consumer_wait_frac() < opt_.idle_wait)
        c = move(threads_, "threads", kDown, f, batches, "the consumer no longer waits: " + why);
      break;
    default:
      break;
  }
  if (c) {
    quiet_ = 0;
    return c;
  }
  if (++quiet_ >= opt_.settle_intervals) settled_ = true;
  return std::nullopt;
}

std::optional<TuneChange> AutoTuner::move(TuneKnob& k, const char* name, Dir dir, const FeedFigures& f,
                                          uint64_t batches, std::string reason) {
  if (!k.tuned || blocked(k, dir)) return std::nullopt;
  if (dir == kUp ? k.value >= k.max : k.value <= k.min) return std::nullopt;
  TuneChange c;
  c.batch = batches;
  c.at_s = feed_s_;
  c.knob = name;
  c.from = k.value;
  c.to = dir == kUp ? k.value + 1 : k.value - 1;
  c.reason = std::move(reason);
  trial_ = Trial{&k, name, dir, k.value, f.samples_per_s()};
  k.value = c.to;
  ++moves_;
  history_.push_back(c);
  return c;
}

}  // namespace stoker::internal
