#include "decode/resize.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define STOKER_RESIZE_AVX2 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define STOKER_RESIZE_NEON 1
#endif

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

namespace stoker::internal {

namespace {

constexpr int kBits = 14;
constexpr int kOne = 1 << kBits;
constexpr int kHalf = 1 << (kBits - 1);

inline uint8_t clamp_u8(int v) noexcept {
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// ---- scalar kernels -------------------------------------------------------------------

void horizontal_scalar_pixel(const uint8_t* srow, int first, const int16_t* w, int taps,
                             uint8_t* out) {
  const uint8_t* p = srow + static_cast<size_t>(first) * 3;
  int s0 = kHalf, s1 = kHalf, s2 = kHalf;
  for (int k = 0; k < taps; ++k) {
    s0 += w[k] * p[3 * k];
    s1 += w[k] * p[3 * k + 1];
    s2 += w[k] * p[3 * k + 2];
  }
  out[0] = clamp_u8(s0 >> kBits);
  out[1] = clamp_u8(s1 >> kBits);
  out[2] = clamp_u8(s2 >> kBits);
}

void vertical_scalar(const uint8_t* const* rows, const int16_t* w, int taps, size_t begin,
                     size_t end, uint8_t* out) {
  for (size_t i = begin; i < end; ++i) {
    int s = kHalf;
    for (int k = 0; k < taps; ++k) s += w[k] * rows[k][i];
    out[i] = clamp_u8(s >> kBits);
  }
}

// ---- AVX2 kernels ---------------------------------------------------------------------
#if defined(STOKER_RESIZE_AVX2)

// Per-channel sums (rounded, shifted) of output pixels x (lane 0) and x + 1 (lane 1).
__attribute__((target("avx2"), always_inline)) inline __m256i pair_sums(
    const uint8_t* srow, const int* first, const int16_t* wpairs, int quads, int x,
    __m256i shuf_a, __m256i shuf_b) {
  const uint8_t* p0 = srow + static_cast<size_t>(first[x]) * 3;
  const uint8_t* p1 = srow + static_cast<size_t>(first[x + 1]) * 3;
  const int16_t* w = wpairs + static_cast<size_t>(x / 2) * quads * 32;
  __m256i acc = _mm256_set1_epi32(kHalf);
  for (int q = 0; q < quads; ++q) {
    const __m128i l0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 12 * q));
    const __m128i l1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 12 * q));
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(l0), l1, 1);
    const __m256i wa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * q));
    const __m256i wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * q + 16));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, shuf_a), wa));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_shuffle_epi8(v, shuf_b), wb));
  }
  return _mm256_srai_epi32(acc, kBits);
}

// Two output pixels per iteration, one per 128-bit lane. Each lane loads 16 bytes (5 RGB
// pixels) at its pixel's next 4 taps; shuffle A spreads taps 0,1 as int16 pairs
// [r0 r1 g0 g1 b0 b1 0 0], shuffle B taps 2,3; madd against [w0 w1 w0 w1 w0 w1 0 0]
// gives per-channel int32 sums, the same products the scalar kernel adds.
// The whole row loop lives here so that nothing per pixel crosses a call (a target("avx2")
// function cannot be inlined into portable code).
__attribute__((target("avx2"))) void horizontal_avx2_rows(
    const uint8_t* src, size_t src_stride, int rows, const int* first, const int16_t* wpairs,
    const uint8_t* pair_safe, const int16_t* wscalar, int taps, int dst_w, uint8_t* tmp,
    size_t tstride) {
  const __m256i shuf_a = _mm256_setr_epi8(
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1,
      0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m256i shuf_b = _mm256_setr_epi8(
      6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1,
      6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  // Gathers the rgb0 dwords of pixels x, x+1, x+2, x+3 (lane 0 dword 0, lane 1 dword 0,
  // lane 0 dword 1, lane 1 dword 1 after the packs) and squeezes out the zero bytes.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m128i squeeze = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const int quads = taps / 4;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* srow = src + static_cast<size_t>(r) * src_stride;
    uint8_t* out = tmp + static_cast<size_t>(r) * tstride;
    int x = 0;
    for (; x + 3 < dst_w; x += 4) {
      if (!pair_safe[x / 2] || !pair_safe[x / 2 + 1]) {
        for (int k = 0; k < 4; ++k) {
          horizontal_scalar_pixel(srow, first[x + k], wscalar + static_cast<size_t>(x + k) * taps,
                                  taps, out + 3 * (x + k));
        }
        continue;
      }
      const __m256i a = pair_sums(srow, first, wpairs, quads, x, shuf_a, shuf_b);
      const __m256i b = pair_sums(srow, first, wpairs, quads, x + 2, shuf_a, shuf_b);
      const __m256i w16 = _mm256_packs_epi32(a, b);
      const __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w16, w16), order);
      // 16-byte store of 12 bytes: the rest lands on later pixels or the row padding.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * x),
                       _mm_shuffle_epi8(_mm256_castsi256_si128(b8), squeeze));
    }
    for (; x < dst_w; ++x) {
      horizontal_scalar_pixel(srow, first[x], wscalar + static_cast<size_t>(x) * taps, taps,
                              out + 3 * x);
    }
  }
}

