// What `stoker bench stage` needs besides a Stager, for either backend: consumer streams,
// a "kernel" that takes a set time, stream timers, and the plain copy loops the ring is
// compared with. Lives in the library so the CLI (built without the CUDA runtime) can
// drive a GPU. Not a public API.
//
// Threading: one thread at a time per object.
#pragma once

#include <cstddef>
#include <memory>

#include "stoker/stage.h"

namespace stoker::internal {

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
