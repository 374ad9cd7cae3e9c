// PNG: the format table's row (kPngFormat), and its decode through libspng.
//
// Why libspng (Debian libspng0 0.7.3) rather than libpng: one call decodes a whole
// image into a caller-sized buffer in the format we ask for (RGB8 from any colour type
// and bit depth: palette lookup, gray replication, 16 -> 8 bits), errors come back as
// return codes instead of libpng's setjmp/longjmp, and its decoder is at least as fast
// (bench/README.md has the figure against a plain libspng loop).
//
// Threading: a PngDecoder belongs to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "decode/formats.h"
#include "stoker/image.h"

struct spng_ctx;

namespace stoker::internal {

/// PNG's row of the format table (formats.h).
extern const ImageFormatRow kPngFormat;

/// One PNG at a time: read_header, then at most one decode_*. Owns the spng context
/// (created per image: libspng contexts are single-use).
class PngDecoder {
 public:
  PngDecoder() = default;
  ~PngDecoder();
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;

  /// Parses the signature and IHDR (and, for palette images, nothing more). kDataLoss
  /// when they are bad, kResourceExhausted above max_pixels. The bytes must outlive
  /// the decode.
  ImageInfo read_header(std::span<const uint8_t> png, uint64_t max_pixels);

  /// Decodes the whole image as RGB (rows width * 3 bytes apart) into `out`, which holds
  /// width * height * 3 bytes. kDataLoss for corrupt or truncated data.
  void decode_rgb(uint8_t* out, size_t out_size);

  /// Decodes only the first `rows` rows as RGB (the rows below are not read, so damage
  /// there goes unnoticed, as with JPEG); the whole image when interlaced.
  void decode_rgb_rows(uint8_t* out, size_t out_size, int rows);

  /// Decodes the stored single-channel values (gray level, or palette index; the gray of
  /// gray+alpha) as one byte a pixel into `out` (width * height bytes). kInvalidArgument
  /// for colour images and for 16-bit values above 255.
  void decode_single(uint8_t* out, size_t out_size);

 private:
  void reset();
  void finish();
  spng_ctx* ctx_ = nullptr;
  ImageInfo info_;
  int color_type_ = 0;
  bool interlaced_ = false;
  std::vector<uint8_t> raw_;  // stored rows of decode_single, reused
};

}  // namespace stoker::internal
