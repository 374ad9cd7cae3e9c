// Separable antialiased RGB resize with integer weights (the resize of the image
// transforms).
//
// The filter is the triangle (bilinear) kernel whose support widens with the downscale
// factor, as PIL's and torchvision's antialiased bilinear resize: output pixel i of an
// axis samples the window [start, start + length) at c = start + (i + 0.5) * length / n,
// reading input pixels within max(1, length / n) of c and inside [clip_lo, clip_hi);
// weights are normalised and rounded to 14-bit integers that sum to exactly 1 << 14.
// The horizontal pass runs first (only over the rows the vertical pass needs) into a
// uint8 intermediate; a horizontal flip is folded into its coefficient table.
//
// Three kernels: portable scalar C++; AVX2 on x86-64 (compiled with a target attribute,
// chosen at run time); NEON on aarch64 (part of the base ISA there). They compute the same
// integer sums and give identical bytes.
//
// Threading: a Resizer owns scratch buffers; one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::internal {

enum class ResizeKernel { kScalar, kAvx2, kNeon };

/// True when the CPU supports AVX2 (checked once; false off x86-64).
bool cpu_has_avx2() noexcept;

/// True when this build and CPU can run `kernel` (Resizer::resize runs scalar otherwise).
bool resize_kernel_available(ResizeKernel kernel) noexcept;

/// The fastest available kernel: kAvx2, kNeon, else kScalar.
ResizeKernel best_resize_kernel() noexcept;

/// One axis of a resize, in the source buffer's pixel coordinates.
struct ResizeAxis {
  double start = 0;   ///< window start (may be fractional)
  double length = 0;  ///< window length, > 0
  int clip_lo = 0;    ///< first pixel the filter may read
  int clip_hi = 0;    ///< one past the last; clip_lo < clip_hi <= buffer size
};

class Resizer {
 public:
  /// Resizes the window of `src` (src_w x src_h RGB pixels, rows `src_stride` bytes
  /// apart) to dst_w x dst_h RGB pixels at `dst` (rows dst_w * 3 bytes apart), mirrored
  /// left-right when `flip`. Only pixels inside the clip ranges are read.
  void resize(const uint8_t* src, size_t src_stride, int src_w, int src_h,
              const ResizeAxis& ax, const ResizeAxis& ay, bool flip, uint8_t* dst, int dst_w,
              int dst_h, ResizeKernel kernel);

 private:
  struct Coeffs {
    int taps = 0;                 // weights per output pixel (zero padded)
    std::vector<int> first;       // first input pixel per output pixel
    std::vector<int16_t> weight;  // taps per output pixel
  };

  struct Scratch {
    std::vector<int> lo, hi;
    std::vector<double> w;
  };
  static void compute(Coeffs& c, Scratch& s, int out_n, const ResizeAxis& a, bool flip,
                      int align);

  Coeffs h_, v_;
  Scratch scratch_;
  std::vector<int16_t> h_avx_;  // AVX2 layout of h_, see resize.cc
  std::vector<uint8_t> tmp_;
  std::vector<const uint8_t*> rows_;
  std::vector<uint8_t> pair_safe_;  // per AVX2 pixel pair / NEON pixel: loads stay in the row
};

}  // namespace stoker::internal
