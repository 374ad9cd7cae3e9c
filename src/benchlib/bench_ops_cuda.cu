// The CUDA backend's BenchOps: non-blocking streams, the spin kernel, event timers, and
// the plain cudaMemcpyAsync loops (pinned and pageable) the ring is measured against.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "benchlib/bench_ops.h"
#include "stage/convert_kernels.h"
#include "stage/cuda_handle.h"

namespace stoker::internal {
namespace {

class CudaTimer final : public StreamTimer {
 public:
  explicit CudaTimer(int device) : device_(device) {
    DeviceGuard g(device_);
    cudaEvent_t a = nullptr, b = nullptr;
    cuda_check(cudaEventCreate(&a), "cudaEventCreate (timer)");
    t0_.reset(a);
    cuda_check(cudaEventCreate(&b), "cudaEventCreate (timer)");
    t1_.reset(b);
  }
  void start(void* stream) override {
    cuda_check(cudaEventRecord(t0_.get(), static_cast<cudaStream_t>(stream)), "cudaEventRecord (timer)");
  }
  void stop(void* stream) override {
    cuda_check(cudaEventRecord(t1_.get(), static_cast<cudaStream_t>(stream)), "cudaEventRecord (timer)");
  }
  double seconds() override {
    cuda_check(cudaEventSynchronize(t1_.get()), "cudaEventSynchronize (timer)");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, t0_.get(), t1_.get()), "cudaEventElapsedTime");
    return ms / 1000.0;
  }

 private:
  int device_;
  CudaEvent t0_, t1_;
};

class CudaBenchOps final : public BenchOps {
 public:
  explicit CudaBenchOps(int device) : device_(device) { cuda_check(cudaSetDevice(device_), "cudaSetDevice"); }

  void* create_stream() override {
    DeviceGuard g(device_);
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (consumer)");
    return s;
  }
  void destroy_stream(void* stream) noexcept override { CudaStream owned(static_cast<cudaStream_t>(stream)); }
  void sync_stream(void* stream) override {
    cuda_check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  }
  void spin(void* stream, double us) override { launch_spin(device_, us, stream); }
  std::unique_ptr<StreamTimer> make_timer() override { return std::make_unique<CudaTimer>(device_); }

  double plain_copy_seconds(size_t bytes, int iters, bool pinned) override {
    DeviceGuard g(device_);
    PinnedBuffer pin;
    void* pageable = nullptr;
    void* src = nullptr;
    if (pinned) {
      void* p = nullptr;
      cuda_check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), "cudaHostAlloc (bench)");
      pin.reset(p);
      src = p;
    } else {
      pageable = std::malloc(bytes);
      if (!pageable) throw_error(ErrorCode::kResourceExhausted, "bench: malloc failed");
      src = pageable;
    }
    std::memset(src, 0x5A, bytes);
    DeviceBuffer dst;
    {
      void* d = nullptr;
      cuda_check(cudaMalloc(&d, bytes), "cudaMalloc (bench)");
      dst.reset(d);
    }
    CudaStream s;
    {
      cudaStream_t st = nullptr;
      cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate (bench)");
      s.reset(st);
    }
    CudaTimer timer(device_);
    // One untimed copy: first-touch costs out of the measurement.
    cuda_check(cudaMemcpyAsync(dst.get(), src, bytes, cudaMemcpyHostToDevice, s.get()), "cudaMemcpyAsync (bench)");
    timer.start(s.get());
    for (int i = 0; i < iters; ++i)
      cuda_check(cudaMemcpyAsync(dst.get(), src, bytes, cudaMemcpyHostToDevice, s.get()), "cudaMemcpyAsync (bench)");
    timer.stop(s.get());
    const double secs = timer.seconds();
    std::free(pageable);
    return secs;
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<BenchOps> make_cuda_bench_ops(int device) {
  if (device < 0 || device >= cuda_device_count())
    throw_error(ErrorCode::kUnavailable, "no CUDA device " + std::to_string(device) + ": " + cuda_unavailable_reason());
  return std::make_unique<CudaBenchOps>(device);
}

}  // namespace stoker::internal
