#include "decode/raster_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "decode/webp_decode.h"
#include "stoker/error.h"

namespace stoker::internal {

void check_out_size(const char* what, size_t out_size, size_t need) {
  if (out_size < need) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": output holds " +
                                                 std::to_string(out_size) + " bytes, needs " +
                                                 std::to_string(need));
  }
}

ImageInfo RasterDecoder::header(ImageFormat f, std::span<const uint8_t> bytes,
                                uint64_t max_pixels) {
  return f == ImageFormat::kPng ? png_.read_header(bytes, max_pixels)
                                : webp_header(bytes, max_pixels);
}

void RasterDecoder::load(ImageFormat f, std::span<const uint8_t> bytes, const ImageInfo& info,
                         int x0, int x1, int y0, int y1, int channels) {
  if (f == ImageFormat::kPng) {
    // libspng decodes rows in order and cannot skip columns: take every row down to
    // the last one needed, at full width.
    x0 = 0;
    y0 = 0;
    x1 = info.width;
    if (channels == 1) y1 = info.height;  // the as-stored path decodes whole images
  } else {
    // libwebp's lossy cropping upsamples chroma at the crop's edges without the
    // neighbour outside it, so the edge pixels differ from a full decode; two pixels
    // more each side, starting on an even pixel (chroma is half resolution), make every
    // pixel we use bit-identical to a full decode (tests compare them).
    x0 = std::max(0, x0 - 2) & ~1;
    y0 = std::max(0, y0 - 2) & ~1;
    x1 = std::min(info.width, x1 + 2);
    y1 = std::min(info.height, y1 + 2);
  }
  bx_ = x0;
  by_ = y0;
  bw_ = x1 - x0;
  bh_ = y1 - y0;
  stride_ = static_cast<size_t>(bw_) * channels;
  buf_.resize(stride_ * bh_);
  if (f == ImageFormat::kPng) {
    if (channels == 1) {
      png_.decode_single(buf_.data(), buf_.size());
    } else {
      png_.decode_rgb_rows(buf_.data(), buf_.size(), y1);
    }
    return;
  }
  if (channels == 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "WebP: a one-channel output needs a gray or palette PNG (or a gray JPEG); "
                "WebP stores colour");
  }
  webp_decode_rgb(bytes, x0, y0, bw_, bh_, buf_.data(), stride_, buf_.size());
}

void RasterDecoder::apply(const CropPlan& p, int channels, Interpolation interp, uint8_t* out,
                          int out_w, int out_h, Resizer& resizer, ResizeKernel kernel) {
  const int cx0 = std::max(p.clip_x0, bx_) - bx_, cx1 = std::min(p.clip_x1, bx_ + bw_) - bx_;
  const int cy0 = std::max(p.clip_y0, by_) - by_, cy1 = std::min(p.clip_y1, by_ + bh_) - by_;
  const ResizeAxis ax{p.x0 - bx_, p.w, cx0, cx1};
  const ResizeAxis ay{p.y0 - by_, p.h, cy0, cy1};
  resample(buf_.data(), stride_, bw_, bh_, channels, ax, ay, p.flip, interp, out, out_w, out_h,
           resizer, kernel, scratch_);
}

namespace {
DecodeResult result_of(const ImageInfo& info, const CropPlan& p, int out_w, int out_h) {
  DecodeResult r;
  r.format = info.format;
  r.src_width = info.width;
  r.src_height = info.height;
  r.out_width = out_w;
  r.out_height = out_h;
  r.crop_x = static_cast<int>(std::lround(p.x0));
  r.crop_y = static_cast<int>(std::lround(p.y0));
  r.crop_w = static_cast<int>(std::lround(p.w));
  r.crop_h = static_cast<int>(std::lround(p.h));
  r.flipped = p.flip;
  return r;
}
}  // namespace

