// The PNG and WebP paths of ImageDecoder: decode (the whole image, or for WebP the
// rectangle the filter reads), then crop + resize with the shared resampler. JPEG keeps
// its own fused path in image.cc; the draws (crop.h) and the resize are the same, so a
// PNG and a JPEG of the same pixels give the same geometry for the same seed.
//
// Threading: a RasterDecoder belongs to one thread at a time (ImageDecoder's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "decode/geometry.h"
#include "decode/png_decode.h"
#include "decode/resize.h"
#include "stoker/image.h"

namespace stoker::internal {

/// kInvalidArgument unless out_size >= need (`what` names the call).
void check_out_size(const char* what, size_t out_size, size_t need);

class RasterDecoder {
 public:
  /// ImageDecoder::decode for f = kPng / kWebp (`t` already validated).
  DecodeResult decode(ImageFormat f, std::span<const uint8_t> bytes, const ImageTransform& t,
                      uint64_t seed, uint8_t* out, size_t out_size, Resizer& resizer,
                      ResizeKernel kernel);
  /// ImageDecoder::decode_region for f = kPng / kWebp.
  DecodeResult decode_region(ImageFormat f, std::span<const uint8_t> bytes, int x, int y, int w,
                             int h, uint8_t* out, size_t out_size, uint64_t max_pixels);
  /// ImageDecoder::decode_with for f = kPng / kWebp.
  DecodeResult decode_with(ImageFormat f, std::span<const uint8_t> bytes, const ImageGeometry& g,
                           const FollowOutput& o, uint8_t* out, size_t out_size,
                           Resizer& resizer, ResizeKernel kernel);

 private:
  ImageInfo header(ImageFormat f, std::span<const uint8_t> bytes, uint64_t max_pixels);
  // Decodes [x0, x1) x [y0, y1) (PNG: always the whole image) with `channels` bytes a
  // pixel into buf_; sets bx_, by_ (the buffer's origin in the image), bw_, stride_.
  void load(ImageFormat f, std::span<const uint8_t> bytes, const ImageInfo& info, int x0,
            int x1, int y0, int y1, int channels);
  // Applies plan `p` (image coordinates) from buf_ to out.
  void apply(const CropPlan& p, int channels, Interpolation interp, uint8_t* out, int out_w,
             int out_h, Resizer& resizer, ResizeKernel kernel);

  PngDecoder png_;
  std::vector<uint8_t> buf_;
  int bx_ = 0, by_ = 0, bw_ = 0, bh_ = 0;
  size_t stride_ = 0;
  GeometryScratch scratch_;
};

}  // namespace stoker::internal
