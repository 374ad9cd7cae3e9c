#include "util/convert.h"

#include <bit>
#include <cstring>
#include <string>

#include "stoker/error.h"
#include "util/bytes.h"

namespace stoker::internal {

uint16_t float_to_half(float f) noexcept {
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

uint16_t float_to_bfloat16(float f) noexcept {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7FFFu + lsb) >> 16);
}

void convert_image_cpu(const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type, const float mean[3],
                       const float std[3], void* dst) {
  check_image_output_type(dst_type);
  if (n < 0 || h < 0 || w < 0) throw_error(ErrorCode::kInvalidArgument, "convert_image: negative dimension");
  const int64_t plane = h * w;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* img = src + i * plane * 3;
    for (int c = 0; c < 3; ++c) {
      const int64_t base = (i * 3 + c) * plane;
      for (int64_t p = 0; p < plane; ++p) {
        const float v = normalise(img[p * 3 + c], mean[c], std[c]);
        switch (dst_type) {
          case ElemType::kFloat32: static_cast<float*>(dst)[base + p] = v; break;
          case ElemType::kFloat16: static_cast<uint16_t*>(dst)[base + p] = float_to_half(v); break;
          default: static_cast<uint16_t*>(dst)[base + p] = float_to_bfloat16(v); break;
        }
      }
    }
  }
}

void check_image_output_type(ElemType t) {
  if (t != ElemType::kFloat32 && t != ElemType::kFloat16 && t != ElemType::kBFloat16)
    throw_error(ErrorCode::kInvalidArgument,
                std::string("convert_image: output must be float32, float16 or bfloat16, not ") + elem_type_name(t));
}

bool is_token_type(ElemType t) noexcept {
  return t == ElemType::kUint16 || t == ElemType::kUint32 || t == ElemType::kInt32 || t == ElemType::kInt64;
}

void check_token_type(ElemType t) {
  if (!is_token_type(t))
    throw_error(ErrorCode::kInvalidArgument, std::string("widen_tokens: cannot widen ") + elem_type_name(t) +
                                                 " tokens (uint16, uint32, int32 or int64)");
}

namespace {

template <typename In, typename Out>
void widen_native(const uint8_t* src, size_t n, Out* out) {
  for (size_t i = 0; i < n; ++i) {
    In v;
    std::memcpy(&v, src + sizeof(In) * i, sizeof(In));  // any alignment; one load once optimised
    out[i] = static_cast<Out>(v);
  }
}

template <typename In>
In load_le(const uint8_t* p) {
  if constexpr (sizeof(In) == 2) return static_cast<In>(get_u16(p));
  else if constexpr (sizeof(In) == 4) return static_cast<In>(get_u32(p));
  else return static_cast<In>(get_u64(p));
}

template <typename In, typename Out>
void widen_le(const uint8_t* src, size_t n, Out* out) {
  if constexpr (std::endian::native == std::endian::little) {
    widen_native<In>(src, n, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(load_le<In>(src + sizeof(In) * i));
  }
}

template <typename Out>
void widen_from(const uint8_t* src, ElemType src_type, size_t n, Out* out, bool little_endian) {
  auto one = [&]<typename In>() {
    if (little_endian) widen_le<In>(src, n, out);
    else widen_native<In>(src, n, out);
  };
  switch (src_type) {
    case ElemType::kUint16: one.template operator()<uint16_t>(); break;
    case ElemType::kUint32: one.template operator()<uint32_t>(); break;
    case ElemType::kInt32: one.template operator()<int32_t>(); break;
    default: one.template operator()<int64_t>(); break;
  }
}

}  // namespace

void widen_tokens_cpu(const void* src, ElemType src_type, int64_t count, int64_t* dst) {
  check_token_type(src_type);
  if (count <= 0) return;
  widen_from(static_cast<const uint8_t*>(src), src_type, static_cast<size_t>(count), dst, false);
}

void widen_tokens_le(const uint8_t* src, ElemType src_type, size_t count, ElemType dst_type, void* dst) {
  check_token_type(src_type);
  check_token_type(dst_type);
  switch (dst_type) {
    case ElemType::kUint16: widen_from(src, src_type, count, static_cast<uint16_t*>(dst), true); break;
    case ElemType::kUint32: widen_from(src, src_type, count, static_cast<uint32_t*>(dst), true); break;
    case ElemType::kInt32: widen_from(src, src_type, count, static_cast<int32_t*>(dst), true); break;
    default: widen_from(src, src_type, count, static_cast<int64_t*>(dst), true); break;
  }
}

}  // namespace stoker::internal
