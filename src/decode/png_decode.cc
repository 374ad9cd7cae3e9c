#include "decode/png_decode.h"

#include <spng.h>

#include <cstring>
#include <string>
#include <vector>

#include "decode/raster_decode.h"
#include "stoker/error.h"

namespace stoker::internal {

namespace {

[[noreturn]] void png_fail(const char* stage, int ret) {
  throw Error(ErrorCode::kDataLoss,
              std::string("PNG ") + stage + ": " + spng_strerror(ret) + " (spng error " +
                  std::to_string(ret) + ")");
}

}  // namespace

PngDecoder::~PngDecoder() { reset(); }

void PngDecoder::reset() {
  if (ctx_ != nullptr) spng_ctx_free(ctx_);
  ctx_ = nullptr;
}

ImageInfo PngDecoder::read_header(std::span<const uint8_t> png, uint64_t max_pixels) {
  reset();
  ctx_ = spng_ctx_new(0);
  if (ctx_ == nullptr) throw Error(ErrorCode::kResourceExhausted, "PNG: spng_ctx_new failed");
  // Bound what ancillary chunks may make libspng allocate (text, ICC, ...): a hostile
  // file could otherwise declare gigabytes of them.
  spng_set_chunk_limits(ctx_, 1u << 24, 1u << 26);
  int ret = spng_set_png_buffer(ctx_, png.data(), png.size());
  if (ret != 0) png_fail("header", ret);
  spng_ihdr ihdr{};
  ret = spng_get_ihdr(ctx_, &ihdr);
  if (ret != 0) png_fail("header", ret);
  check_pixels("PNG", ihdr.width, ihdr.height, max_pixels);
  color_type_ = ihdr.color_type;
  interlaced_ = ihdr.interlace_method != SPNG_INTERLACE_NONE;
  info_ = ImageInfo{};
  info_.format = ImageFormat::kPng;
  info_.width = static_cast<int>(ihdr.width);
  info_.height = static_cast<int>(ihdr.height);
  info_.bit_depth = ihdr.bit_depth;
  switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: info_.channels = 1; break;
    case SPNG_COLOR_TYPE_INDEXED: info_.channels = 1; info_.palette = true; break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: info_.channels = 2; break;
    case SPNG_COLOR_TYPE_TRUECOLOR: info_.channels = 3; break;
    default: info_.channels = 4; break;
  }
  return info_;
}

void PngDecoder::decode_rgb_rows(uint8_t* out, size_t out_size, int rows) {
  if (rows >= info_.height || interlaced_) {  // Adam7 rows arrive pass by pass
    decode_rgb(out, out_size);
    return;
  }
  const size_t row = static_cast<size_t>(info_.width) * 3;
  if (out_size < row * rows) {
    throw Error(ErrorCode::kInvalidArgument, "PNG decode: output too small for the rows");
  }
  int ret = spng_decode_image(ctx_, nullptr, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE);
  if (ret != 0) png_fail("decode", ret);
  for (int y = 0; y < rows; ++y) {
    ret = spng_decode_row(ctx_, out + row * y, row);
    // SPNG_EOI comes with the last row; before it, it means the stream ended early.
    if (ret != 0 && !(ret == SPNG_EOI && y == info_.height - 1)) png_fail("decode", ret);
  }
}

void PngDecoder::decode_rgb(uint8_t* out, size_t out_size) {
  size_t len = 0;
  int ret = spng_decoded_image_size(ctx_, SPNG_FMT_RGB8, &len);
  if (ret != 0) png_fail("decode", ret);
  if (len != static_cast<size_t>(info_.width) * info_.height * 3 || len > out_size) {
    throw Error(ErrorCode::kDataLoss, "PNG decode: libspng wants " + std::to_string(len) +
                                          " bytes for a " + std::to_string(info_.width) + "x" +
                                          std::to_string(info_.height) + " RGB image");
  }
  ret = spng_decode_image(ctx_, out, len, SPNG_FMT_RGB8, 0);
  if (ret != 0) png_fail("decode", ret);
  finish();
}

void PngDecoder::finish() {
  // libspng stops once the pixels are inflated; reading on to IEND checks the last
  // IDAT's CRC and catches a file cut short after its image data.
  const int ret = spng_decode_chunks(ctx_);
  if (ret != 0) png_fail("trailer", ret);
}

