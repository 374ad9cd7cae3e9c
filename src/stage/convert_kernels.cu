// On-device conversions, on the trainer's stream: uint8 NHWC images to normalised NCHW
// float (PCIe carries one byte a channel; the CPU does no float math) and token widening
// to int64 (PCIe carries the stored width). Also the bench's spin kernel.
//
// The image kernel evaluates (x / 255.0f - mean[c]) / std[c] with IEEE float division
// (nvcc's default -prec-div=true; stoker is not built with --use_fast_math) and rounds to
// 16 bits with the _rn intrinsics, so it matches convert_image_cpu() bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "stage/convert_kernels.h"
#include "stage/cuda_handle.h"

namespace stoker::internal {
namespace {

struct Norm {
  float mean[3];
  float std[3];
};

template <class Out>
__device__ __forceinline__ Out to_out(float v);
template <>
__device__ __forceinline__ float to_out<float>(float v) { return v; }
template <>
__device__ __forceinline__ unsigned short to_out<unsigned short>(float v) { return __half_as_ushort(__float2half_rn(v)); }

struct Bf16Bits {
  unsigned short v;
};
template <>
__device__ __forceinline__ Bf16Bits to_out<Bf16Bits>(float v) { return Bf16Bits{__bfloat16_as_ushort(__float2bfloat16_rn(v))}; }

// One thread per pixel: reads its 3 bytes, writes one element to each of the 3 planes
// (neighbouring threads write neighbouring elements of a plane: coalesced stores).
template <class Out>
__global__ void nhwc_u8_to_nchw(const uint8_t* __restrict__ src, int64_t n, int64_t plane, Norm norm,
                                Out* __restrict__ dst) {
  const int64_t total = n * plane;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t img = i / plane, p = i - img * plane;
    const uint8_t* px = src + i * 3;
    Out* out = dst + img * 3 * plane + p;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      const float v = (static_cast<float>(px[c]) / 255.0f - norm.mean[c]) / norm.std[c];
      out[c * plane] = to_out<Out>(v);
    }
  }
}

template <class In>
__global__ void widen_to_i64(const In* __restrict__ src, int64_t count, int64_t* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<int64_t>(src[i]);
}

__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

unsigned grid_for(int64_t items, unsigned block) {
  const int64_t blocks = (items + block - 1) / block;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 8)));
}

}  // namespace

void launch_convert_image(int device, const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type,
                          const float mean[3], const float std[3], void* dst, void* stream) {
  const int64_t plane = h * w;
  if (n * plane == 0) return;
  DeviceGuard guard(device);
  Norm norm{{mean[0], mean[1], mean[2]}, {std[0], std[1], std[2]}};
  const unsigned block = 256, grid = grid_for(n * plane, block);
  auto s = static_cast<cudaStream_t>(stream);
  switch (dst_type) {
    case ElemType::kFloat32:
      nhwc_u8_to_nchw<float><<<grid, block, 0, s>>>(src, n, plane, norm, static_cast<float*>(dst));
      break;
    case ElemType::kFloat16:
      nhwc_u8_to_nchw<unsigned short><<<grid, block, 0, s>>>(src, n, plane, norm, static_cast<unsigned short*>(dst));
      break;
    case ElemType::kBFloat16:
      nhwc_u8_to_nchw<Bf16Bits><<<grid, block, 0, s>>>(src, n, plane, norm, static_cast<Bf16Bits*>(dst));
      break;
    default:
      throw_error(ErrorCode::kInvalidArgument,
                  std::string("convert_image: output must be float32, float16 or bfloat16, not ") +
                      elem_type_name(dst_type));
  }
  cuda_check(cudaGetLastError(), "convert_image kernel launch");
}

void launch_widen_tokens(int device, const void* src, ElemType src_type, int64_t count, int64_t* dst, void* stream) {
  if (count == 0) return;
  DeviceGuard guard(device);
  const unsigned block = 256, grid = grid_for(count, block);
  auto s = static_cast<cudaStream_t>(stream);
  switch (src_type) {
    case ElemType::kUint16:
      widen_to_i64<<<grid, block, 0, s>>>(static_cast<const uint16_t*>(src), count, dst);
      break;
    case ElemType::kUint32:
      widen_to_i64<<<grid, block, 0, s>>>(static_cast<const uint32_t*>(src), count, dst);
      break;
    case ElemType::kInt32:
      widen_to_i64<<<grid, block, 0, s>>>(static_cast<const int32_t*>(src), count, dst);
      break;
    case ElemType::kInt64:
      cuda_check(cudaMemcpyAsync(dst, src, static_cast<size_t>(count) * 8, cudaMemcpyDeviceToDevice, s),
                 "widen_tokens copy");
      return;
    default:
      throw_error(ErrorCode::kInvalidArgument,
                  std::string("widen_tokens: cannot widen ") + elem_type_name(src_type) + " tokens");
  }
  cuda_check(cudaGetLastError(), "widen_tokens kernel launch");
}

void launch_spin(int device, double us, void* stream) {
  DeviceGuard guard(device);
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<unsigned long long>(us * 1000.0));
  cuda_check(cudaGetLastError(), "spin kernel launch");
}

}  // namespace stoker::internal
