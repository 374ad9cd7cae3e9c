// The host backend's BenchOps, and the factory.
#include "benchlib/bench_ops.h"
#include "stage/host_stream.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "stoker/error.h"

namespace stoker::internal {
namespace {

using Clock = std::chrono::steady_clock;

void spin_for(double us) {
  const auto end = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1000));
  while (Clock::now() < end) {
  }
}

class HostTimer final : public StreamTimer {
 public:
  void start(void* stream) override { mark(stream, &t0_); }
  void stop(void* stream) override {
    stream_ = static_cast<HostStream*>(stream);
    mark(stream, &t1_);
  }
  double seconds() override {
    if (stream_) stream_->synchronize();
    std::lock_guard<std::mutex> lock(mu_);
    return std::chrono::duration<double>(t1_ - t0_).count();
  }

 private:
  void mark(void* stream, Clock::time_point* t) {
    auto set = [this, t] {
      std::lock_guard<std::mutex> lock(mu_);
      *t = Clock::now();
    };
    if (stream) static_cast<HostStream*>(stream)->enqueue(set);
    else set();
  }
  std::mutex mu_;
  Clock::time_point t0_{}, t1_{};
  HostStream* stream_ = nullptr;
};

class HostBenchOps final : public BenchOps {
 public:
  void* create_stream() override { return new HostStream("stoker-consumer"); }
  void destroy_stream(void* stream) noexcept override { delete static_cast<HostStream*>(stream); }
  void sync_stream(void* stream) override {
    if (stream) static_cast<HostStream*>(stream)->synchronize();
  }
  void spin(void* stream, double us) override {
    if (stream) static_cast<HostStream*>(stream)->enqueue([us] { spin_for(us); });
    else spin_for(us);
  }
  std::unique_ptr<StreamTimer> make_timer() override { return std::make_unique<HostTimer>(); }
  double plain_copy_seconds(size_t bytes, int iters, bool pinned) override {
    // "Pinned" on the host backend is the page-aligned slot memory; pageable is malloc.
    void* src = nullptr;
    if (pinned) {
      if (posix_memalign(&src, 4096, bytes ? bytes : 1) != 0)
        throw_error(ErrorCode::kResourceExhausted, "bench: cannot allocate " + std::to_string(bytes) + " bytes");
    } else {
      src = std::malloc(bytes ? bytes : 1);
      if (!src) throw_error(ErrorCode::kResourceExhausted, "bench: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    void* dst = nullptr;
    if (posix_memalign(&dst, 4096, bytes ? bytes : 1) != 0) {
      std::free(src);
      throw_error(ErrorCode::kResourceExhausted, "bench: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    std::memset(src, 0x5A, bytes);
    std::memset(dst, 0, bytes);
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) std::memcpy(dst, src, bytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    volatile uint8_t sink = static_cast<uint8_t*>(dst)[bytes / 2];
    (void)sink;
    std::free(src);
    std::free(dst);
    return s;
  }
};

}  // namespace

std::unique_ptr<BenchOps> make_bench_ops(StageBackend kind, int device) {
  if (kind == StageBackend::kCuda) {
#if STOKER_HAS_CUDA
    return make_cuda_bench_ops(device);
#else
    (void)device;
    throw_error(ErrorCode::kUnavailable, "no CUDA device: stoker was built without CUDA");
#endif
  }
  return std::make_unique<HostBenchOps>();
}

}  // namespace stoker::internal
