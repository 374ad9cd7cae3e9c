// The CPU reference conversions, and the dispatch that sends device tensors to the CUDA
// kernels (convert_kernels.cu) and host tensors to the reference.
#include <cmath>
#include <cstring>

#include "stage/convert_kernels.h"
#include "stoker/error.h"
#include "stoker/stage.h"

namespace stoker {
namespace {

// float -> IEEE binary16, round to nearest even (subnormals, overflow to inf, NaN kept).
uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    // In units of the half subnormal step 2^-24: mant * 2^(e - 150) / 2^-24 = mant >> (126 - e),
    // e the biased float exponent (102 .. 112 here, so the shift is 14 .. 24).
    const uint32_t s = 126u - (abs >> 23);
    uint32_t q = mant >> s;
    const uint32_t rem = mant & ((1u << s) - 1);
    const uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7FFFu + lsb) >> 16);
}

void check_image_type(ElemType t) {
  if (t != ElemType::kFloat32 && t != ElemType::kFloat16 && t != ElemType::kBFloat16)
    throw_error(ErrorCode::kInvalidArgument,
                std::string("convert_image: output must be float32, float16 or bfloat16, not ") + elem_type_name(t));
}

void check_token_type(ElemType t) {
  if (t != ElemType::kUint16 && t != ElemType::kUint32 && t != ElemType::kInt32 && t != ElemType::kInt64)
    throw_error(ErrorCode::kInvalidArgument,
                std::string("widen_tokens: cannot widen ") + elem_type_name(t) + " tokens (uint16, uint32, "
                "int32 or int64)");
}

}  // namespace

void convert_image_cpu(const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type, const float mean[3],
                       const float std[3], void* dst) {
  check_image_type(dst_type);
  if (n < 0 || h < 0 || w < 0) throw_error(ErrorCode::kInvalidArgument, "convert_image: negative dimension");
  const int64_t plane = h * w;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* img = src + i * plane * 3;
    for (int c = 0; c < 3; ++c) {
      const int64_t base = (i * 3 + c) * plane;
      for (int64_t p = 0; p < plane; ++p) {
        // The same expression, in the same order, as the CUDA kernel.
        const float v = (static_cast<float>(img[p * 3 + c]) / 255.0f - mean[c]) / std[c];
        switch (dst_type) {
          case ElemType::kFloat32: static_cast<float*>(dst)[base + p] = v; break;
          case ElemType::kFloat16: static_cast<uint16_t*>(dst)[base + p] = f32_to_f16(v); break;
          default: static_cast<uint16_t*>(dst)[base + p] = f32_to_bf16(v); break;
        }
      }
    }
  }
}

void widen_tokens_cpu(const void* src, ElemType src_type, int64_t count, int64_t* dst) {
  check_token_type(src_type);
  for (int64_t i = 0; i < count; ++i) {
    switch (src_type) {
      case ElemType::kUint16: dst[i] = static_cast<const uint16_t*>(src)[i]; break;
      case ElemType::kUint32: dst[i] = static_cast<const uint32_t*>(src)[i]; break;
      case ElemType::kInt32: dst[i] = static_cast<const int32_t*>(src)[i]; break;
      default: dst[i] = static_cast<const int64_t*>(src)[i]; break;
    }
  }
}

namespace {

void check_image_view(const TensorView& src) {
  if (src.dtype != ElemType::kUint8 || src.shape.size() != 4 || src.shape[3] != 3)
    throw_error(ErrorCode::kInvalidArgument,
                "convert_image: '" + src.name + "' must be uint8 {N, H, W, 3}, is " + elem_type_name(src.dtype) +
                    " of rank " + std::to_string(src.shape.size()));
}

}  // namespace

void convert_image(const TensorView& src, ElemType dst_type, const float mean[3], const float std[3], void* dst,
                   void* stream) {
  check_image_view(src);
  check_image_type(dst_type);
  const int64_t n = src.shape[0], h = src.shape[1], w = src.shape[2];
  if (src.device >= 0) {
#if STOKER_HAS_CUDA
    internal::launch_convert_image(src.device, static_cast<const uint8_t*>(src.data), n, h, w, dst_type, mean, std,
                                   dst, stream);
    return;
#else
    throw_error(ErrorCode::kUnavailable, "convert_image: device tensor, but stoker was built without CUDA");
#endif
  }
  const float m[3] = {mean[0], mean[1], mean[2]}, s[3] = {std[0], std[1], std[2]};
  const uint8_t* p = static_cast<const uint8_t*>(src.data);
  auto run = [=] { convert_image_cpu(p, n, h, w, dst_type, m, s, dst); };
  if (stream) static_cast<HostStream*>(stream)->enqueue(run);
  else run();
}

void widen_tokens(const TensorView& src, int64_t* dst, void* stream) {
  check_token_type(src.dtype);
  const int64_t count = src.numel();
  if (src.device >= 0) {
#if STOKER_HAS_CUDA
    internal::launch_widen_tokens(src.device, src.data, src.dtype, count, dst, stream);
    return;
#else
    throw_error(ErrorCode::kUnavailable, "widen_tokens: device tensor, but stoker was built without CUDA");
#endif
  }
  const void* p = src.data;
  const ElemType t = src.dtype;
  auto run = [=] { widen_tokens_cpu(p, t, count, dst); };
  if (stream) static_cast<HostStream*>(stream)->enqueue(run);
  else run();
}

}  // namespace stoker
