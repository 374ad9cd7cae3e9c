// Test and benchmark fixtures: PNG (libspng encoder) and WebP (libwebp encoder) images
// made in memory, so no image files live in git. Here rather than in tests/ so the
// benchmarks include no test header. Header-only; link spng and libwebp.
#pragma once

#include <spng.h>
#include <webp/encode.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoker::testing {

/// PNG colour types (the file's IHDR values).
enum class PngColor : uint8_t { kGray = 0, kRgb = 2, kPalette = 3, kGrayAlpha = 4, kRgba = 6 };

/// Encodes `stored` (rows as the PNG stores them: packed at `bit_depth`, 16-bit samples
/// host-endian as libspng's SPNG_FMT_PNG wants) as a PNG. `palette` is RGB triples for
/// kPalette. `interlaced` writes Adam7.
inline std::vector<uint8_t> encode_png(const std::vector<uint8_t>& stored, int w, int h,
                                       PngColor color, int bit_depth,
                                       const std::vector<uint8_t>& palette = {},
                                       bool interlaced = false) {
  spng_ctx* enc = spng_ctx_new(SPNG_CTX_ENCODER);
  auto fail = [&](const char* what, int ret) {
    spng_ctx_free(enc);
    throw std::runtime_error(std::string("encode_png ") + what + ": " + spng_strerror(ret));
  };
  spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(w);
  ihdr.height = static_cast<uint32_t>(h);
  ihdr.bit_depth = static_cast<uint8_t>(bit_depth);
  ihdr.color_type = static_cast<uint8_t>(color);
  ihdr.interlace_method = interlaced ? SPNG_INTERLACE_ADAM7 : SPNG_INTERLACE_NONE;
  int ret = spng_set_ihdr(enc, &ihdr);
  if (ret != 0) fail("ihdr", ret);
  if (color == PngColor::kPalette) {
    spng_plte plte{};
    plte.n_entries = static_cast<uint32_t>(palette.size() / 3);
    for (uint32_t i = 0; i < plte.n_entries; ++i) {
      plte.entries[i].red = palette[3 * i];
      plte.entries[i].green = palette[3 * i + 1];
      plte.entries[i].blue = palette[3 * i + 2];
    }
    ret = spng_set_plte(enc, &plte);
    if (ret != 0) fail("plte", ret);
  }
  ret = spng_encode_image(enc, stored.data(), stored.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  if (ret != 0) fail("encode", ret);
  size_t len = 0;
  void* buf = spng_get_png_buffer(enc, &len, &ret);
  if (buf == nullptr) fail("buffer", ret);
  std::vector<uint8_t> png(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + len);
  std::free(buf);
  spng_ctx_free(enc);
  return png;
}

/// 8-bit RGB PNG of `rgb` (w * h * 3 bytes).
inline std::vector<uint8_t> encode_png_rgb(const std::vector<uint8_t>& rgb, int w, int h) {
  return encode_png(rgb, w, h, PngColor::kRgb, 8);
}

/// WebP of `rgb`: lossless, or lossy at `quality` (0..100).
inline std::vector<uint8_t> encode_webp_rgb(const std::vector<uint8_t>& rgb, int w, int h,
                                            bool lossless, float quality = 90) {
  uint8_t* out = nullptr;
  const size_t n = lossless ? WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &out)
                            : WebPEncodeRGB(rgb.data(), w, h, w * 3, quality, &out);
  if (n == 0) throw std::runtime_error("encode_webp_rgb failed");
  std::vector<uint8_t> webp(out, out + n);
  WebPFree(out);
  return webp;
}

}  // namespace stoker::testing
