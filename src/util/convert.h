// Element conversions shared by decode, the loader and staging: float32 -> float16 and
// bfloat16 bits (round to nearest even), the normalisation (x / 255 - mean) / std, and
// token widening between the integer element types. One definition, so the CPU paths
// of decode (convert_pixels), staging (convert_image on host tensors) and the CUDA
// kernels' reference all give the same bits. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoker/batch.h"

namespace stoker::internal {

/// float32 -> IEEE binary16 bits, round to nearest even; subnormals kept, overflow to
/// inf, NaN stays NaN (quiet).
uint16_t float_to_half(float f) noexcept;
/// float32 -> bfloat16 bits (the high half), round to nearest even; NaN stays NaN (quiet).
uint16_t float_to_bfloat16(float f) noexcept;

/// The normalisation every image path applies: (x / 255 - mean) / std in float32, in
/// this order (IEEE division), so the CPU and CUDA paths agree to the bit.
inline float normalise(uint8_t x, float mean, float std) noexcept {
  return (static_cast<float>(x) / 255.0f - mean) / std;
}

/// `n` uint8 NHWC images (h x w, 3 channels) -> NCHW `dst_type` (kFloat32, kFloat16 or
/// kBFloat16) of normalise(x, mean[c], std[c]). The CUDA kernel computes the same
/// expression and gives the same bits. kInvalidArgument for another type or a negative
/// dimension.
void convert_image_cpu(const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type,
                       const float mean[3], const float std[3], void* dst);

/// Throws kInvalidArgument unless `t` is an image output type: kFloat32, kFloat16, kBFloat16.
void check_image_output_type(ElemType t);
/// True for the token types widen_tokens handles: kUint16, kUint32, kInt32, kInt64.
bool is_token_type(ElemType t) noexcept;
/// Throws kInvalidArgument unless is_token_type(t).
void check_token_type(ElemType t);

/// `count` tokens of `src_type` in host byte order -> int64. kInvalidArgument for a type
/// that is not a token type.
void widen_tokens_cpu(const void* src, ElemType src_type, int64_t count, int64_t* dst);

/// `count` little-endian tokens of `src_type` at `src` (any alignment) -> `dst_type`
/// (also a token type; values are cast as C++ casts them). On a little-endian host each
/// token is one plain load, which the compiler vectorises. kInvalidArgument for a type
/// that is not a token type.
void widen_tokens_le(const uint8_t* src, ElemType src_type, size_t count, ElemType dst_type, void* dst);

}  // namespace stoker::internal
