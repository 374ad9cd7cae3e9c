// StageCore: the staging state machine behind a Stager. It owns a ring of device slots,
// the stoker-h2d copy thread and the stoker-h2d-rel release thread, and hands batches
// out as DeviceBatches whose leases give their slots back.
//
// A device slot cycles through
//   free --(stoker-h2d: waits for its release event, takes a host batch, queues on the
//          copy stream: wait on the release event, copies, record the copy event)-->
//   staged (ready) --(next())--> handed out --(release(stream): release event
//          recorded on the consumer's stream)--> free.
// The slot is put back on the free list as soon as release() is called on the host.
// stoker-h2d (never the consumer) then waits on the host for the release event before
// it takes the next host batch, so a host batch is held only while its copy runs; the
// copy stream's own wait on the event is kept as the device-side ordering guarantee.
// A host batch is held from the copy's issue until its copy event completes; the release
// thread waits for copy events in issue order and drops each host batch right after,
// giving its slot back to the loader while stoker-h2d may be blocked in the source.
//
// Slot memory is allocated once, from the first batch's tensor shapes (a plan of where
// each tensor and its converted form lives), so device addresses are stable across
// epochs. Every later batch must match that plan (names, types, sample shapes) and fit.
//
// Errors: one the source raises, or one staging a batch (a mismatch, a failed copy),
// reaches the consumer in order, from next(); the run is then over until set_epoch().
//
// Threading: next(), set_epoch() and shutdown() on one consumer thread; stats() from any
// thread; give_back(), wait_slot() and release_slot() (a lease's) from any thread.
// Lock order: mu_ only; it is never held while calling the source, the backend or
// destroying a DeviceBatch (whose lease takes mu_ to give its slot back).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "stage/copy_backend.h"
#include "stoker/batch.h"
#include "stoker/buckets.h"
#include "stoker/stage.h"

namespace stoker::internal {

/// A conversion wait() runs on the consumer's stream for one tensor of a slot.
struct ConvJob {
  enum class Kind { kNone, kImage, kWiden };
  Kind kind = Kind::kNone;
  const void* src = nullptr;
  void* dst = nullptr;
  ElemType src_type = ElemType::kUint8, dst_type = ElemType::kUint8;
  int64_t n = 0, h = 0, w = 0, count = 0;
};

class StageCore : public std::enable_shared_from_this<StageCore> {
 public:
  /// `default_samples`: samples a slot holds when StagerOptions::max_batch_samples is 0
  /// (0: the first batch's dim 0). `host_memory`: StagerStats::host_memory. Owned by a
  /// shared_ptr (leases keep it alive); threads start on the first next().
  /// `buckets`: the owned Loader's resolved buckets (LoaderOptions::buckets), whose
  /// image tensors change sample shape from batch to batch: their slots are sized for
  /// the largest bucket. `max_tokens`: the owned Loader's LoaderOptions::max_tokens,
  /// whose batches are [B, L] (and [B]) with B x L <= max_tokens: every dense tensor's
  /// slot holds max_tokens elements, whatever the batch's shape.
  StageCore(std::unique_ptr<CopyBackend> backend, StageSource source, StagerOptions opt, uint64_t default_samples,
            std::string host_memory, std::vector<BucketSize> buckets = {}, uint64_t max_tokens = 0);
  /// shutdown(), then waits for every event of every slot before freeing its memory.
  ~StageCore();
  StageCore(const StageCore&) = delete;
  StageCore& operator=(const StageCore&) = delete;

  CopyBackend& backend() noexcept { return *backend_; }

  /// The next staged batch, nullopt at the end of the run; rethrows the run's error.
  /// kCancelled after shutdown().
  std::optional<DeviceBatch> next();
  /// Stops the threads, drops staged batches, calls the source's set_epoch(e) on this
  /// thread (stoker-h2d stopped) and starts a new run on the next next().
  void set_epoch(uint64_t e);
  /// Stops the threads, drops staged batches (breaking their leases' cycle back to us).
  void shutdown();
  StagerStats stats() const;

  // For DeviceSlotLease.
  /// Puts `slot` back on the free list.
  void give_back(size_t slot);
  /// Makes `stream` wait for the slot's copy; the first wait also queues `jobs` there.
  void wait_slot(size_t slot, const std::vector<ConvJob>& jobs, void* stream, bool first);
  /// Records the slot's release event on `stream`.
  void release_slot(size_t slot, void* stream);