__attribute__((target("avx2"))) size_t vertical_avx2(const uint8_t* const* rows,
                                                     const int16_t* w, int taps, size_t n,
                                                     uint8_t* out) {
  size_t i = 0;
  const __m256i zero = _mm256_setzero_si256();
  for (; i + 16 <= n; i += 16) {
    __m256i lo = _mm256_set1_epi32(kHalf), hi = lo;
    int k = 0;
    for (; k + 1 < taps; k += 2) {
      const __m256i a = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + i)));
      const __m256i b = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k + 1] + i)));
      const __m256i wv = _mm256_set1_epi32(static_cast<int32_t>(
          (static_cast<uint32_t>(static_cast<uint16_t>(w[k + 1])) << 16) |
          static_cast<uint16_t>(w[k])));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wv));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wv));
    }
    if (k < taps) {
      const __m256i a = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + i)));
      const __m256i wv = _mm256_set1_epi32(static_cast<uint16_t>(w[k]));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, zero), wv));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, zero), wv));
    }
    lo = _mm256_srai_epi32(lo, kBits);
    hi = _mm256_srai_epi32(hi, kBits);
    const __m256i w16 = _mm256_packs_epi32(lo, hi);  // in order within each lane
    const __m256i b8 = _mm256_permute4x64_epi64(_mm256_packus_epi16(w16, w16), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(b8));
  }
  return i;
}

#endif  // STOKER_RESIZE_AVX2

// ---- NEON kernels (aarch64, where NEON is part of the base ISA) ------------------------
#if defined(STOKER_RESIZE_NEON)

// One output pixel: 8 taps a step, de-interleaved by vld3 into r, g, b lanes, each lane's
// product w[k] * p[k] widened to int32 (the same products the scalar kernel adds, in
// another order: the sums are exact, so the bytes are identical). A tap count that is 4
// mod 8 ends with a half step whose upper weights are zero. vld3 reads 8 pixels, so the
// caller checks that the last step stays inside the row.
inline void horizontal_neon_pixel(const uint8_t* p, const int16_t* w, int taps, uint8_t* out) {
  int32x4_t r = vdupq_n_s32(0), g = r, b = r;
  for (int k = 0; k < taps; k += 8) {
    const uint8x8x3_t px = vld3_u8(p + 3 * k);
    const int16x8_t wk = taps - k >= 8 ? vld1q_s16(w + k) : vcombine_s16(vld1_s16(w + k), vdup_n_s16(0));
    const int16x8_t r16 = vreinterpretq_s16_u16(vmovl_u8(px.val[0]));
    const int16x8_t g16 = vreinterpretq_s16_u16(vmovl_u8(px.val[1]));
    const int16x8_t b16 = vreinterpretq_s16_u16(vmovl_u8(px.val[2]));
    r = vmlal_high_s16(vmlal_s16(r, vget_low_s16(r16), vget_low_s16(wk)), r16, wk);
    g = vmlal_high_s16(vmlal_s16(g, vget_low_s16(g16), vget_low_s16(wk)), g16, wk);
    b = vmlal_high_s16(vmlal_s16(b, vget_low_s16(b16), vget_low_s16(wk)), b16, wk);
  }
  out[0] = clamp_u8((kHalf + vaddvq_s32(r)) >> kBits);
  out[1] = clamp_u8((kHalf + vaddvq_s32(g)) >> kBits);
  out[2] = clamp_u8((kHalf + vaddvq_s32(b)) >> kBits);
}

