#include "decode/webp_decode.h"

#include <webp/decode.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "decode/raster_decode.h"
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

namespace {

class WebpSource final : public RasterSource {
 public:
  ImageInfo header(std::span<const uint8_t> bytes, uint64_t max_pixels) override {
    return webp_header(bytes, max_pixels);
  }
  PixelRect widen(const ImageInfo& info, PixelRect want, int) const override {
    // libwebp's lossy cropping upsamples chroma at the crop's edges without the
    // neighbour outside it, so the edge pixels differ from a full decode; two pixels
    // more each side, starting on an even pixel (chroma is half resolution), make every
    // pixel we use bit-identical to a full decode (tests compare them).
    return PixelRect{std::max(0, want.x0 - 2) & ~1, std::min(info.width, want.x1 + 2),
                     std::max(0, want.y0 - 2) & ~1, std::min(info.height, want.y1 + 2)};
  }
  void load(std::span<const uint8_t> bytes, const ImageInfo&, PixelRect r, int channels, uint8_t* out,
            size_t stride, size_t out_size) override {
    if (channels == 1) {
      throw Error(ErrorCode::kInvalidArgument,
                  "WebP: a one-channel output needs a gray or palette PNG (or a gray JPEG); "
                  "WebP stores colour");
    }
    webp_decode_rgb(bytes, r.x0, r.y0, r.x1 - r.x0, r.y1 - r.y0, out, stride, out_size);
  }
};

bool webp_sniff(std::span<const uint8_t> b) noexcept {
  return b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0;
}

// The RIFF size covers the rest of the file; the first chunk is a VP8 variant.
std::string webp_check_header(std::span<const uint8_t> b, ImageHeaderFacts*) {
  const uint64_t riff = static_cast<uint64_t>(b[4]) | (static_cast<uint64_t>(b[5]) << 8) |
                        (static_cast<uint64_t>(b[6]) << 16) | (static_cast<uint64_t>(b[7]) << 24);
  if (riff + 8 > b.size()) return "truncated WebP (RIFF size " + std::to_string(riff) + ")";
  if (b.size() < 20 || (std::memcmp(&b[12], "VP8 ", 4) != 0 && std::memcmp(&b[12], "VP8L", 4) != 0 &&
                        std::memcmp(&b[12], "VP8X", 4) != 0))
    return "WebP without a VP8/VP8L/VP8X chunk";
  return {};
}

constexpr const char* kWebpExtensions[] = {"webp"};

}  // namespace

constinit const ImageFormatRow kWebpFormat{
    .id = ImageFormat::kWebp,
    .media = MediaKind::kImage,
    .name = "webp",
    .display = "WebP",
    .extensions = kWebpExtensions,
    .sniff = webp_sniff,
    .claims = nullptr,
    .probe = probe_raster<WebpSource>,
    .check_header = webp_check_header,
    .check_decodes = check_raster_decodes<WebpSource>,
    .make_decoder = make_raster_decoder<WebpSource>,
};

}  // namespace stoker::internal
