// The primitives the staging state machine is built from, and their two implementations.
//
// StageCore (stage_core.h) owns the ring, the slot states and the threads; it only ever
// talks to the device through a CopyBackend: allocate a device slot, queue work on the
// backend's copy stream (wait for an event, copy, record an event), queue waits/records/
// conversions on a consumer stream, and query or block on an event from the host. The
// CUDA backend (cuda_backend.cu) maps these onto cudaMemcpyAsync / cudaEventRecord /
// cudaStreamWaitEvent on a non-blocking stream; the host backend (host_backend.cc) onto
// memcpy on a HostStream and generation-counting host events. Nothing else differs.
//
// Event semantics (both backends, as CUDA's): an event stands for its most recent
// record; waiting on an event never recorded returns at once; a stream wait captures the
// record current at the time of the call.
//
// Threading: every method is thread-safe; events may be recorded and waited on from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "stoker/batch.h"
#include "stage/host_stream.h"
#include "stoker/stage.h"

namespace stoker::internal {

class Event {
 public:
  virtual ~Event() = default;
};

class CopyBackend {
 public:
  virtual ~CopyBackend() = default;
  virtual StageBackend kind() const noexcept = 0;
  virtual int device() const noexcept = 0;  ///< -1 for host

  /// Device memory for one slot, 256-byte aligned at least. kResourceExhausted.
  virtual void* alloc_slot(size_t bytes) = 0;
  /// Frees a slot; device work touching it must be finished or ordered before.
  virtual void free_slot(void* p) noexcept = 0;
  virtual std::unique_ptr<Event> make_event() = 0;

  /// Makes the calling thread use this backend's device (cudaSetDevice); host: no-op.
  virtual void bind_thread() {}

  // The copy stream.
  virtual void copy_wait(Event& e) = 0;
  virtual void copy_async(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_record(Event& e) = 0;
  /// Keeps the copy stream busy for `seconds` (StagerOptions::copy_limit_bytes_per_s).
  virtual void copy_pause(double seconds) = 0;

  // A consumer's stream (cudaStream_t or HostStream*, see host_stream.h; nullptr as in stage.h).
  virtual void stream_wait(void* stream, Event& e) = 0;
  virtual void stream_record(void* stream, Event& e) = 0;

  // The host side.
  virtual bool query(Event& e) = 0;  ///< the last record has completed
  virtual void sync(Event& e) = 0;   ///< blocks until it has

  /// Runs convert_image / widen_tokens on `stream` for memory of this backend.
  virtual void convert_image(const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type,
                             const float mean[3], const float std[3], void* dst, void* stream) = 0;
  virtual void widen_tokens(const void* src, ElemType src_type, int64_t count, int64_t* dst,
                            void* stream) = 0;
};

std::unique_ptr<CopyBackend> make_host_backend();
#if STOKER_HAS_CUDA
/// Throws kUnavailable (with the CUDA error's name and text) when `device` cannot be used.
std::unique_ptr<CopyBackend> make_cuda_backend(int device);
#endif

}  // namespace stoker::internal