void horizontal_neon_rows(const uint8_t* src, size_t src_stride, int rows, const int* first,
                          const uint8_t* safe, const int16_t* weight, int taps, int dst_w,
                          uint8_t* tmp, size_t tstride) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* srow = src + static_cast<size_t>(r) * src_stride;
    uint8_t* out = tmp + static_cast<size_t>(r) * tstride;
    for (int x = 0; x < dst_w; ++x) {
      const int16_t* w = weight + static_cast<size_t>(x) * taps;
      if (safe[x]) {
        horizontal_neon_pixel(srow + static_cast<size_t>(first[x]) * 3, w, taps, out + 3 * x);
      } else {
        horizontal_scalar_pixel(srow, first[x], w, taps, out + 3 * x);
      }
    }
  }
}

// 16 bytes of a row per step: each tap's bytes widened to int16 and multiplied by its
// weight into four int32 quarters; shift, then saturating narrows (the clamp).
size_t vertical_neon(const uint8_t* const* rows, const int16_t* w, int taps, size_t n,
                     uint8_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    int32x4_t a0 = vdupq_n_s32(kHalf), a1 = a0, a2 = a0, a3 = a0;
    for (int k = 0; k < taps; ++k) {
      const uint8x16_t v = vld1q_u8(rows[k] + i);
      const int16x8_t lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v)));
      const int16x8_t hi = vreinterpretq_s16_u16(vmovl_high_u8(v));
      a0 = vmlal_n_s16(a0, vget_low_s16(lo), w[k]);
      a1 = vmlal_high_n_s16(a1, lo, w[k]);
      a2 = vmlal_n_s16(a2, vget_low_s16(hi), w[k]);
      a3 = vmlal_high_n_s16(a3, hi, w[k]);
    }
    const int16x8_t s0 = vcombine_s16(vqshrn_n_s32(a0, kBits), vqshrn_n_s32(a1, kBits));
    const int16x8_t s1 = vcombine_s16(vqshrn_n_s32(a2, kBits), vqshrn_n_s32(a3, kBits));
    vst1q_u8(out + i, vcombine_u8(vqmovun_s16(s0), vqmovun_s16(s1)));
  }
  return i;
}

#endif  // STOKER_RESIZE_NEON

}  // namespace

