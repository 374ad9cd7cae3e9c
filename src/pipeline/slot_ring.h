// The loader's slot ring and the run state its producers and its consumer share.
//
// SlotRing owns the batch slots' memory. It is shared with the leases of the batches
// handed out, so a slot lives until the last lease on it is gone, even after the Loader.
// A slot is kFree -> kFilling (a producer claimed it for batch k) -> kReady (every
// sample of k is in) -> kLeased (the consumer handed it out) -> kFree (the lease went).
//
// Run is one epoch's run, from its start or resume point: the batches being filled
// (`jobs`, by batch number), the next batch to get a slot, the first fatal error and the
// stop flag. Producers (producer.h) claim slots in batch order, fill them and call
// finish_one / finish_all; the consumer (take_ready) waits for batch k in order, growing
// the ring when nothing else can move (see wait_ready).
//
// Locking: SlotRing::mu guards the slots' states, Run::jobs, next_start, fatal and
// consumer_waits_for. Two condition variables: `cv` wakes the consumer (a batch ready, a
// failure, stop), `producer_cv` wakes producers (a slot freed, stop), so a batch being
// ready does not wake producers nor a slot coming back the consumer: on a small machine
// every needless wake-up is a context switch taken from the decoders.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/batch.h"
#include "stoker/order.h"