DecodeResult RasterDecoder::decode(ImageFormat f, std::span<const uint8_t> bytes,
                                   const ImageTransform& t, uint64_t seed, uint8_t* out,
                                   size_t out_size, Resizer& resizer, ResizeKernel kernel) {
  const ImageInfo info = header(f, bytes, t.max_pixels);
  const int W = info.width, H = info.height;
  if (t.kind == ImageTransform::Kind::kNone) {
    const size_t need = static_cast<size_t>(W) * H * 3;
    check_out_size("decode", out_size, need);
    if (f == ImageFormat::kPng) {
      png_.decode_rgb(out, need);
    } else {
      webp_decode_rgb(bytes, 0, 0, W, H, out, static_cast<size_t>(W) * 3, need);
    }
    CropPlan p;
    p.w = W;
    p.h = H;
    DecodeResult r = result_of(info, p, W, H);
    r.geometry = geometry_from_plan(p, W, H, W, H, true);
    return r;
  }
  check_out_size("decode", out_size, static_cast<size_t>(t.size) * t.size * 3);
  const CropPlan p = t.kind == ImageTransform::Kind::kTrain ? plan_train_crop(W, H, t, seed)
                                                            : plan_eval_crop(W, H, t);
  int x0, x1, y0, y1;
  needed_range(p.x0, p.w, t.size, p.clip_x0, p.clip_x1, &x0, &x1);
  needed_range(p.y0, p.h, t.size, p.clip_y0, p.clip_y1, &y0, &y1);
  load(f, bytes, info, x0, x1, y0, y1, 3);
  apply(p, 3, Interpolation::kAntialiased, out, t.size, t.size, resizer, kernel);
  DecodeResult r = result_of(info, p, t.size, t.size);
  r.geometry = geometry_from_plan(p, W, H, t.size, t.size, t.kind == ImageTransform::Kind::kTrain);
  return r;
}

DecodeResult RasterDecoder::decode_region(ImageFormat f, std::span<const uint8_t> bytes, int x,
                                          int y, int w, int h, uint8_t* out, size_t out_size,
                                          uint64_t max_pixels) {
  const ImageInfo info = header(f, bytes, max_pixels);
  const int W = info.width, H = info.height;
  if (x < 0 || y < 0 || w < 1 || h < 1 || x > W - w || y > H - h) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_region: rectangle " + std::to_string(w) + "x" + std::to_string(h) +
                    "+" + std::to_string(x) + "+" + std::to_string(y) + " is outside the " +
                    std::to_string(W) + "x" + std::to_string(H) + " image");
  }
  const size_t row = static_cast<size_t>(w) * 3;
  check_out_size("decode_region", out_size, row * h);
  load(f, bytes, info, x, x + w, y, y + h, 3);
  for (int r = 0; r < h; ++r) {
    std::memcpy(out + r * row, buf_.data() + (y + r - by_) * stride_ + (x - bx_) * 3, row);
  }
  CropPlan p;
  p.x0 = x;
  p.y0 = y;
  p.w = w;
  p.h = h;
  DecodeResult r = result_of(info, p, w, h);
  r.geometry = geometry_from_plan(p, W, H, w, h, true);
  return r;
}

DecodeResult RasterDecoder::decode_with(ImageFormat f, std::span<const uint8_t> bytes,
                                        const ImageGeometry& g, const FollowOutput& o,
                                        uint8_t* out, size_t out_size, Resizer& resizer,
                                        ResizeKernel kernel) {
  const ImageInfo info = header(f, bytes, o.max_pixels);
  const int W = info.width, H = info.height;
  const CropPlan p = plan_from_geometry(g, W, H);
  const int ow = o.width > 0 ? o.width : g.out_width;
  const int oh = o.height > 0 ? o.height : g.out_height;
  check_out_size("decode_with", out_size, static_cast<size_t>(ow) * oh * o.channels);
  int x0, x1, y0, y1;
  needed_range(p.x0, p.w, ow, p.clip_x0, p.clip_x1, &x0, &x1);
  needed_range(p.y0, p.h, oh, p.clip_y0, p.clip_y1, &y0, &y1);
  load(f, bytes, info, x0, x1, y0, y1, o.channels);
  apply(p, o.channels, o.interpolation, out, ow, oh, resizer, kernel);
  DecodeResult r = result_of(info, p, ow, oh);
  r.geometry = geometry_from_plan(p, W, H, ow, oh, g.clip_to_window);
  return r;
}

}  // namespace stoker::internal