bool cpu_has_avx2() noexcept {
#if defined(STOKER_RESIZE_AVX2)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

bool resize_kernel_available(ResizeKernel kernel) noexcept {
  switch (kernel) {
    case ResizeKernel::kScalar: return true;
    case ResizeKernel::kAvx2: return cpu_has_avx2();
#if defined(STOKER_RESIZE_NEON)
    case ResizeKernel::kNeon: return true;
#else
    case ResizeKernel::kNeon: return false;
#endif
  }
  return false;
}

ResizeKernel best_resize_kernel() noexcept {
  if (resize_kernel_available(ResizeKernel::kAvx2)) return ResizeKernel::kAvx2;
  if (resize_kernel_available(ResizeKernel::kNeon)) return ResizeKernel::kNeon;
  return ResizeKernel::kScalar;
}

void Resizer::compute(Coeffs& c, Scratch& s, int out_n, const ResizeAxis& a, bool flip,
                      int align) {
  const double scale = a.length / out_n;
  const double fs = std::max(scale, 1.0);
  const double support = fs;  // triangle filter radius 1, widened by the downscale
  const int span = a.clip_hi - a.clip_lo;
  // First pass: the tap ranges, to size the table.
  c.first.resize(out_n);
  int max_taps = 1;
  s.lo.resize(out_n);
  s.hi.resize(out_n);
  std::vector<int>& lo = s.lo;
  std::vector<int>& hi = s.hi;
  for (int i = 0; i < out_n; ++i) {
    const double center = a.start + (i + 0.5) * scale;
    int l = static_cast<int>(std::floor(center - support + 0.5));
    int h = static_cast<int>(std::floor(center + support + 0.5));
    l = std::max(l, a.clip_lo);
    h = std::min(h, a.clip_hi);
    if (h <= l) {  // window edge outside the clip range: nearest pixel
      l = std::clamp(static_cast<int>(std::floor(center)), a.clip_lo, a.clip_hi - 1);
      h = l + 1;
    }
    lo[i] = l;
    hi[i] = h;
    max_taps = std::max(max_taps, h - l);
  }
  int taps = (max_taps + align - 1) / align * align;
  if (taps > span) taps = span;
  c.taps = taps;
  c.weight.assign(static_cast<size_t>(out_n) * taps, 0);
  s.w.resize(taps);
  std::vector<double>& wf = s.w;
  for (int i = 0; i < out_n; ++i) {
    const int dst = flip ? out_n - 1 - i : i;
    const double center = a.start + (i + 0.5) * scale;
    int first = lo[i];
    int shift = 0;
    if (first + taps > a.clip_hi) {  // keep the padded taps inside the clip range
      shift = first + taps - a.clip_hi;
      first -= shift;
    }
    double sum = 0;
    const int n = hi[i] - lo[i];
    for (int k = 0; k < n; ++k) {
      const double x = (lo[i] + k - center + 0.5) / fs;
      const double v = std::max(0.0, 1.0 - std::fabs(x));
      wf[k] = v;
      sum += v;
    }
    int16_t* w = &c.weight[static_cast<size_t>(dst) * taps];
    if (sum <= 0) {
      w[shift] = kOne;
    } else {
      int isum = 0, best = 0;
      for (int k = 0; k < n; ++k) {
        const int q = static_cast<int>(std::lround(wf[k] / sum * kOne));
        w[shift + k] = static_cast<int16_t>(q);
        isum += q;
        if (q > w[shift + best]) best = k;
      }
      w[shift + best] = static_cast<int16_t>(w[shift + best] + (kOne - isum));
    }
    c.first[dst] = first;
  }
}

void Resizer::resize(const uint8_t* src, size_t src_stride, int src_w, int src_h,
                     const ResizeAxis& ax, const ResizeAxis& ay, bool flip, uint8_t* dst,
                     int dst_w, int dst_h, ResizeKernel kernel) {
  assert(ax.clip_lo >= 0 && ax.clip_hi <= src_w && ax.clip_lo < ax.clip_hi);
  assert(ay.clip_lo >= 0 && ay.clip_hi <= src_h && ay.clip_lo < ay.clip_hi);
  assert(dst_w > 0 && dst_h > 0);
  (void)src_h;
  // A kernel this build or CPU lacks falls back to scalar (the bytes are the same).
  if (!resize_kernel_available(kernel)) kernel = ResizeKernel::kScalar;
  const bool avx = kernel == ResizeKernel::kAvx2;
  const bool neon = kernel == ResizeKernel::kNeon;
  compute(h_, scratch_, dst_w, ax, flip, 4);
  compute(v_, scratch_, dst_h, ay, false, 1);

  // Rows of the source the vertical pass reads.
  const int row_lo = v_.first[0];
  const int row_hi = v_.first[dst_h - 1] + v_.taps;
  const int rows = row_hi - row_lo;
  const size_t trow = static_cast<size_t>(dst_w) * 3;
  const size_t tstride = trow + 32;
  tmp_.resize(tstride * rows);

  // Horizontal pass.
  const int ht = h_.taps;
  const bool h_avx = avx && ht % 4 == 0;
  if (h_avx) {
    // Per pixel pair, per tap quad: 16 int16 for lane 0 (pixel x) and lane 1 (x + 1),
    // interleaved as [A(x) A(x+1)] [B(x) B(x+1)], A = [w0 w1 w0 w1 w0 w1 0 0].
    const int quads = ht / 4;
    const int pairs = dst_w / 2;
    h_avx_.assign(static_cast<size_t>(pairs) * quads * 32, 0);
    for (int pr = 0; pr < pairs; ++pr) {
      for (int q = 0; q < quads; ++q) {
        int16_t* o = &h_avx_[(static_cast<size_t>(pr) * quads + q) * 32];
        for (int lane = 0; lane < 2; ++lane) {
          const int16_t* w = &h_.weight[static_cast<size_t>(2 * pr + lane) * ht + 4 * q];
          for (int c = 0; c < 3; ++c) {
            o[lane * 8 + 2 * c] = w[0];
            o[lane * 8 + 2 * c + 1] = w[1];
            o[16 + lane * 8 + 2 * c] = w[2];
            o[16 + lane * 8 + 2 * c + 1] = w[3];
          }
        }
      }
    }
  }
  const uint8_t* src_rows = src + static_cast<size_t>(row_lo) * src_stride;
  const bool h_neon = neon && ht % 4 == 0;
  if (h_avx) {
#if defined(STOKER_RESIZE_AVX2)
    // A 16-byte load at a pixel's last tap quad must stay inside the source row.
    const int pairs = dst_w / 2;
    pair_safe_.resize(pairs);
    auto safe = [&](int f) { return (f + ht - 4) * 3 + 16 <= src_w * 3; };
    for (int pr = 0; pr < pairs; ++pr) {
      pair_safe_[pr] = safe(h_.first[2 * pr]) && safe(h_.first[2 * pr + 1]);
    }
    horizontal_avx2_rows(src_rows, src_stride, rows, h_.first.data(), h_avx_.data(),
                         pair_safe_.data(), h_.weight.data(), ht, dst_w, tmp_.data(), tstride);
#endif
  } else if (h_neon) {
#if defined(STOKER_RESIZE_NEON)
    // vld3 reads whole groups of 8 pixels: the last group must stay inside the source row.
    const int span = (ht + 7) / 8 * 8;
    pair_safe_.resize(dst_w);
    for (int x = 0; x < dst_w; ++x) pair_safe_[x] = h_.first[x] + span <= src_w;
    horizontal_neon_rows(src_rows, src_stride, rows, h_.first.data(), pair_safe_.data(),
                         h_.weight.data(), ht, dst_w, tmp_.data(), tstride);
#endif
  } else {
    for (int r = 0; r < rows; ++r) {
      const uint8_t* srow = src_rows + static_cast<size_t>(r) * src_stride;
      uint8_t* out = &tmp_[static_cast<size_t>(r) * tstride];
      for (int x = 0; x < dst_w; ++x) {
        horizontal_scalar_pixel(srow, h_.first[x], &h_.weight[static_cast<size_t>(x) * ht], ht,
                                out + 3 * x);
      }
    }
  }

  // Vertical pass.
  const int vt = v_.taps;
  rows_.resize(vt);
  const uint8_t** rowp = rows_.data();
  for (int y = 0; y < dst_h; ++y) {
    for (int k = 0; k < vt; ++k) {
      rowp[k] = &tmp_[static_cast<size_t>(v_.first[y] - row_lo + k) * tstride];
    }
    const int16_t* w = &v_.weight[static_cast<size_t>(y) * vt];
    uint8_t* out = dst + static_cast<size_t>(y) * trow;
    size_t done = 0;
#if defined(STOKER_RESIZE_AVX2)
    if (avx) done = vertical_avx2(rowp, w, vt, trow, out);
#elif defined(STOKER_RESIZE_NEON)
    if (neon) done = vertical_neon(rowp, w, vt, trow, out);
#endif
    vertical_scalar(rowp, w, vt, done, trow, out);
  }
}

}  // namespace stoker::internal