namespace stoker::internal {

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
inline uint64_t nanos(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

struct SlotRing : std::enable_shared_from_this<SlotRing> {
  enum class State { kFree, kFilling, kReady, kLeased };
  struct Slot {
    uint8_t* mem = nullptr;
    State state = State::kFree;
    // Variable-size outputs of the batch in the slot (values, then B + 1 offsets per
    // output), laid out by the consumer as it hands the batch out; reused.
    std::vector<uint8_t> var_mem;
    std::vector<int64_t> var_offsets;
  };
  std::mutex mu;
  std::condition_variable cv;           ///< consumer side: batch ready, run failed, stop
  std::condition_variable producer_cv;  ///< producer side: slot freed, work queued, stop
  uint64_t consumer_waits_for = UINT64_MAX;  ///< the batch the consumer sleeps on, if any
  std::shared_ptr<SlotAllocator> alloc;
  size_t slot_bytes = 0;
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<std::pair<void*, size_t>> blocks;  ///< what `alloc` gave, freed with the ring
  /// Slots producers may claim: the first `limit` (threads="auto"'s slots knob; the rest
  /// stay allocated for a later step up). SIZE_MAX: all.
  size_t limit = SIZE_MAX;
  size_t usable_locked() const { return std::min(limit, slots.size()); }

  ~SlotRing();
  /// mu held (or the ring not shared yet): adds n slots in one block, page-aligned.
  void add_slots_locked(size_t n);
  /// A lease went: slot `id` is free again.
  void give_back(size_t id);
  /// mu held: the first free slot below the limit, or slots.size().
  size_t find_free_locked() const;
  size_t count_locked(State s) const;
};

class RingLease final : public SlotLease {
 public:
  RingLease(std::shared_ptr<SlotRing> ring, size_t id) : ring_(std::move(ring)), id_(id) {}
  ~RingLease() override { ring_->give_back(id_); }

 private:
  std::shared_ptr<SlotRing> ring_;
  size_t id_;
};

/// One batch being filled in one slot.
struct Job {
  uint64_t k = 0;
  size_t slot = 0;
  uint8_t* mem = nullptr;  ///< the slot's memory, taken with the slot (the ring's list may grow meanwhile)
  std::vector<uint64_t> samples;
  std::mutex mu;
  std::exception_ptr error;
  std::atomic<uint64_t> record_bytes{0};  ///< records: added as their reads are queued, less those that fail; tokens: set when claimed
  uint64_t padding = 0;  ///< packed samples: the batch's padding positions (set before any hand-over)
  /// Packed samples: (row in the batch, plan piece) of every record use, grouped by record
  /// (RecordWork::Use::piece indexes it); set before any hand-over.
  std::vector<std::pair<uint32_t, uint64_t>> refs;
  /// Variable-size outputs: var[v][j] is output v's bytes of sample j.
  std::vector<std::vector<std::vector<uint8_t>>> var;
  std::vector<uint8_t> bad;   ///< OnError::kSkip: samples dropped (set before `remaining` hits 0)
  bool any_bad = false;
  uint64_t taken_front = 0;   ///< consumer only: good samples moved into an earlier batch
  bool ready = false;         ///< guarded by SlotRing::mu
  /// Hand-overs left (images: samples; tokens: windows the batch draws from). On a line
  /// of its own: the threads that count it down in turn leave the fields above, which
  /// they only read, cached on every side.
  alignas(64) std::atomic<uint64_t> remaining{0};
  void mark_bad(size_t j);
  void fail(std::exception_ptr e);
};

/// Busy and waiting time of the stages and the sampled queue figures of one run.
struct Counters {
  std::atomic<uint64_t> io_busy_ns{0}, io_wait_ns{0}, io_records{0};
  std::atomic<uint64_t> dec_busy_ns{0}, dec_wait_ns{0}, dec_samples{0};
  std::atomic<uint64_t> consumer_wait_ns{0};
  std::atomic<uint64_t> queue_sum{0}, ready_sum{0}, free_sum{0}, samples_n{0};
  std::atomic<uint64_t> skipped{0};
  std::atomic<uint64_t> io_bytes{0};
  void reset();
};

/// The first `fatal` error wins; the consumer rethrows it. Thread-safe.
struct Run {
  explicit Run(std::shared_ptr<SlotRing> r) : ring(std::move(r)) {}
  std::shared_ptr<SlotRing> ring;
  uint64_t epoch = 0;
  std::unique_ptr<EpochOrder> order;
  std::unique_ptr<RankSchedule> sched;
  std::atomic<bool> stop{false};
  /// Loader::close() was called (never reset): the consumer's wait throws kCancelled.
  std::atomic<bool> closed{false};
  uint64_t next_start = 0;                        ///< the next batch to get a slot (ring->mu)
  std::map<uint64_t, std::shared_ptr<Job>> jobs;  ///< ring->mu
  std::exception_ptr fatal;                       ///< ring->mu
  Counters c;
  uint64_t skip_budget = UINT64_MAX;
  std::function<void(const std::string&)> warn;  ///< LoaderOptions::warning_sink (null: stderr)  ///< OnError::kSkip: samples this run may drop
  size_t var_outputs = 0;  ///< Context::vars.size(): each job gets a list per output

  /// ring->mu held: a new job for batch `k` in free slot `slot` (marked kFilling), with
  /// its sample list sized; not yet in `jobs`.
  std::shared_ptr<Job> claim_locked(uint64_t k, size_t slot);
  /// One hand-over of `job` done; the last marks it ready and wakes the consumer if due.
  void finish_one(Job& job);
  /// finish_one for each, with one wake-up decision for all of them (a direct token
  /// window's batches: waking the consumer for the first few would make it sleep again).
  void finish_all(const std::vector<std::shared_ptr<Job>>& jobs);
  /// Records `e` as the run's failure (the first one wins) and wakes the consumer.
  void fail(std::exception_ptr e);
  /// ring->mu held: whether the consumer, asleep on a batch, should be woken now.
  bool consumer_should_wake_locked() const;

  /// ring->mu held: waits until batch k is ready and returns it; rethrows the run's
  /// failure. Batch k cannot start while no slot is free or filling (the consumer holds
  /// every slot, or under kSkip it is filling batch `delivering` from later ones past a
  /// run of bad samples longer than the ring, which sit ready in the other slots): then
  /// the ring grows by one slot with one warning, or, with `grow` false,
  /// kResourceExhausted says which.
  std::shared_ptr<Job> wait_ready(uint64_t k, std::unique_lock<std::mutex>& lock, bool grow, uint64_t delivering);
  std::atomic<bool> warned_grow{false};
};

}  // namespace stoker::internal
