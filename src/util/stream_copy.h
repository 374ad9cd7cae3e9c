// Copies into memory that nothing reads soon: the rows of a token batch going into its
// ring slot. Shared by the loader and the benchmark that prices that copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stoker::internal {

/// Copies `bytes` from `src` to `dst`. Where `dst` is 16-byte aligned, with streaming
/// stores: the destination's lines are written without first being read into the cache
/// (a ring slot is written once and not read again by this thread, so fetching it is
/// pure cost), and the cache keeps what the copier reads next (the rest of the record, the next record's decompression) instead of the
/// rows it wrote. Streaming stores are weakly ordered: call stream_copy_fence() before
/// another thread may read `dst`.
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
#endif
  std::memcpy(dst, src, bytes);
}

/// Makes the streaming stores of this thread visible before anything it does next (such
/// as marking a batch ready).
inline void stream_copy_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace stoker::internal
