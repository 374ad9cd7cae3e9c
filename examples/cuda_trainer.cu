// A minimal trainer loop on stoker: one epoch of a dataset staged onto the GPU, each batch
// consumed by a CUDA kernel on the trainer's own stream.
//
//   cuda_trainer DATASET [--batch B] [--epochs E] [--float32]
//
// Image datasets arrive as uint8 NHWC over PCIe and are turned into normalised float16
// (or float32) NCHW on the trainer's stream by b.wait(); token datasets arrive in their
// stored width and are widened to int64 there. The "training step" is a reduction kernel
// (mean pixel / largest token id) — a stand-in for a model's forward pass. The host never
// waits for the GPU inside the loop: wait() and release() only queue events.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/stage.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_trainer: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void sum_half(const __half* x, long long n, float* acc) {
  float local = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    local += __half2float(x[i]);
  atomicAdd(acc, local);
}

__global__ void sum_float(const float* x, long long n, float* acc) {
  float local = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    local += x[i];
  atomicAdd(acc, local);
}

__global__ void max_token(const long long* t, long long n, unsigned long long* out) {
  unsigned long long local = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    local = max(local, static_cast<unsigned long long>(t[i]));
  atomicMax(out, local);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DATASET [--batch B] [--epochs E] [--float32]\n", argv[0]);
    return 2;
  }
  stoker::LoaderOptions lo;
  lo.path = argv[1];
  lo.batch_size = 64;
  int epochs = 1;
  bool f32 = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) lo.batch_size = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--float32")) f32 = true;
    else {
      std::fprintf(stderr, "cuda_trainer: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  try {
    stoker::StagerOptions so;
    so.backend = stoker::StageBackend::kCuda;  // this example needs a GPU
    so.image_dtype = f32 ? stoker::ElemType::kFloat32 : stoker::ElemType::kFloat16;
    so.widen_tokens = true;
    stoker::Stager stager(lo, so);
    check(cudaSetDevice(stager.device()), "cudaSetDevice");

    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    float* pixel_sum = nullptr;
    unsigned long long* top_token = nullptr;
    check(cudaMalloc(&pixel_sum, sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&top_token, sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMemsetAsync(pixel_sum, 0, sizeof(float), stream), "memset");
    check(cudaMemsetAsync(top_token, 0, sizeof(unsigned long long), stream), "memset");

    const auto t0 = std::chrono::steady_clock::now();
    unsigned long long samples = 0, values = 0;
    for (int e = 0; e < epochs; ++e) {
      stager.set_epoch(static_cast<uint64_t>(e));
      while (auto b = stager.next()) {
        b->wait(stream);  // the stream waits for the copy (and converts); the host does not
        if (const stoker::TensorView* im = b->find("image")) {
          const long long n = im->numel();
          if (im->dtype == stoker::ElemType::kFloat16)
            sum_half<<<256, 256, 0, stream>>>(static_cast<const __half*>(im->data), n, pixel_sum);
          else
            sum_float<<<256, 256, 0, stream>>>(static_cast<const float*>(im->data), n, pixel_sum);
          values += static_cast<unsigned long long>(n);
        } else if (const stoker::TensorView* tk = b->find("tokens")) {
          max_token<<<256, 256, 0, stream>>>(static_cast<const long long*>(tk->data), tk->numel(), top_token);
          values += static_cast<unsigned long long>(tk->numel());
        }
        check(cudaGetLastError(), "kernel launch");
        samples += b->size();
        b->release(stream);  // the slot is refilled only after the kernel above has run
      }
    }
    float sum = 0;
    unsigned long long top = 0;
    check(cudaMemcpyAsync(&sum, pixel_sum, sizeof sum, cudaMemcpyDeviceToHost, stream), "D2H");
    check(cudaMemcpyAsync(&top, top_token, sizeof top, cudaMemcpyDeviceToHost, stream), "D2H");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%llu samples in %.2f s (%.0f samples/s) on GPU %d", samples, secs, samples / secs, stager.device());
    if (values && sum != 0) std::printf(", mean normalised pixel %.4f", sum / static_cast<double>(values));
    if (top) std::printf(", largest token id %llu", top);
    std::printf("\nstager: %s\nloader: %s\n", stager.stats().to_json().c_str(),
                stager.loader()->stats().summary().c_str());
    cudaFree(pixel_sum);
    cudaFree(top_token);
    cudaStreamDestroy(stream);
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "cuda_trainer: %s: %s\n", stoker::error_code_name(e.code()), e.what());
    return 1;
  }
  return 0;
}