 private:
  using Clock = std::chrono::steady_clock;

  // How one tensor of the source's batches lives in a device slot.
  struct TensorPlan {
    std::string name;
    ElemType dtype = ElemType::kUint8;
    size_t rank = 0;
    std::vector<int64_t> sample_shape;  // shape[1:]
    size_t sample_bytes = 0;            // bytes of one sample (rank 0: of the whole tensor)
    size_t offset = 0, capacity = 0;    // the copied bytes
    ConvJob::Kind conv = ConvJob::Kind::kNone;
    ElemType out_dtype = ElemType::kUint8;
    size_t out_offset = 0, out_capacity = 0;  // the converted tensor
    // Text, byte strings and variable-length arrays stay on the host: their size changes
    // from batch to batch, and the device has no use for strings. The device batch keeps
    // a copy of them.
    bool host = false;
    bool varying = false;  // a bucket-shaped or max_tokens tensor: any sample shape of its rank within capacity
  };
  struct Slot {
    void* mem = nullptr;
    std::unique_ptr<Event> copy_ev, ready_ev, release_ev;
    // Guarded by mu_: copies issued into it, and when the latest handed-out one went.
    uint64_t copies = 0, handed_copy = 0;
    Clock::time_point handed_out{};
  };
  struct Item {
    enum Kind { kBatch, kEnd, kError } kind = kEnd;
    size_t slot = 0;  // kBatch
    DeviceBatch batch;
    std::exception_ptr error;
  };
  struct InFlight {
    size_t slot = 0;
    Batch host;
    Clock::time_point issued;
    uint64_t copy_no = 0;  // the slot's copy count when issued
  };

  void start_locked();
  void stop_threads();
  void drop_ready();
  void deliver(Item it);
  void deliver_error(std::exception_ptr err);
  /// Runs `f` (stoker-h2d), adds the time it took to `waited` (a figure under mu_) and
  /// returns what it threw.
  template <class F>
  std::exception_ptr timed(double& waited, F&& f);
  void copy_loop();
  void finish_copy_loop();
  bool stage(size_t slot, Batch hb);
  void make_plan(const Batch& hb);
  void check(const Batch& hb) const;
  DeviceBatch make_batch(size_t slot, const Batch& hb);
  void release_loop();

  std::unique_ptr<CopyBackend> backend_;
  StageSource source_;
  const StagerOptions opt_;
  const uint64_t default_samples_;
  const std::string host_memory_;
  const std::vector<BucketSize> buckets_;
  const uint64_t max_tokens_;

  std::vector<Slot> slots_;       // fixed size; mem set once by make_plan
  std::vector<TensorPlan> plan_;  // written once by stoker-h2d before any batch exists
  uint64_t samples_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // slot freed, item ready, in-flight copy, stop
  std::deque<size_t> free_;
  std::deque<Item> ready_;
  std::deque<InFlight> inflight_;
  std::exception_ptr async_error_;
  bool started_ = false, stop_ = false, copy_done_ = false, run_over_ = false, shut_ = false;
  std::thread copy_thread_, release_thread_;

  size_t slot_bytes_ = 0;
  uint64_t batches_ = 0, bytes_copied_ = 0, host_released_ = 0;
  double source_wait_s_ = 0, slot_wait_s_ = 0, consumer_wait_s_ = 0, copy_busy_s_ = 0, device_wait_s_ = 0;
  Clock::time_point started_at_{};
};

/// A handed-out device slot (what a DeviceBatch holds). Its destruction puts the slot
/// back on the free list; it keeps the StageCore alive until then.
class DeviceSlotLease {
 public:
  DeviceSlotLease(std::shared_ptr<StageCore> core, size_t slot, std::vector<ConvJob> jobs)
      : core_(std::move(core)), slot_(slot), jobs_(std::move(jobs)) {}
  ~DeviceSlotLease() { core_->give_back(slot_); }
  DeviceSlotLease(const DeviceSlotLease&) = delete;
  DeviceSlotLease& operator=(const DeviceSlotLease&) = delete;

  void wait(void* stream, bool first) { core_->wait_slot(slot_, jobs_, stream, first); }
  void release(void* stream) { core_->release_slot(slot_, stream); }

 private:
  std::shared_ptr<StageCore> core_;
  size_t slot_;
  std::vector<ConvJob> jobs_;
};

}  // namespace stoker::internal
