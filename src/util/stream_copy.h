// Copies into memory that nothing reads soon: the rows of a token batch going into its
// ring slot. Shared by the loader and the benchmark that prices that copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define STOKER_STREAM_NEON 1
#endif

namespace stoker::internal {

#if defined(STOKER_STREAM_NEON)
// ARMv8's streaming store is STNP, a pair store with a non-temporal hint (Neoverse cores
// also switch to write-streaming on their own when a core writes whole lines in a row;
// the hint says so from the first line). No intrinsic exists for it: inline asm, two
// 16-byte registers = 32 bytes, or two 8-byte halves = 16 bytes.
inline void stnp32(uint8_t* dst, uint8x16_t a, uint8x16_t b) {
  __asm__ volatile("stnp %q1, %q2, [%0]" : : "r"(dst), "w"(a), "w"(b) : "memory");
}
inline void stnp16(void* dst, uint8x16_t v) {
  const uint64x2_t u = vreinterpretq_u64_u8(v);
  __asm__ volatile("stnp %d1, %d2, [%0]" : : "r"(dst), "w"(vget_low_u64(u)), "w"(vget_high_u64(u))
                   : "memory");
}
#endif

/// Copies `bytes` from `src` to `dst`. Where `dst` is 16-byte aligned, with streaming
/// stores (SSE2 movntdq on x86-64, STNP on aarch64; plain memcpy elsewhere): the
/// destination's lines are written without first being read into the cache (a ring slot
/// is written once and not read again by this thread, so fetching it is pure cost), and
/// the cache keeps what the copier reads next (the rest of the record, the next record's
/// decompression) instead of the rows it wrote. Streaming stores are weakly ordered: call
/// stream_copy_fence() before another thread may read `dst`.
inline void stream_copy(uint8_t* dst, const uint8_t* src, size_t bytes) {
#if defined(__SSE2__)
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + i, src + i, bytes - i);
    return;
  }
#elif defined(STOKER_STREAM_NEON)
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
    size_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
      const uint8x16_t a = vld1q_u8(src + i), b = vld1q_u8(src + i + 16);
      const uint8x16_t c = vld1q_u8(src + i + 32), d = vld1q_u8(src + i + 48);
      stnp32(dst + i, a, b);
      stnp32(dst + i + 32, c, d);
    }
    std::memcpy(dst + i, src + i, bytes - i);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

/// Makes the streaming stores of this thread visible before anything it does next (such
/// as marking a batch ready).
inline void stream_copy_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#elif defined(STOKER_STREAM_NEON)
  // STNP is ordered like any store by barriers; the store barrier keeps the rows before
  // whatever store publishes them even when that store is not a release.
  __asm__ volatile("dmb ishst" : : : "memory");
#endif
}

}  // namespace stoker::internal
