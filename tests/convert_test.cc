// The conversion module (util/convert.h): float -> half / bfloat16 rounding against
// independent references, the normalised NCHW image conversion, token widening.
#include "util/convert.h"

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <vector>

#include "stoker/error.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::error_code_of;

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The reference is the compiler's own binary16 (IEEE, round to nearest even),
// independent of ours: _Float16; on aarch64 with GCC 12 (no _Float16 in C++) __fp16,
// the same format; with clang 14 on x86-64 (no _Float16 there) the CPU's F16C
// conversions.
#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 15
bool half_reference_available() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
__attribute__((target("f16c"))) uint16_t half_reference(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float half_value(uint16_t bits) { return _cvtsh_ss(bits); }
#else
#if defined(__aarch64__) && !defined(__clang__) && __GNUC__ < 13
using Half = __fp16;
#else
using Half = _Float16;
#endif
bool half_reference_available() { return true; }
uint16_t half_reference(float f) {
  const Half h = static_cast<Half>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float half_value(uint16_t bits) {
  Half v;
  std::memcpy(&v, &bits, 2);
  return static_cast<float>(v);
}
#endif

// bfloat16 by definition: the nearer of the two bfloat16 values around f, ties to the
// even one, computed in double (past the largest finite value the next one up is 2^128,
// which stands for infinity).
uint16_t bfloat16_reference(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(x >> 16);
  if ((x & 0xFFFFu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  auto value = [](uint16_t b) -> double {
    if ((b & 0x7F80u) == 0x7F80u) return (b & 0x8000u) ? -std::ldexp(1.0, 128) : std::ldexp(1.0, 128);
    return from_bits(static_cast<uint32_t>(b) << 16);
  };
  const double d = f, el = std::fabs(d - value(lo)), eh = std::fabs(value(hi) - d);
  if (el < eh) return lo;
  if (eh < el) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(Convert, HalfMatchesTheCompilersConversionAcrossTheFloats) {
  if (!half_reference_available()) GTEST_SKIP() << "no binary16 reference here (clang 14 on a CPU without F16C)";
  // A stride coprime to 2^32 visits every exponent and many mantissas of both signs.
  uint64_t checked = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 4093) {
    const float f = from_bits(static_cast<uint32_t>(i));
    if (std::isnan(f)) continue;
    ASSERT_EQ(internal::float_to_half(f), half_reference(f)) << std::hexfloat << f;
    ++checked;
  }
  // Every half and the midpoints around it: the ties, where rounding to even decides.
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint16_t bits = static_cast<uint16_t>(h | sign);
      const float f = half_value(bits);
      uint32_t fb;
      std::memcpy(&fb, &f, 4);
      // Normal halves keep 10 of float's 23 mantissa bits: the midpoints to the
      // neighbours lie 2^12 float steps away.
      for (int32_t off : {-4097, -4096, -4095, 4095, 4096, 4097}) {
        const float g = from_bits(fb + static_cast<uint32_t>(off));
        if (std::isnan(g)) continue;
        ASSERT_EQ(internal::float_to_half(g), half_reference(g)) << std::hexfloat << g;
      }
      ASSERT_EQ(internal::float_to_half(f), bits);
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000u);
  EXPECT_EQ(internal::float_to_half(INFINITY), 0x7C00);
  EXPECT_EQ(internal::float_to_half(-INFINITY), 0xFC00);
  EXPECT_EQ(internal::float_to_half(NAN) & 0x7E00, 0x7E00);
}

TEST(Convert, BFloat16RoundsToNearestEven) {
  for (uint64_t i = 0; i < (1ull << 32); i += 4093) {
    const float f = from_bits(static_cast<uint32_t>(i));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(from_bits(static_cast<uint32_t>(internal::float_to_bfloat16(f)) << 16)));
      continue;
    }
    ASSERT_EQ(internal::float_to_bfloat16(f), bfloat16_reference(f)) << std::hexfloat << f;
  }
  EXPECT_EQ(internal::float_to_bfloat16(from_bits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(internal::float_to_bfloat16(from_bits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
}

TEST(Convert, NormaliseIsTheSameExpressionEverywhere) {
  EXPECT_EQ(internal::normalise(0, 0.5f, 0.5f), -1.0f);
  EXPECT_EQ(internal::normalise(255, 0.5f, 0.5f), 1.0f);
  EXPECT_EQ(internal::normalise(51, 0.485f, 0.229f), (51.0f / 255.0f - 0.485f) / 0.229f);
}

TEST(Convert, ImageReferenceMatchesHandComputationAndLayout) {
  // One 1x2 image: pixel 0 = (0, 255, 51), pixel 1 = (255, 0, 102); mean .5, std .5.
  const uint8_t img[6] = {0, 255, 51, 255, 0, 102};
  const float mean[3] = {0.5f, 0.5f, 0.5f}, sd[3] = {0.5f, 0.5f, 0.5f};
  float f32[6];
  internal::convert_image_cpu(img, 1, 1, 2, ElemType::kFloat32, mean, sd, f32);
  // NCHW: plane c holds channel c of pixels 0, 1.
  EXPECT_EQ(f32[0], -1.0f);  // R of pixel 0: (0 - .5) / .5
  EXPECT_EQ(f32[1], 1.0f);   // R of pixel 1
  EXPECT_EQ(f32[2], 1.0f);   // G of pixel 0
  EXPECT_EQ(f32[3], -1.0f);  // G of pixel 1
  EXPECT_FLOAT_EQ(f32[4], -0.6f);  // B: 51/255 = .2
  EXPECT_FLOAT_EQ(f32[5], -0.2f);  // 102/255 = .4
  uint16_t h[6], bf[6];
  internal::convert_image_cpu(img, 1, 1, 2, ElemType::kFloat16, mean, sd, h);
  internal::convert_image_cpu(img, 1, 1, 2, ElemType::kBFloat16, mean, sd, bf);
  EXPECT_EQ(h[0], 0xBC00);  // -1.0
  EXPECT_EQ(h[1], 0x3C00);  // 1.0
  EXPECT_EQ(bf[0], 0xBF80);
  EXPECT_EQ(bf[1], 0x3F80);
  // -0.6f = 0xBF19999A: half 0xB8CD (RNE of 0x4CC.CD), bf16 0xBF1A (0x999A rounds up).
  EXPECT_EQ(h[4], 0xB8CD);
  EXPECT_EQ(bf[4], 0xBF1A);
}

TEST(Convert, SixteenBitRoundingEdges) {
  const float zero[3] = {0, 0, 0};
  const uint8_t px[3] = {85, 255, 255};
  uint16_t h[3], bf[3];
  // 85/255 = 0.33333334f (0x3EAAAAAB): half 0x3555, bf16 0x3EAB.
  const float one[3] = {1, 1, 1};
  internal::convert_image_cpu(px, 1, 1, 1, ElemType::kFloat16, zero, one, h);
  internal::convert_image_cpu(px, 1, 1, 1, ElemType::kBFloat16, zero, one, bf);
  EXPECT_EQ(h[0], 0x3555);
  EXPECT_EQ(bf[0], 0x3EAB);
  EXPECT_EQ(h[1], 0x3C00);
  // Overflow to infinity (1e6) and a subnormal (1e-5 = 167.77 * 2^-24 -> 168).
  const float tiny_std[3] = {1, 1e-6f, 1e5f};
  internal::convert_image_cpu(px, 1, 1, 1, ElemType::kFloat16, zero, tiny_std, h);
  EXPECT_EQ(h[1], 0x7C00);
  EXPECT_EQ(h[2], 0x00A8);
}

TEST(Convert, TokenWideningReference) {
  const uint16_t a[3] = {0, 1, 65535};
  const uint32_t b[2] = {7, 0xFFFFFFFFu};
  const int32_t c[2] = {-5, 2147483647};
  int64_t out[3];
  internal::widen_tokens_cpu(a, ElemType::kUint16, 3, out);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[2], 65535);
  internal::widen_tokens_cpu(b, ElemType::kUint32, 2, out);
  EXPECT_EQ(out[1], 4294967295LL);
  internal::widen_tokens_cpu(c, ElemType::kInt32, 2, out);
  EXPECT_EQ(out[0], -5);
  EXPECT_EQ(out[1], 2147483647);
  EXPECT_EQ(error_code_of([&] { internal::widen_tokens_cpu(a, ElemType::kFloat16, 3, out); }), ErrorCode::kInvalidArgument);
  const float m[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
  EXPECT_EQ(error_code_of([&] { internal::convert_image_cpu(nullptr, 0, 1, 1, ElemType::kUint8, m, sd, nullptr); }),
            ErrorCode::kInvalidArgument);
}

TEST(Convert, LittleEndianTokensWidenToEveryTokenTypeFromAnyAlignment) {
  // uint16 1, 65535, 258 and int32 -7, 70000 as little-endian bytes, one byte off alignment.
  const uint8_t u16[] = {0xEE, 0x01, 0x00, 0xFF, 0xFF, 0x02, 0x01};
  int64_t out64[3];
  internal::widen_tokens_le(u16 + 1, ElemType::kUint16, 3, ElemType::kInt64, out64);
  EXPECT_EQ(std::vector<int64_t>(out64, out64 + 3), (std::vector<int64_t>{1, 65535, 258}));
  uint32_t out32[3];
  internal::widen_tokens_le(u16 + 1, ElemType::kUint16, 3, ElemType::kUint32, out32);
  EXPECT_EQ(out32[1], 65535u);
  const uint8_t i32[] = {0x00, 0xF9, 0xFF, 0xFF, 0xFF, 0x70, 0x11, 0x01, 0x00};
  int64_t wide[2];
  internal::widen_tokens_le(i32 + 1, ElemType::kInt32, 2, ElemType::kInt64, wide);
  EXPECT_EQ(wide[0], -7);
  EXPECT_EQ(wide[1], 70000);
  uint16_t same[3];
  internal::widen_tokens_le(u16 + 1, ElemType::kUint16, 3, ElemType::kUint16, same);
  EXPECT_EQ(same[2], 258);
  EXPECT_EQ(error_code_of([&] { internal::widen_tokens_le(u16, ElemType::kFloat32, 1, ElemType::kInt64, out64); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { internal::widen_tokens_le(u16, ElemType::kUint16, 1, ElemType::kUint8, out64); }),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
