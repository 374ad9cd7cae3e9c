// What `stoker bench stage` needs besides a Stager, for either backend: consumer streams,
// a "kernel" that takes a set time, stream timers, and the plain copy loops the ring is
// compared with. Part of stoker_benchlib (the CLI's and the GPU tests' helper library),
// not of libstoker; its CUDA half links the CUDA runtime there. Not a public API.
//
// Threading: one thread at a time per object.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "stoker/stage.h"

namespace stoker::internal {

/// A ring of `slots` buffers of `bytes` from `alloc`, leased like the loader's slots:
/// acquire() blocks while every buffer is held and returns one with the lease that
/// gives it back. The synthetic batch sources of the stage benchmark and tests use it.
class BufferRing {
 public:
  BufferRing(std::shared_ptr<SlotAllocator> alloc, size_t bytes, unsigned slots)
      : state_(std::make_shared<State>()) {
    state_->alloc = std::move(alloc);
    state_->bytes = bytes;
    for (unsigned i = 0; i < slots; ++i) {
      state_->bufs.push_back(static_cast<uint8_t*>(state_->alloc->allocate(bytes)));
      state_->free.push_back(i);
    }
  }
  size_t size() const noexcept { return state_->bufs.size(); }
  uint8_t* buffer(size_t i) const { return state_->bufs.at(i); }
  std::pair<uint8_t*, std::shared_ptr<SlotLease>> acquire() {
    size_t id;
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock, [&] { return !state_->free.empty(); });
      id = state_->free.front();
      state_->free.pop_front();
    }
    return {state_->bufs[id], std::make_shared<Lease>(state_, id)};
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::shared_ptr<SlotAllocator> alloc;
    size_t bytes = 0;
    std::vector<uint8_t*> bufs;
    std::deque<size_t> free;
    ~State() {
      for (uint8_t* p : bufs) alloc->deallocate(p, bytes);
    }
  };
  class Lease final : public SlotLease {
   public:
    Lease(std::shared_ptr<State> s, size_t id) : s_(std::move(s)), id_(id) {}
    ~Lease() override {
      {
        std::lock_guard<std::mutex> lock(s_->mu);
        s_->free.push_back(id_);
      }
      s_->cv.notify_all();
    }

   private:
    std::shared_ptr<State> s_;
    size_t id_;
  };
  std::shared_ptr<State> state_;  // shared with the leases: buffers outlive the ring
};

class StreamTimer {
 public:
  virtual ~StreamTimer() = default;
  virtual void start(void* stream) = 0;  ///< marks the stream's position
  virtual void stop(void* stream) = 0;
  /// Seconds between the marks, once the stream has passed the stop mark (blocks).
  virtual double seconds() = 0;
};

class BenchOps {
 public:
  virtual ~BenchOps() = default;
  /// A consumer stream: a non-blocking cudaStream_t, or a HostStream*.
  virtual void* create_stream() = 0;
  virtual void destroy_stream(void* stream) noexcept = 0;
  virtual void sync_stream(void* stream) = 0;
  /// Queues work that keeps `stream` busy for `us` microseconds (a spin kernel; on the
  /// host backend, a spin on the HostStream's thread).
  virtual void spin(void* stream, double us) = 0;
  virtual std::unique_ptr<StreamTimer> make_timer() = 0;
  /// Seconds for `iters` back-to-back host->device copies of `bytes` on one stream, from
  /// pinned (cudaHostAlloc) or pageable (malloc) memory. Host backend: memcpy.
  virtual double plain_copy_seconds(size_t bytes, int iters, bool pinned) = 0;
};

/// kHost or kCuda (then `device` must be usable; kUnavailable otherwise).
std::unique_ptr<BenchOps> make_bench_ops(StageBackend kind, int device);
#if STOKER_HAS_CUDA
std::unique_ptr<BenchOps> make_cuda_bench_ops(int device);
#endif

}  // namespace stoker::internal
