// WebP: the format table's row (kWebpFormat), and its decode through libwebp's
// advanced API (WebPDecoderConfig).
//
// Only still images are read (an animation is kDataLoss: no single frame is "the
// image"). libwebp's use_cropping decodes just a rectangle, which is what the
// transforms need (the filter reads only the crop and a few pixels around it); lossy
// output near a crop's edges differs from a full decode, so callers widen the rectangle
// (webp_decode.cc says by how much). use_scaling is not used: its filter differs from
// the transform's resize.
//
// Threading: free functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "decode/formats.h"
#include "stoker/image.h"

namespace stoker::internal {

/// WebP's row of the format table (formats.h).
extern const ImageFormatRow kWebpFormat;

/// Header facts; kDataLoss when the bitstream header is bad, kResourceExhausted above
/// max_pixels.
ImageInfo webp_header(std::span<const uint8_t> webp, uint64_t max_pixels);

/// Decodes the rectangle [x, x+w) x [y, y+h) (inside the image) as RGB into `out`, rows
/// `stride` bytes apart (>= w * 3), `out_size` bytes in all. Alpha is dropped.
/// kDataLoss for corrupt or truncated data, naming libwebp's status.
void webp_decode_rgb(std::span<const uint8_t> webp, int x, int y, int w, int h, uint8_t* out,
                     size_t stride, size_t out_size);

}  // namespace stoker::internal
