#include "pipeline/slot_ring.h"
#include "util/log.h"

#include <algorithm>
#include <cstdio>

#include "stoker/error.h"

namespace stoker::internal {

SlotRing::~SlotRing() {
  for (auto& [p, bytes] : blocks) alloc->deallocate(p, bytes);
}

// The ring's first slots come in one block: small slots (token batches) then share huge
// pages and one pinned allocation instead of one each. Slots stay page-aligned.
void SlotRing::add_slots_locked(size_t n) {
  if (n == 0) return;
  const size_t stride = (slot_bytes + 4095) / 4096 * 4096;
  auto* block = static_cast<uint8_t*>(alloc->allocate(n * stride));
  blocks.emplace_back(block, n * stride);
  for (size_t i = 0; i < n; ++i) {
    auto s = std::make_unique<Slot>();
    s->mem = block + i * stride;
    slots.push_back(std::move(s));
  }
}

void SlotRing::give_back(size_t id) {
  {
    std::lock_guard<std::mutex> lock(mu);
    slots[id]->state = State::kFree;
  }
  producer_cv.notify_one();  // one producer can use one slot
}

size_t SlotRing::find_free_locked() const {
  for (size_t i = 0; i < usable_locked(); ++i)
    if (slots[i]->state == State::kFree) return i;
  return slots.size();
}

size_t SlotRing::count_locked(State s) const {
  size_t n = 0;
  for (const auto& slot : slots) n += slot->state == s;
  return n;
}

void Job::mark_bad(size_t j) {
  std::lock_guard<std::mutex> lock(mu);
  bad[j] = 1;
  any_bad = true;
}

void Job::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu);
  if (!error) error = std::move(e);
}

void Counters::reset() {
  for (auto* a : {&io_busy_ns, &io_wait_ns, &io_records, &dec_busy_ns, &dec_wait_ns, &dec_samples, &consumer_wait_ns,
                  &queue_sum, &ready_sum, &free_sum, &samples_n, &skipped, &io_bytes})
    a->store(0);
}

std::shared_ptr<Job> Run::claim_locked(uint64_t k, size_t slot) {
  ring->slots[slot]->state = SlotRing::State::kFilling;
  auto job = std::make_shared<Job>();
  job->k = k;
  job->slot = slot;
  job->mem = ring->slots[slot]->mem;
  const uint64_t len = sched->batch_length(k);
  job->samples.resize(len);
  job->bad.assign(len, 0);
  job->var.assign(var_outputs, std::vector<std::vector<uint8_t>>(len));
  return job;
}

bool Run::consumer_should_wake_locked() const {
  const uint64_t k = ring->consumer_waits_for;
  if (k == UINT64_MAX) return false;
  // A consumer that outruns the producers would otherwise be woken for every batch, and
  // on a small machine each wake-up is a context switch taken from the decoders: let it
  // sleep until a run of batches is ready, unless the producers cannot go on without it.
  const size_t want = std::clamp<size_t>(ring->slots.size() / 2, 1, 8);
  size_t run = 0;
  for (auto it = jobs.find(k); it != jobs.end() && it->first == k + run && it->second->ready && run < want; ++it) ++run;
  if (run == 0) return false;
  if (run >= want) return true;
  const bool more_to_start = next_start < sched->num_batches();
  for (const auto& s : ring->slots)
    if (s->state == SlotRing::State::kFilling || (s->state == SlotRing::State::kFree && more_to_start))
      return false;  // more is coming
  return true;  // nothing more comes until the consumer takes some
}

void Run::finish_one(Job& job) {
  if (job.remaining.fetch_sub(1) != 1) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    job.ready = true;
    ring->slots[job.slot]->state = SlotRing::State::kReady;
    wake = consumer_should_wake_locked();
  }
  if (wake) ring->cv.notify_all();
}

void Run::finish_all(const std::vector<std::shared_ptr<Job>>& done) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    for (const auto& job : done) {
      if (job->remaining.fetch_sub(1) != 1) continue;
      job->ready = true;
      ring->slots[job->slot]->state = SlotRing::State::kReady;
    }
    wake = consumer_should_wake_locked();
  }
  if (wake) ring->cv.notify_all();
}

void Run::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(ring->mu);
    if (!fatal) fatal = std::move(e);
  }
  ring->cv.notify_all();
}

std::shared_ptr<Job> Run::wait_ready(uint64_t k, std::unique_lock<std::mutex>& lock, bool grow, uint64_t delivering) {
  for (;;) {
    auto it = jobs.find(k);
    if (it != jobs.end() && it->second->ready) return it->second;
    if (fatal) std::rethrow_exception(fatal);
    if (closed)
      throw_error(ErrorCode::kCancelled, "the Loader was closed (close() on another thread) while next() waited for batch " +
                                             std::to_string(k) + " of epoch " + std::to_string(epoch));
    if (it == jobs.end()) {
      bool can_start = false, all_held = true;
      for (size_t i = 0; i < ring->usable_locked(); ++i) {
        const SlotRing::State s = ring->slots[i]->state;
        can_start |= s == SlotRing::State::kFree || s == SlotRing::State::kFilling;
        all_held &= s == SlotRing::State::kLeased;
      }
      if (!can_start && ring->usable_locked() < ring->slots.size()) {
        ring->limit = ring->usable_locked() + 1;  // a slot the tuner set aside is there to take first
        ring->producer_cv.notify_all();
      } else if (!can_start) {
        const std::string why = all_held ? "every batch slot (" + std::to_string(ring->slots.size()) + ") is held by the caller"
                                         : "skipped samples: filling batch " + std::to_string(delivering) +
                                               " takes more later batches than the ring's " +
                                               std::to_string(ring->slots.size()) + " slots hold";
        if (!grow)
          throw_error(ErrorCode::kResourceExhausted, why + "; " + (all_held ? "release batches" : "raise `slots`") +
                                                         " or enable grow_when_held");
        if (!warned_grow.exchange(true)) {
          const std::string msg = why + "; adding slots so the loader can go on (memory now grows with " +
                                  (all_held ? "the batches kept; release batches to keep it bounded)" : "the run of bad samples)");
          if (warn) warn(msg);
          else log_warn(msg);
        }
        ring->add_slots_locked(1);
        if (ring->limit != SIZE_MAX) ring->limit = ring->slots.size();
        ring->producer_cv.notify_all();
      }
    }
    ring->consumer_waits_for = k;
    ring->cv.wait_for(lock, std::chrono::milliseconds(50));
    ring->consumer_waits_for = UINT64_MAX;
  }
}

}  // namespace stoker::internal
