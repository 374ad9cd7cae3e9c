// Per-row document outputs (doc_rows.h).
#include "pipeline/doc_rows.h"

#include <climits>
#include <cstring>

#include "util/stream_copy.h"  // its ISA includes, and stnp16 on aarch64

#if defined(__SSE2__) || defined(STOKER_STREAM_NEON)
#define STOKER_DOC_ROWS_SIMD 1
#endif

namespace stoker::internal {

namespace {

// The row's pieces of documents, walked in order: piece k covers the row's inputs
// [begin, end) (relative to the row), and its first input has position `first_pos`.
class Pieces {
 public:
  Pieces(std::span<const uint8_t> starts, uint64_t row, uint32_t seq_len, bool from_row_start)
      : s_(starts), n_(starts.size() / 4), a_(static_cast<int64_t>(row * seq_len)), N_(seq_len) {
    // t: the last start at or before the row's first token (entry 0 is <= 0 <= a).
    size_t lo = 0, hi = n_;
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      (doc_start_at(s_, mid) <= a_ ? lo : hi) = mid;
    }
    t_ = lo;
    first_pos_ = from_row_start ? 0 : a_ - doc_start_at(s_, t_);
    set_end();
  }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }      ///< <= N
  int64_t next() const { return next_; }    ///< the next document's start, relative (may be > N)
  int32_t index() const { return k_; }
  /// The position of input x of this piece (begin <= x < end).
  int32_t position(int64_t x) const { return static_cast<int32_t>(first_pos_ + (x - begin_)); }
  bool last() const { return end_ >= N_; }
  void advance() {
    begin_ = end_;
    first_pos_ = 0;
    ++t_;
    ++k_;
    set_end();
  }

 private:
  void set_end() {
    next_ = t_ + 1 < n_ ? doc_start_at(s_, t_ + 1) - a_ : INT64_MAX;
    end_ = next_ < N_ ? next_ : N_;
  }
  std::span<const uint8_t> s_;
  size_t n_, t_ = 0;
  int64_t a_, N_, begin_ = 0, end_ = 0, next_ = 0, first_pos_ = 0;
  int32_t k_ = 0;
};

// The 16-byte vectors the outputs are made of: four int32 lanes, or sixteen bytes.
#if defined(__SSE2__)
using Vec = __m128i;
inline Vec splat32(int32_t v) { return _mm_set1_epi32(v); }
inline Vec splat8(uint8_t v) { return _mm_set1_epi8(static_cast<char>(v)); }
inline Vec lanes0123() { return _mm_set_epi32(3, 2, 1, 0); }
inline Vec add32(Vec a, Vec b) { return _mm_add_epi32(a, b); }
inline Vec load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
// 16 bytes to dst: streamed (the slot's rows: never read back by this thread) where
// asked and dst is 16-byte aligned.
inline void put16(void* dst, Vec v, bool stream) {
  if (stream) _mm_stream_si128(static_cast<__m128i*>(dst), v);
  else _mm_storeu_si128(static_cast<__m128i*>(dst), v);
}
#elif defined(STOKER_STREAM_NEON)
using Vec = int32x4_t;
inline Vec splat32(int32_t v) { return vdupq_n_s32(v); }
inline Vec splat8(uint8_t v) { return vreinterpretq_s32_u8(vdupq_n_u8(v)); }
inline Vec lanes0123() {
  static constexpr int32_t k[4] = {0, 1, 2, 3};
  return vld1q_s32(k);
}
inline Vec add32(Vec a, Vec b) { return vaddq_s32(a, b); }
inline Vec load16(const void* p) { return vreinterpretq_s32_u8(vld1q_u8(static_cast<const uint8_t*>(p))); }
inline void put16(void* dst, Vec v, bool stream) {
  if (stream) stnp16(dst, vreinterpretq_u8_s32(v));
  else vst1q_u8(static_cast<uint8_t*>(dst), vreinterpretq_u8_s32(v));
}
#endif

// position_ids (positions) or doc_ids (!positions) of a row: 4 inputs a store, each
// block of 4 made in registers (a block that a document start cuts is made lane by lane).
void write_int32s(int32_t* dst, int64_t N, Pieces p, bool positions, bool stream) {
  auto value = [&](int64_t x) { return positions ? p.position(x) : p.index(); };
  int64_t x = 0;
#if defined(STOKER_DOC_ROWS_SIMD)
  stream = stream && (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  const Vec step = positions ? lanes0123() : splat32(0);
  const Vec inc = splat32(positions ? 4 : 0);
  while (x + 4 <= N) {
    if (x + 4 <= p.end()) {
      Vec v = add32(splat32(value(x)), step);
      for (; x + 4 <= p.end(); x += 4) {
        put16(dst + x, v, stream);
        v = add32(v, inc);
      }
      continue;
    }
    alignas(16) int32_t lanes[4];
    for (int l = 0; l < 4; ++l) {
      while (x + l >= p.end()) p.advance();
      lanes[l] = value(x + l);
    }
    put16(dst + x, load16(lanes), stream);
    x += 4;
  }
#endif
  for (; x < N; ++x) {
    while (x >= p.end()) p.advance();
    dst[x] = value(x);
  }
}

// loss_mask: 1, but 0 just before each document start within the row or at its end.
void write_mask(uint8_t* dst, int64_t N, Pieces p, bool stream) {
  // z: the next input whose target starts another document (INT64_MAX: none left).
  int64_t z = p.next() <= N ? p.next() - 1 : INT64_MAX;
  auto next_zero = [&] {
    if (p.last()) return INT64_MAX;
    p.advance();
    return p.next() <= N ? p.next() - 1 : INT64_MAX;
  };
  int64_t x = 0;
#if defined(STOKER_DOC_ROWS_SIMD)
  stream = stream && (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  const Vec ones = splat8(1);
  for (; x + 16 <= N; x += 16) {
    if (z >= x + 16) {
      put16(dst + x, ones, stream);
      continue;
    }
    alignas(16) uint8_t lanes[16];
    std::memset(lanes, 1, 16);
    for (; z < x + 16; z = next_zero()) lanes[z - x] = 0;
    put16(dst + x, load16(lanes), stream);
  }
#endif
  for (; x < N; ++x) {
    dst[x] = x == z ? 0 : 1;
    if (x == z) z = next_zero();
  }
}

}  // namespace

void doc_row(std::span<const uint8_t> starts, uint64_t row, uint32_t seq_len, const DocRowOut& out,
             bool from_row_start) {
  const Pieces first(starts, row, seq_len, from_row_start);
  const int64_t N = seq_len;
  if (out.position_ids) write_int32s(out.position_ids, N, first, true, out.stream);
  if (out.doc_ids) write_int32s(out.doc_ids, N, first, false, out.stream);
  if (out.loss_mask) write_mask(out.loss_mask, N, first, out.stream);
  if (out.seqlens) {
    for (Pieces p = first;; p.advance()) {
      const int32_t len = static_cast<int32_t>(p.end() - p.begin());
      const size_t at = out.seqlens->size();
      out.seqlens->resize(at + 4);
      std::memcpy(out.seqlens->data() + at, &len, 4);
      if (p.last()) break;
    }
  }
}

}  // namespace stoker::internal
