// One move-only RAII template for every CUDA handle (pinned buffer, device buffer,
// stream, event), plus the single place cudaError_t becomes a stoker::Error.
//
// Destructors never throw and tolerate the runtime shutting down: a handle destroyed
// from a static destructor after cudart began unloading (cudaErrorCudartUnloading) is
// simply dropped. Included by .cu files only (needs cuda_runtime.h).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "stoker/error.h"

namespace stoker::internal {

/// Throws when `e` is not cudaSuccess: "<what>: <cudaGetErrorName>: <cudaGetErrorString>".
/// Out of memory -> kResourceExhausted; no device / no driver -> kUnavailable;
/// invalid values and handles -> kInvalidArgument; the rest -> kUnavailable.
void cuda_check(cudaError_t e, const char* what);

/// The error message cuda_check would produce (for "no CUDA device: ..." reasons).
std::string cuda_error_text(cudaError_t e, const char* what);

/// A move-only owner of a handle `T` freed by `Traits::destroy(T) -> cudaError_t`, with
/// `Traits::null()` as the empty state.
template <class T, class Traits>
class UniqueCudaHandle {
 public:
  UniqueCudaHandle() noexcept : h_(Traits::null()) {}
  explicit UniqueCudaHandle(T h) noexcept : h_(h) {}
  UniqueCudaHandle(UniqueCudaHandle&& o) noexcept : h_(std::exchange(o.h_, Traits::null())) {}
  UniqueCudaHandle& operator=(UniqueCudaHandle&& o) noexcept {
    if (this != &o) reset(std::exchange(o.h_, Traits::null()));
    return *this;
  }
  UniqueCudaHandle(const UniqueCudaHandle&) = delete;
  UniqueCudaHandle& operator=(const UniqueCudaHandle&) = delete;
  ~UniqueCudaHandle() { reset(); }

  T get() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_ != Traits::null(); }
  /// Gives up ownership.
  T release() noexcept { return std::exchange(h_, Traits::null()); }
  void reset(T h = Traits::null()) noexcept {
    T old = std::exchange(h_, h);
    if (old != Traits::null()) {
      cudaError_t e = Traits::destroy(old);
      // cudaErrorCudartUnloading: static destruction after the runtime went away.
      if (e != cudaSuccess) (void)cudaGetLastError();
    }
  }

 private:
  T h_;
};

struct CudaStreamTraits {
  static cudaStream_t null() noexcept { return nullptr; }
  static cudaError_t destroy(cudaStream_t s) noexcept { return cudaStreamDestroy(s); }
};
struct CudaEventTraits {
  static cudaEvent_t null() noexcept { return nullptr; }
  static cudaError_t destroy(cudaEvent_t e) noexcept { return cudaEventDestroy(e); }
};
struct CudaDeviceMemTraits {
  static void* null() noexcept { return nullptr; }
  static cudaError_t destroy(void* p) noexcept { return cudaFree(p); }
};
struct CudaPinnedMemTraits {
  static void* null() noexcept { return nullptr; }
  static cudaError_t destroy(void* p) noexcept { return cudaFreeHost(p); }
};

using CudaStream = UniqueCudaHandle<cudaStream_t, CudaStreamTraits>;
using CudaEvent = UniqueCudaHandle<cudaEvent_t, CudaEventTraits>;
using DeviceBuffer = UniqueCudaHandle<void*, CudaDeviceMemTraits>;
using PinnedBuffer = UniqueCudaHandle<void*, CudaPinnedMemTraits>;

/// Sets the current device for its scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool changed_ = false;
};

}  // namespace stoker::internal
