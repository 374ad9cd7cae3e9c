#include "decode/image_check.h"

#include <vector>

#include "decode/jpeg_handle.h"
#include "decode/png_decode.h"
#include "decode/webp_decode.h"
#include "stoker/error.h"
#include "stoker/image.h"

namespace stoker::internal {

namespace {

// Header and entropy decode into coefficient arrays: no IDCT, no colour conversion.
void check_jpeg(std::span<const uint8_t> jpeg, uint64_t max_pixels) {
  JpegDecompressor dec;
  JpegAbortGuard guard(dec);
  jpeg_decompress_struct* c = dec.get();
  jpeg_guarded(dec.err(), "JPEG", [&] {
    jpeg_mem_src(c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(c, TRUE);
  });
  check_pixels("JPEG", c->image_width, c->image_height, max_pixels);
  jpeg_guarded(dec.err(), "JPEG", [&] {
    jpeg_read_coefficients(c);
    jpeg_finish_decompress(c);
  });
  check_fast_crop_index(jpeg);  // throws when an index is there and wrong
}

}  // namespace

std::string check_image_decodes(std::span<const uint8_t> image, uint64_t max_pixels) {
  try {
    switch (sniff_format(image)) {
      case ImageFormat::kJpeg: check_jpeg(image, max_pixels); break;
      case ImageFormat::kPng: {
        PngDecoder png;
        const ImageInfo info = png.read_header(image, max_pixels);
        std::vector<uint8_t> rgb(static_cast<size_t>(info.width) * info.height * 3);
        png.decode_rgb(rgb.data(), rgb.size());
        break;
      }
      case ImageFormat::kWebp: {
        const ImageInfo info = webp_header(image, max_pixels);
        const size_t stride = static_cast<size_t>(info.width) * 3;
        std::vector<uint8_t> rgb(stride * info.height);
        webp_decode_rgb(image, 0, 0, info.width, info.height, rgb.data(), stride, rgb.size());
        break;
      }
      default: return "not an image (JPEG, PNG or WebP magic bytes expected)";
    }
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace stoker::internal