void PngDecoder::decode_single(uint8_t* out, size_t out_size) {
  if (info_.channels > 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "PNG: a one-channel output needs a gray or palette PNG; this one stores colour "
                "(colour type " + std::to_string(color_type_) + ")");
  }
  const size_t w = static_cast<size_t>(info_.width), h = static_cast<size_t>(info_.height);
  if (out_size < w * h) {
    throw Error(ErrorCode::kInvalidArgument, "PNG: output too small for the one-channel image");
  }
  // As stored (SPNG_FMT_PNG: rows packed at the file's bit depth, 16-bit host-endian),
  // unpacked here: libspng's G8 would scale sub-byte gray levels to 0..255 and has no
  // index output for palette images.
  size_t len = 0;
  int ret = spng_decoded_image_size(ctx_, SPNG_FMT_PNG, &len);
  if (ret != 0) png_fail("decode", ret);
  const int depth = info_.bit_depth;
  const size_t samples = static_cast<size_t>(info_.channels);
  const size_t row_bytes = (w * samples * depth + 7) / 8;
  if (len != row_bytes * h) {
    throw Error(ErrorCode::kDataLoss, "PNG decode: unexpected stored image size " +
                                          std::to_string(len));
  }
  raw_.resize(len);
  std::vector<uint8_t>& raw = raw_;
  ret = spng_decode_image(ctx_, raw.data(), len, SPNG_FMT_PNG, 0);
  if (ret != 0) png_fail("decode", ret);
  finish();
  for (size_t y = 0; y < h; ++y) {
    const uint8_t* r = raw.data() + y * row_bytes;
    uint8_t* o = out + y * w;
    if (depth == 8) {
      for (size_t x = 0; x < w; ++x) o[x] = r[x * samples];
    } else if (depth == 16) {
      for (size_t x = 0; x < w; ++x) {
        uint16_t v;
        std::memcpy(&v, r + 2 * x * samples, 2);
        if (v > 255) {
          throw Error(ErrorCode::kInvalidArgument,
                      "PNG: 16-bit value " + std::to_string(v) + " at (" + std::to_string(x) +
                          ", " + std::to_string(y) + ") does not fit a one-channel uint8 output");
        }
        o[x] = static_cast<uint8_t>(v);
      }
    } else {  // 1, 2 or 4 bits, gray or palette (no alpha at these depths), MSB first
      const int per = 8 / depth;
      const int mask = (1 << depth) - 1;
      for (size_t x = 0; x < w; ++x) {
        const int shift = 8 - depth * (1 + static_cast<int>(x % per));
        o[x] = static_cast<uint8_t>((r[x / per] >> shift) & mask);
      }
    }
  }
}

namespace {

// libspng decodes rows in order and cannot skip columns: a rectangle costs every row
// down to its last one, at full width.
class PngSource final : public RasterSource {
 public:
  ImageInfo header(std::span<const uint8_t> bytes, uint64_t max_pixels) override {
    return png_.read_header(bytes, max_pixels);
  }
  PixelRect widen(const ImageInfo& info, PixelRect want, int channels) const override {
    // The as-stored (one-channel) path decodes whole images.
    return PixelRect{0, info.width, 0, channels == 1 ? info.height : want.y1};
  }
  void load(std::span<const uint8_t>, const ImageInfo&, PixelRect r, int channels, uint8_t* out, size_t,
            size_t out_size) override {
    if (channels == 1) {
      png_.decode_single(out, out_size);
    } else {
      png_.decode_rgb_rows(out, out_size, r.y1);
    }
  }

 private:
  PngDecoder png_;
};

uint32_t get_u32_be(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | p[3];
}

bool png_sniff(std::span<const uint8_t> b) noexcept {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), png, 8) == 0;
}

// Signature, then the IHDR chunk: length 13, type, non-zero width and height.
std::string png_check_header(std::span<const uint8_t> b, ImageHeaderFacts* facts) {
  if (b.size() < 8 + 8 + 13 + 4) return "truncated PNG";
  if (get_u32_be(&b[8]) != 13 || std::memcmp(&b[12], "IHDR", 4) != 0) return "PNG without an IHDR chunk first";
  if (get_u32_be(&b[16]) == 0 || get_u32_be(&b[20]) == 0) return "PNG with empty dimensions";
  if (facts != nullptr) {
    facts->width = static_cast<int>(get_u32_be(&b[16]));
    facts->height = static_cast<int>(get_u32_be(&b[20]));
  }
  return {};
}

constexpr const char* kPngExtensions[] = {"png"};

}  // namespace

constinit const ImageFormatRow kPngFormat{
    .id = ImageFormat::kPng,
    .media = MediaKind::kImage,
    .name = "png",
    .display = "PNG",
    .extensions = kPngExtensions,
    .sniff = png_sniff,
    .claims = nullptr,
    .probe = probe_raster<PngSource>,
    .check_header = png_check_header,
    .check_decodes = check_raster_decodes<PngSource>,
    .make_decoder = make_raster_decoder<PngSource>,
};

}  // namespace stoker::internal
