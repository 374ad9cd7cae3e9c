// The autotuner of threads="auto": a hill climb over the feed's knobs, driven by the
// bottleneck verdict of each interval (verdict.h).
//
// Knobs: decode threads, ring slots and the IO queue depth. Each interval
// (AutoTuneOptions: at least `interval_batches` batches and `interval_s` seconds of feed)
// the tuner reads the interval's figures and, when no trial is pending, moves at most one
// knob by one step:
//   decode bound   threads + 1 (up to the CPU budget, and what a shared budget has left:
//                  the sources of a mixture draw on one), or threads × 2 while the
//                  consumer waits at least `starving_wait` of the interval and no step up
//                  of threads has been undone; but queue depth × 2 first
//                  when reads waited for room in the IO queue (as below) and the
//                  decoders were under busy_high (bursts of completions queue records
//                  for decoders that are not saturated);
//   storage or network bound, with reads waiting for room in the IO queue (at least
//                  `queue_full` of the time): queue depth × 2 (up to its max);
//   storage bound  otherwise (or with the depth untuned) slots + 1 (more reads ahead;
//                  up to the memory budget);
//   consumer bound and the consumer waited (almost) not at all, or consumer starved
//                  of CPU: threads - 1 (extra threads only take the trainer's cores).
// The `trial_intervals` intervals after a move are its trial, judged against the rate of
// the two intervals before it: an upward move is kept only when the feed rate rose by
// more than the noise (the larger of min_gain and twice the relative spread of the rates
// measured before the first move); a step back is kept unless the rate fell by more than
// the noise. A move that is not kept is undone; after `max_undos` of them that knob never
// moves that way again. A knob that stepped back never steps forward again,
// and the tuner stops after max_moves moves or settle_intervals quiet intervals: the
// number of moves is bounded, so it settles and cannot oscillate.
//
// Pure logic on figures: the caller applies the returned change (DatasetFeed), so tests
// drive it with synthetic figures. Not thread-safe: one thread (the consumer's) calls
// update().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/cpu.h"
#include "stoker/verdict.h"

namespace stoker::internal {

/// The CPU budget of the decode threads: the plan's count (affinity mask, cgroup quota)
/// less the cores reserved for the consumer, at least 1.
unsigned tune_thread_budget(const CpuPlan& plan, unsigned reserve);
/// Bytes the ring may take: `memory_limit` when set, else a quarter of the cgroup's
/// memory limit below `root` (util/platform.h), or of the RAM when there is none.
uint64_t tune_memory_budget(uint64_t memory_limit, const std::string& root = "/");
/// Ring slots of `slot_bytes` (page-rounded) that fit in `budget`, at least `start`
/// (the untuned default) and at most 64.
unsigned tune_slots_max(uint64_t budget, size_t slot_bytes, unsigned start);

struct AutoTuneOptions {
  uint64_t interval_batches = 8;  ///< an interval is at least this many batches ...
  double interval_s = 0.4;        ///< ... and at least this long
  double min_gain = 0.03;         ///< a forward move must raise the rate by more than this (and the noise)
  double max_noise = 0.15;        ///< the noise figure is capped here (a very noisy feed still tunes)
  double idle_wait = 0.02;        ///< the consumer waiting less than this fraction: "no longer waits"
  unsigned settle_intervals = 6;  ///< quiet intervals in a row that end the tuning
  unsigned trial_intervals = 2;   ///< intervals a move is measured over before it is judged
  unsigned max_undos = 2;         ///< undone trials that close a knob's direction for good
  unsigned max_moves = 24;        ///< moves (kept or undone) after which the tuner stops
  double queue_full = 0.5;        ///< share of an interval with reads waiting for queue room: the depth binds
  double starving_wait = 0.5;     ///< decode bound and the consumer waiting this share: threads double
};

/// A knob's range and whether it is tuned at all (a user's explicit value is not).
struct TuneKnob {
  unsigned value = 1, min = 1, max = 1;
  bool tuned = false;
  bool doubles = false;  ///< a step doubles or halves the value (the queue depth), else ±1
};

/// Decode threads shared by the tuners of a mixture's sources: each holds the threads it
/// runs, and a tuner moves its threads up only while the budget has one left.
/// Thread-safe (each source's tuner runs on the thread that feeds from that source).
class TuneThreadBudget {
 public:
  /// The budget's size: the first call sets it (the sharers have one CPU plan, so each
  /// offers the same count).
  void offer(unsigned threads) noexcept {
    bool sized = false;
    if (sized_.compare_exchange_strong(sized, true)) left_.fetch_add(static_cast<int>(threads));
  }
  bool take() noexcept;
  void give() noexcept { left_.fetch_add(1); }
  /// Held from the start (may overdraw: every source runs at least one thread).
  void hold(unsigned n) noexcept { left_.fetch_sub(static_cast<int>(n)); }

