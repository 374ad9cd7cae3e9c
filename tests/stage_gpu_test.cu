// Staging on the CUDA backend: copies byte-exact, events ordering the consumer's stream,
// the conversion kernels against the CPU reference. Skipped (with the reason) when
// cudaGetDeviceCount fails or finds no device. ctest label: gpu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <condition_variable>
#include <random>
#include <vector>

#include "stage/cuda_handle.h"
#include "stoker/error.h"
#include "benchlib/bench_ops.h"
#include "stoker/stage.h"
#include "util/convert.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using internal::cuda_check;

#define STOKER_REQUIRE_CUDA()                                                                     \
  do {                                                                                             \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason(); \
  } while (0)

uint8_t pattern(uint64_t step, size_t i) { return static_cast<uint8_t>((step * 37 + i * 11 + (i >> 9)) & 0xFF); }

// Pinned host batches ("data" uint8 {1, bytes}) from a ring of `slots` buffers; next()
// blocks while every buffer is held, as the loader's does.
class PinnedSource {
 public:
  PinnedSource(int device, size_t bytes, unsigned slots, uint64_t total)
      : ring_(pinned_slot_allocator(device), bytes, slots), bytes_(bytes), total_(total) {}
  StageSource source() { return StageSource{[this] { return next(); }, {}}; }

 private:
  std::optional<Batch> next() {
    if (step_ == total_) return std::nullopt;
    auto [p, lease] = ring_.acquire();
    for (size_t i = 0; i < bytes_; ++i) p[i] = pattern(step_, i);
    std::vector<TensorView> t(1);
    t[0] = TensorView{"data", p, {1, static_cast<int64_t>(bytes_)}, ElemType::kUint8, -1};
    return Batch(std::move(t), std::move(lease), 0, step_++, 1);
  }

  internal::BufferRing ring_;
  size_t bytes_;
  uint64_t total_, step_ = 0;
};

struct Stream {
  internal::CudaStream s;
  Stream() {
    cudaStream_t st = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    s.reset(st);
  }
  cudaStream_t get() const { return s.get(); }
};

TEST(StageGpu, CopiesAreByteExact) {
  STOKER_REQUIRE_CUDA();
  const size_t bytes = (1 << 20) + 123;
  for (unsigned slots : {1u, 2u, 3u, 5u}) {
    SCOPED_TRACE(slots);
    PinnedSource src(0, bytes, 3, 24);
    StagerOptions o;
    o.backend = StageBackend::kCuda;
    o.device = 0;
    o.device_slots = slots;
    Stager st(src.source(), o);
    ASSERT_EQ(st.backend(), StageBackend::kCuda);
    Stream s;
    std::vector<uint8_t> back(bytes);
    uint64_t k = 0;
    while (auto b = st.next()) {
      ASSERT_EQ(b->step(), k);
      b->wait(s.get());
      const TensorView& d = (*b)["data"];
      ASSERT_EQ(d.device, 0);
      cuda_check(cudaMemcpyAsync(back.data(), d.data, bytes, cudaMemcpyDeviceToHost, s.get()), "D2H");
      b->release(s.get());
      cuda_check(cudaStreamSynchronize(s.get()), "sync");
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], pattern(k, i)) << "byte " << i << " of batch " << k;
      ++k;
    }
    EXPECT_EQ(k, 24u);
  }
}

// Spins `ns` (one thread), then sums the bytes: a slow reader of the slot.
__global__ void slow_sum(const uint8_t* p, size_t n, unsigned long long ns, unsigned long long* out) {
  if (threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
  }
  __syncthreads();
  unsigned long long local = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) local += p[i];
  atomicAdd(out, local);
}

TEST(StageGpu, EventsOrderTheConsumerAndTheSlotReuse) {
  STOKER_REQUIRE_CUDA();
  // One device slot and a kernel that reads it slowly: a copy that did not wait for the
  // kernel's release (or a kernel that did not wait for its copy) changes the sums.
  const size_t bytes = 256 << 10;
  const uint64_t n = 40;
  PinnedSource src(0, bytes, 4, n);
  StagerOptions o;
  o.backend = StageBackend::kCuda;
  o.device = 0;
  o.device_slots = 1;
  Stager st(src.source(), o);
  Stream s;
  unsigned long long* sums = nullptr;
  cuda_check(cudaMalloc(&sums, n * sizeof(unsigned long long)), "cudaMalloc");
  internal::DeviceBuffer owned(sums);
  cuda_check(cudaMemsetAsync(sums, 0, n * sizeof(unsigned long long), s.get()), "memset");
  uint64_t k = 0;
  while (auto b = st.next()) {
    b->wait(s.get());
    slow_sum<<<1, 256, 0, s.get()>>>(static_cast<const uint8_t*>((*b)["data"].data), bytes, 200000, sums + k);
    cuda_check(cudaGetLastError(), "launch");
    b->release(s.get());
    ++k;
  }
  ASSERT_EQ(k, n);
  std::vector<unsigned long long> got(n);
  cuda_check(cudaMemcpyAsync(got.data(), sums, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s.get()), "D2H");
  cuda_check(cudaStreamSynchronize(s.get()), "sync");
  for (uint64_t j = 0; j < n; ++j) {
    unsigned long long want = 0;
    for (size_t i = 0; i < bytes; ++i) want += pattern(j, i);
    EXPECT_EQ(got[j], want) << "batch " << j;
  }
}

