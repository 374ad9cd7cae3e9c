// The front door of include/stoker/image.h: ImageDecoder finds the format's row in the
// table (formats.h) and hands the bytes to that format's decoder, made on first use and
// kept for the decoder's life; probe_image goes through the same rows. The pixel
// conversions of image.h live here too.
#include "stoker/image.h"

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "decode/formats.h"
#include "decode/resize.h"
#include "stoker/error.h"
#include "util/convert.h"

namespace stoker {

namespace {

void validate(const ImageTransform& t) {
  auto bad = [](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument, "ImageTransform: " + why);
  };
  if (t.kind == ImageTransform::Kind::kNone) return;
  if (t.size < 1 || t.size > (1 << 15)) bad("size must be in [1, 32768], got " + std::to_string(t.size));
  if (t.kind == ImageTransform::Kind::kTrain) {
    if (!(t.scale_min > 0) || !(t.scale_min <= t.scale_max) || !std::isfinite(t.scale_max)) {
      bad("need 0 < scale_min <= scale_max");
    }
    if (!(t.ratio_min > 0) || !(t.ratio_min <= t.ratio_max) || !std::isfinite(t.ratio_max)) {
      bad("need 0 < ratio_min <= ratio_max");
    }
    if (!(t.flip_prob >= 0 && t.flip_prob <= 1)) bad("flip_prob must be in [0, 1]");
  } else if (!(t.eval_crop_fraction > 0 && t.eval_crop_fraction <= 1)) {
    bad("eval_crop_fraction must be in (0, 1]");
  }
}

}  // namespace

struct ImageDecoder::Impl {
  internal::ResampleTools tools;
  std::array<std::unique_ptr<internal::FormatDecoder>, internal::kMaxImageFormats + 1> decoders;

  // The decoder of the format that claims `bytes`; kDataLoss when none does.
  internal::FormatDecoder& decoder_for(std::span<const uint8_t> bytes) {
    const internal::ImageFormatRow& row = internal::decoding_row(bytes);
    if (row.media != internal::MediaKind::kImage) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("ImageDecoder: ") + row.display + " is not a still image format");
    }
    std::unique_ptr<internal::FormatDecoder>& d = decoders.at(static_cast<size_t>(row.id));
    if (!d) d = row.make_decoder();
    return *d;
  }
};

ImageDecoder::ImageDecoder() : ImageDecoder(ImageDecoderOptions{}) {}

ImageDecoder::ImageDecoder(const ImageDecoderOptions& options) : impl_(new Impl) {
  impl_->tools.kernel = options.allow_simd ? internal::best_resize_kernel() : internal::ResizeKernel::kScalar;
}

ImageDecoder::~ImageDecoder() = default;
ImageDecoder::ImageDecoder(ImageDecoder&&) noexcept = default;
ImageDecoder& ImageDecoder::operator=(ImageDecoder&&) noexcept = default;

bool ImageDecoder::uses_simd() const noexcept {
  return impl_->tools.kernel != internal::ResizeKernel::kScalar;
}

DecodeResult ImageDecoder::decode(std::span<const uint8_t> jpeg, const ImageTransform& t,
                                  uint64_t sample_seed, uint8_t* out, size_t out_size) {
  validate(t);
  return impl_->decoder_for(jpeg).decode(jpeg, t, sample_seed, out, out_size, impl_->tools);
}

DecodeResult ImageDecoder::decode_region(std::span<const uint8_t> jpeg, int x, int y, int w,
                                         int h, uint8_t* out, size_t out_size,
                                         uint64_t max_pixels) {
  return impl_->decoder_for(jpeg).decode_region(jpeg, x, y, w, h, out, out_size, max_pixels);
}

DecodeResult ImageDecoder::decode_with(std::span<const uint8_t> image, const ImageGeometry& g,
                                       const FollowOutput& o, uint8_t* out, size_t out_size) {
  if (o.channels != 1 && o.channels != 3) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_with: channels must be 1 or 3, got " + std::to_string(o.channels));
  }
  if ((o.width == 0) != (o.height == 0) || o.width < 0 || o.height < 0 || o.width > (1 << 15) ||
      o.height > (1 << 15)) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_with: width and height must both be 0 (the geometry's) or in [1, 32768]");
  }
  return impl_->decoder_for(image).decode_with(image, g, o, out, out_size, impl_->tools);
}

ImageInfo probe_image(std::span<const uint8_t> image) { return internal::decoding_row(image).probe(image); }

// ---- pixel conversion -------------------------------------------------------------------

size_t pixel_format_bytes(int h, int w, PixelFormat fmt) {
  const size_t n = static_cast<size_t>(h) * w * 3;
  switch (fmt) {
    case PixelFormat::kU8HWC:
    case PixelFormat::kU8CHW:
      return n;
    case PixelFormat::kF16CHW:
    case PixelFormat::kF16HWC:
      return n * 2;
    case PixelFormat::kF32CHW:
    case PixelFormat::kF32HWC:
      return n * 4;
  }
  return 0;
}

void convert_pixels(const uint8_t* hwc, int h, int w, PixelFormat fmt, const float mean[3],
                    const float std[3], void* out) {
  const size_t plane = static_cast<size_t>(h) * w;
  if (fmt == PixelFormat::kU8HWC) {
    std::memcpy(out, hwc, plane * 3);
    return;
  }
  if (fmt == PixelFormat::kU8CHW) {
    auto* o = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < plane; ++i) {
      for (int c = 0; c < 3; ++c) o[c * plane + i] = hwc[i * 3 + c];
    }
    return;
  }
  // Per channel lookup table: 256 values, so the output is exactly (x/255 - m)/s in float.
  float lut[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) lut[c][v] = internal::normalise(static_cast<uint8_t>(v), mean[c], std[c]);
  }
  const bool chw = fmt == PixelFormat::kF32CHW || fmt == PixelFormat::kF16CHW;
  auto index = [&](size_t i, int c) { return chw ? c * plane + i : i * 3 + c; };
  if (fmt == PixelFormat::kF32CHW || fmt == PixelFormat::kF32HWC) {
    auto* o = static_cast<float*>(out);
    for (size_t i = 0; i < plane; ++i) {
      for (int c = 0; c < 3; ++c) o[index(i, c)] = lut[c][hwc[i * 3 + c]];
    }
  } else {
    uint16_t hl[3][256];
    for (int c = 0; c < 3; ++c) {
      for (int v = 0; v < 256; ++v) hl[c][v] = internal::float_to_half(lut[c][v]);
    }
    auto* o = static_cast<uint16_t*>(out);
    for (size_t i = 0; i < plane; ++i) {
      for (int c = 0; c < 3; ++c) o[index(i, c)] = hl[c][hwc[i * 3 + c]];
    }
  }
}

}  // namespace stoker
