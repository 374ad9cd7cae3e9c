#include "decode/webp_decode.h"

#include <webp/decode.h>

#include <string>

#include "decode/png_decode.h"
#include "stoker/error.h"

namespace stoker::internal {

namespace {

const char* status_name(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data (truncated)";
  }
  return "unknown status";
}

[[noreturn]] void webp_fail(const char* stage, VP8StatusCode s) {
  throw Error(s == VP8_STATUS_OUT_OF_MEMORY ? ErrorCode::kResourceExhausted : ErrorCode::kDataLoss,
              std::string("WebP ") + stage + ": " + status_name(s) + " (VP8 status " +
                  std::to_string(static_cast<int>(s)) + ")");
}

// Frees what libwebp allocated for the output (nothing with external memory, but the
// API asks for the call) on every path out.
struct OutputGuard {
  WebPDecBuffer* b;
  ~OutputGuard() { WebPFreeDecBuffer(b); }
};

}  // namespace

ImageInfo webp_header(std::span<const uint8_t> webp, uint64_t max_pixels) {
  WebPBitstreamFeatures f;
  const VP8StatusCode s = WebPGetFeatures(webp.data(), webp.size(), &f);
  if (s != VP8_STATUS_OK) webp_fail("header", s);
  if (f.has_animation) {
    throw Error(ErrorCode::kDataLoss, "WebP header: animated WebP is not supported (still "
                                      "images only)");
  }
  check_pixels("WebP", static_cast<uint64_t>(f.width), static_cast<uint64_t>(f.height),
               max_pixels);
  ImageInfo info;
  info.format = ImageFormat::kWebp;
  info.width = f.width;
  info.height = f.height;
  info.channels = f.has_alpha ? 4 : 3;
  info.bit_depth = 8;
  return info;
}

void webp_decode_rgb(std::span<const uint8_t> webp, int x, int y, int w, int h, uint8_t* out,
                     size_t stride, size_t out_size) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    throw Error(ErrorCode::kUnavailable, "WebP: libwebp ABI version mismatch");
  }
  OutputGuard guard{&config.output};
  VP8StatusCode s = WebPGetFeatures(webp.data(), webp.size(), &config.input);
  if (s != VP8_STATUS_OK) webp_fail("header", s);
  if (x != 0 || y != 0 || w != config.input.width || h != config.input.height) {
    config.options.use_cropping = 1;
    config.options.crop_left = x;
    config.options.crop_top = y;
    config.options.crop_width = w;
    config.options.crop_height = h;
  }
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out;
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = out_size;
  s = WebPDecode(webp.data(), webp.size(), &config);
  if (s != VP8_STATUS_OK) webp_fail("decode", s);
}

}  // namespace stoker::internal