TEST(StageGpu, ConversionKernelsMatchTheCpuReference) {
  STOKER_REQUIRE_CUDA();
  const int64_t n = 3, h = 37, w = 29;
  const size_t px = static_cast<size_t>(n * h * w * 3);
  const std::vector<uint8_t> img = testing::random_bytes(px, 17);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  Stream s;
  uint8_t* dsrc = nullptr;
  cuda_check(cudaMalloc(&dsrc, px), "cudaMalloc");
  internal::DeviceBuffer own_src(dsrc);
  cuda_check(cudaMemcpy(dsrc, img.data(), px, cudaMemcpyHostToDevice), "H2D");
  void* ddst = nullptr;
  cuda_check(cudaMalloc(&ddst, px * 4), "cudaMalloc");
  internal::DeviceBuffer own_dst(ddst);
  TensorView v{"image", dsrc, {n, h, w, 3}, ElemType::kUint8, 0};
  for (ElemType dt : {ElemType::kFloat32, ElemType::kFloat16, ElemType::kBFloat16}) {
    SCOPED_TRACE(elem_type_name(dt));
    const size_t out = px * elem_size(dt);
    std::vector<uint8_t> want(out), got(out);
    internal::convert_image_cpu(img.data(), n, h, w, dt, mean, sd, want.data());
    convert_image(v, dt, mean, sd, ddst, s.get());
    cuda_check(cudaMemcpyAsync(got.data(), ddst, out, cudaMemcpyDeviceToHost, s.get()), "D2H");
    cuda_check(cudaStreamSynchronize(s.get()), "sync");
    EXPECT_EQ(std::memcmp(got.data(), want.data(), out), 0);
  }
  // Tokens: uint16, uint32, int32 -> int64.
  const std::vector<uint8_t> raw = testing::random_bytes(4096, 3);
  for (ElemType tt : {ElemType::kUint16, ElemType::kUint32, ElemType::kInt32, ElemType::kInt64}) {
    SCOPED_TRACE(elem_type_name(tt));
    const int64_t count = static_cast<int64_t>(raw.size() / 8);  // fits every width
    cuda_check(cudaMemcpy(dsrc, raw.data(), raw.size(), cudaMemcpyHostToDevice), "H2D");
    std::vector<int64_t> want(static_cast<size_t>(count)), got(static_cast<size_t>(count));
    internal::widen_tokens_cpu(raw.data(), tt, count, want.data());
    widen_tokens(TensorView{"tokens", dsrc, {count}, tt, 0}, static_cast<int64_t*>(ddst), s.get());
    cuda_check(cudaMemcpyAsync(got.data(), ddst, static_cast<size_t>(count) * 8, cudaMemcpyDeviceToHost, s.get()), "D2H");
    cuda_check(cudaStreamSynchronize(s.get()), "sync");
    EXPECT_EQ(got, want);
  }
}

TEST(StageGpu, StagerConvertsImagesOnTheConsumerStream) {
  STOKER_REQUIRE_CUDA();
  const int64_t n = 4, h = 16, w = 24;
  const std::vector<uint8_t> img = testing::random_bytes(static_cast<size_t>(n * h * w * 3), 23);
  auto alloc = pinned_slot_allocator(0);
  void* pinned = alloc->allocate(img.size());
  std::memcpy(pinned, img.data(), img.size());
  class NoopLease final : public SlotLease {};
  uint64_t step = 0;
  StageSource src;
  src.next = [&]() -> std::optional<Batch> {
    if (step == 6) return std::nullopt;
    std::vector<TensorView> t{TensorView{"image", pinned, {n, h, w, 3}, ElemType::kUint8, -1}};
    return Batch(std::move(t), std::make_shared<NoopLease>(), 0, step++, n);
  };
  StagerOptions o;
  o.backend = StageBackend::kCuda;
  o.device = 0;
  o.image_dtype = ElemType::kBFloat16;
  std::vector<uint16_t> want(img.size()), got(img.size());
  internal::convert_image_cpu(img.data(), n, h, w, ElemType::kBFloat16, o.mean, o.std, want.data());
  {
    Stager st(src, o);
    Stream s;
    while (auto b = st.next()) {
      b->wait(s.get());
      const TensorView& im = (*b)["image"];
      ASSERT_EQ(im.shape, (std::vector<int64_t>{n, 3, h, w}));
      cuda_check(cudaMemcpyAsync(got.data(), im.data, got.size() * 2, cudaMemcpyDeviceToHost, s.get()), "D2H");
      b->release(s.get());
      cuda_check(cudaStreamSynchronize(s.get()), "sync");
      EXPECT_EQ(got, want);
    }
  }
  alloc->deallocate(pinned, img.size());
}

TEST(StageGpu, PinnedAllocatorAndBusId) {
  STOKER_REQUIRE_CUDA();
  auto a = pinned_slot_allocator(0);
  EXPECT_STREQ(a->name(), "pinned");
  void* p = a->allocate(1 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  cudaPointerAttributes attr{};
  cuda_check(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  a->deallocate(p, 1 << 20);
  auto id = cuda_pci_bus_id(0);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->size(), 12u) << *id;  // dddd:bb:dd.f
  for (char c : *id) EXPECT_FALSE(c >= 'A' && c <= 'F') << *id;
}

}  // namespace
}  // namespace stoker