 private:
  std::atomic<int> left_{0};
  std::atomic<bool> sized_{false};
};

struct TuneChange {
  uint64_t batch = 0;  ///< batches delivered when it was made
  double at_s = 0;     ///< seconds of feed (the sum of the intervals seen) when it was made
  std::string knob;    ///< "threads" | "slots" | "queue_depth"
  unsigned from = 0, to = 0;
  std::string reason;  ///< the verdict and figures behind it, or why a trial was undone
  /// "batch 40 (2.1 s): threads 1 -> 2 (decode bound: ...)"
  std::string to_string() const;
};

class AutoTuner {
 public:
  AutoTuner(TuneKnob threads, TuneKnob slots, AutoTuneOptions options = {}, DiagnoseOptions diagnose = {});
  /// Before the first update: the IO queue depth is a knob too (untuned until then).
  void set_queue_depth(TuneKnob depth);
  /// Before the first update: threads are drawn from `budget`, shared with other tuners
  /// (offered the threads' max as its size); the threads this tuner starts with are held
  /// from it now.
  void share_threads(std::shared_ptr<TuneThreadBudget> budget);
  /// Called after a batch with the cumulative figures of the run and its batches
  /// delivered so far (a new run — counters that went back — carries the last one's
  /// over); at an interval's end returns the change to apply, if any.
  std::optional<TuneChange> update(const FeedFigures& run_cumulative, uint64_t run_batches);
  const TuneKnob& threads() const noexcept { return threads_; }
  const TuneKnob& slots() const noexcept { return slots_; }
  const TuneKnob& queue_depth() const noexcept { return depth_; }
  bool settled() const noexcept { return settled_; }
  double noise() const noexcept { return noise_; }
  const std::vector<TuneChange>& history() const noexcept { return history_; }
  /// The latest interval's verdict (kUnknown before one).
  const Verdict& verdict() const noexcept { return verdict_; }

 private:
  enum Dir { kUp = 0, kDown = 1 };
  struct Trial {
    TuneKnob* knob;
    const char* name;
    Dir dir;
    unsigned from;
    double base_rate;
    double samples = 0, wall_s = 0;  // measured since the move
    unsigned intervals = 0;
  };
  std::optional<TuneChange> interval(const FeedFigures& f, uint64_t batches);
  /// `double_up`: a step up doubles the knob (threads while the consumer starves).
  std::optional<TuneChange> move(TuneKnob& k, const char* name, Dir dir, const FeedFigures& f, uint64_t batches,
                                 std::string reason, bool double_up = false);
  // Trials of a knob's direction undone so far (closed at AutoTuneOptions::max_undos).
  unsigned& undos(const TuneKnob& k, Dir d) {
    return (&k == &threads_ ? undos_threads_ : &k == &slots_ ? undos_slots_ : undos_depth_)[d];
  }
  // The shared budget's side of a change of `k` from `from` to `to` (threads only): the
  // value it can have, `to` or less when the other sources hold the rest (`from`: none).
  unsigned draw(const TuneKnob& k, unsigned from, unsigned to);

  TuneKnob threads_, slots_, depth_;
  std::shared_ptr<TuneThreadBudget> budget_;  // null: the threads' max is the budget
  AutoTuneOptions opt_;
  DiagnoseOptions dopt_;
  std::optional<FeedFigures> run_last_;  // the current run's latest figures
  uint64_t run_batches_ = 0;
  FeedFigures carried_;               // the figures of the runs before it, summed
  uint64_t carried_batches_ = 0;
  std::optional<FeedFigures> last_;  // cumulative figures (over runs) at the last interval's end
  uint64_t last_batches_ = 0;
  bool warm_ = false;                // the first interval (start-up) was seen
  std::vector<double> base_rates_;   // rates before the first move (the noise)
  double noise_ = 0;
  double rate_ = 0;                  // the rate of the settings in force
  std::optional<Trial> trial_;
  unsigned undos_threads_[2] = {0, 0}, undos_slots_[2] = {0, 0}, undos_depth_[2] = {0, 0};
  double prev_samples_ = 0, prev_wall_s_ = 0;  // the interval before, at the same settings (0: none)
  unsigned quiet_ = 0, moves_ = 0;
  bool settled_ = false;
  double feed_s_ = 0;
  Verdict verdict_;
  std::vector<TuneChange> history_;
};

}  // namespace stoker::internal
