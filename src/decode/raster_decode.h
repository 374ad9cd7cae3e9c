// The decode path of every format whose library decodes a rectangle of pixels into a
// buffer (PNG, WebP, and any simple format a row adds): the format supplies a
// RasterSource (header, and the pixels of a rectangle), RasterDecoder does the rest
// (crop, resize, Follow) with the shared resampler. JPEG keeps its own fused path in
// jpeg_decode.cc; the draws (crop.h) and the resize are the same, so a PNG and a JPEG
// of the same pixels give the same geometry for the same seed.
//
// Threading: a RasterSource and its RasterDecoder belong to one thread at a time
// (their ImageDecoder's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "decode/formats.h"
#include "decode/geometry.h"
#include "decode/resize.h"
#include "stoker/image.h"

namespace stoker::internal {

/// A rectangle of image pixels, [x0, x1) x [y0, y1).
struct PixelRect {
  int x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

/// One format's pixel access. header() comes first for each image; load() then reads
/// the same bytes (which outlive both calls).
class RasterSource {
 public:
  virtual ~RasterSource() = default;
  /// Header facts; kDataLoss when the header is bad, kResourceExhausted above max_pixels.
  virtual ImageInfo header(std::span<const uint8_t> bytes, uint64_t max_pixels) = 0;
  /// The rectangle load() decodes to give every pixel of `want` exactly as a full decode
  /// would (a superset of it, inside the image).
  virtual PixelRect widen(const ImageInfo& info, PixelRect want, int channels) const = 0;
  /// Decodes `r` (a widen() result) with `channels` bytes a pixel (3: RGB; 1: the stored
  /// single-channel values, kInvalidArgument where the format stores colour) into
  /// `out`, rows `stride` bytes apart, `out_size` bytes in all. kDataLoss for corrupt
  /// or truncated data.
  virtual void load(std::span<const uint8_t> bytes, const ImageInfo& info, PixelRect r, int channels,
                    uint8_t* out, size_t stride, size_t out_size) = 0;
};

/// FormatDecoder over a RasterSource.
class RasterDecoder final : public FormatDecoder {
 public:
  explicit RasterDecoder(std::unique_ptr<RasterSource> source) : source_(std::move(source)) {}

  DecodeResult decode(std::span<const uint8_t> bytes, const ImageTransform& t, uint64_t seed, uint8_t* out,
                      size_t out_size, ResampleTools& tools) override;
  DecodeResult decode_region(std::span<const uint8_t> bytes, int x, int y, int w, int h, uint8_t* out,
                             size_t out_size, uint64_t max_pixels) override;
  DecodeResult decode_with(std::span<const uint8_t> bytes, const ImageGeometry& g, const FollowOutput& o,
                           uint8_t* out, size_t out_size, ResampleTools& tools) override;

 private:
  // Decodes what `want` needs into buf_; sets the buffer's origin and size.
  void load(std::span<const uint8_t> bytes, const ImageInfo& info, PixelRect want, int channels);
  // Applies plan `p` (image coordinates) from buf_ to out.
  void apply(const CropPlan& p, int channels, Interpolation interp, uint8_t* out, int out_w, int out_h,
             ResampleTools& tools);

  std::unique_ptr<RasterSource> source_;
  std::vector<uint8_t> buf_;
  int bx_ = 0, by_ = 0, bw_ = 0, bh_ = 0;
  size_t stride_ = 0;
};

// Row functions for a format that is a RasterSource `S` (default-constructible).

/// ImageFormatRow::probe: the header, without a pixel limit.
template <class S>
ImageInfo probe_raster(std::span<const uint8_t> bytes) {
  S source;
  return source.header(bytes, ~0ull);
}

/// ImageFormatRow::check_decodes: decodes the whole image as RGB.
template <class S>
void check_raster_decodes(std::span<const uint8_t> bytes, uint64_t max_pixels) {
  S source;
  const ImageInfo info = source.header(bytes, max_pixels);
  const size_t stride = static_cast<size_t>(info.width) * 3;
  std::vector<uint8_t> rgb(stride * info.height);
  source.load(bytes, info, PixelRect{0, info.width, 0, info.height}, 3, rgb.data(), stride, rgb.size());
}

/// ImageFormatRow::make_decoder.
template <class S>
std::unique_ptr<FormatDecoder> make_raster_decoder() {
  return std::make_unique<RasterDecoder>(std::make_unique<S>());
}

}  // namespace stoker::internal
