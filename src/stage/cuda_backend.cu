// The CUDA copy backend, the pinned slot allocator and the device queries.
//
// Copies run on one non-blocking stream per Stager (never synchronising with the legacy
// default stream); copy and release events are created with cudaEventDisableTiming |
// cudaEventBlockingSync, so the release thread's cudaEventSynchronize sleeps instead of
// spinning a core the decoders could use.
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "stage/convert_kernels.h"
#include "stage/copy_backend.h"
#include "stage/cuda_handle.h"
#include "stoker/error.h"

namespace stoker {
namespace internal {

std::string cuda_error_text(cudaError_t e, const char* what) {
  return std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
}

void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
  ErrorCode code = ErrorCode::kUnavailable;
  switch (e) {
    case cudaErrorMemoryAllocation: code = ErrorCode::kResourceExhausted; break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidConfiguration:
      code = ErrorCode::kInvalidArgument;
      break;
    default: break;
  }
  throw Error(code, cuda_error_text(e, what));
}

DeviceGuard::DeviceGuard(int device) {
  cuda_check(cudaGetDevice(&prev_), "cudaGetDevice");
  if (prev_ != device) {
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_ && cudaSetDevice(prev_) != cudaSuccess) (void)cudaGetLastError();
}

namespace {

class CudaEventBox final : public Event {
 public:
  CudaEvent ev;
};

cudaEvent_t ev_of(Event& e) { return static_cast<CudaEventBox&>(e).ev.get(); }

class CudaBackend final : public CopyBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    DeviceGuard guard(device_);
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (copy stream)");
    copy_.reset(s);
  }
  ~CudaBackend() override {
    // Queued copies finish before the stream goes (cudaStreamDestroy does not wait).
    if (copy_ && cudaStreamSynchronize(copy_.get()) != cudaSuccess) (void)cudaGetLastError();
  }

  StageBackend kind() const noexcept override { return StageBackend::kCuda; }
  int device() const noexcept override { return device_; }

  void* alloc_slot(size_t bytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc (device slot)");
    return p;
  }
  void free_slot(void* p) noexcept override {
    DeviceBuffer owned(p);  // cudaFree, tolerant of runtime shutdown
  }
  std::unique_ptr<Event> make_event() override {
    DeviceGuard guard(device_);
    auto box = std::make_unique<CudaEventBox>();
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync), "cudaEventCreate");
    box->ev.reset(e);
    return box;
  }
  void bind_thread() override { cuda_check(cudaSetDevice(device_), "cudaSetDevice (stoker-h2d)"); }

  void copy_wait(Event& e) override {
    cuda_check(cudaStreamWaitEvent(copy_.get(), ev_of(e), 0), "cudaStreamWaitEvent (copy stream)");
  }
  void copy_async(void* dst, const void* src, size_t bytes) override {
    cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_.get()), "cudaMemcpyAsync (H2D)");
  }
  void copy_pause(double seconds) override {
    // A host function on the stream: the stream (and so the copies behind it) waits.
    auto* s = new double(seconds);
    cuda_check(cudaLaunchHostFunc(
                   copy_.get(),
                   [](void* p) {
                     std::unique_ptr<double> d(static_cast<double*>(p));
                     std::this_thread::sleep_for(std::chrono::duration<double>(*d));
                   },
                   s),
               "cudaLaunchHostFunc (copy pause)");
  }
  void copy_record(Event& e) override {
    cuda_check(cudaEventRecord(ev_of(e), copy_.get()), "cudaEventRecord (copy stream)");
  }
  void stream_wait(void* stream, Event& e) override {
    cuda_check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev_of(e), 0), "cudaStreamWaitEvent");
  }
  void stream_record(void* stream, Event& e) override {
    cuda_check(cudaEventRecord(ev_of(e), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  }
  bool query(Event& e) override {
    const cudaError_t r = cudaEventQuery(ev_of(e));
    if (r == cudaErrorNotReady) return false;
    cuda_check(r, "cudaEventQuery");
    return true;
  }
  void sync(Event& e) override { cuda_check(cudaEventSynchronize(ev_of(e)), "cudaEventSynchronize"); }

  void convert_image(const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type, const float mean[3],
                     const float std[3], void* dst, void* stream) override {
    launch_convert_image(device_, src, n, h, w, dst_type, mean, std, dst, stream);
  }
  void widen_tokens(const void* src, ElemType src_type, int64_t count, int64_t* dst, void* stream) override {
    launch_widen_tokens(device_, src, src_type, count, dst, stream);
  }

 private:
  int device_;
  CudaStream copy_;
};

class PinnedSlotAllocator final : public SlotAllocator {
 public:
  explicit PinnedSlotAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw_error(ErrorCode::kResourceExhausted,
                  "cannot allocate a pinned batch slot of " + std::to_string(bytes) +
                      " bytes: " + cuda_error_text(e, "cudaHostAlloc") + " (check ulimit -l / memlock)");
    }
    return p;  // page-aligned: cudaHostAlloc maps whole pages
  }
  void deallocate(void* p, size_t) noexcept override { PinnedBuffer owned(p); }
  const char* name() const noexcept override { return "pinned"; }

 private:
  int device_;
};

struct DeviceCount {
  int count = 0;
  std::string reason;
};

const DeviceCount& device_count_once() {
  static const DeviceCount dc = [] {
    DeviceCount d;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      d.reason = cuda_error_text(e, "cudaGetDeviceCount");
    } else if (n == 0) {
      d.reason = "cudaGetDeviceCount: no devices";
    } else {
      d.count = n;
    }
    return d;
  }();
  return dc;
}

}  // namespace

std::unique_ptr<CopyBackend> make_cuda_backend(int device) {
  const DeviceCount& dc = device_count_once();
  if (dc.count == 0) throw_error(ErrorCode::kUnavailable, "no CUDA device: " + dc.reason);
  if (device < 0 || device >= dc.count)
    throw_error(ErrorCode::kInvalidArgument, "CUDA device " + std::to_string(device) + " does not exist (" +
                                                 std::to_string(dc.count) + " visible)");
  return std::make_unique<CudaBackend>(device);
}

}  // namespace internal

int cuda_device_count() noexcept {
  try {
    return internal::device_count_once().count;
  } catch (...) {
    return 0;
  }
}

std::string cuda_unavailable_reason() { return internal::device_count_once().reason; }

std::optional<std::string> cuda_pci_bus_id(int device) {
  if (device < 0 || device >= cuda_device_count()) return std::nullopt;
  char buf[64] = {};
  if (cudaDeviceGetPCIBusId(buf, sizeof buf, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  std::string id(buf);
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id;  // sysfs spells it lower case: /sys/bus/pci/devices/0000:17:00.0
}

std::shared_ptr<SlotAllocator> pinned_slot_allocator(int device) {
  if (device < 0 || device >= cuda_device_count()) return host_slot_allocator();
  return std::make_shared<internal::PinnedSlotAllocator>(device);
}

}  // namespace stoker
