#include "decode/raster_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "stoker/error.h"

namespace stoker::internal {

void RasterDecoder::load(std::span<const uint8_t> bytes, const ImageInfo& info, PixelRect want, int channels) {
  const PixelRect r = source_->widen(info, want, channels);
  bx_ = r.x0;
  by_ = r.y0;
  bw_ = r.x1 - r.x0;
  bh_ = r.y1 - r.y0;
  stride_ = static_cast<size_t>(bw_) * channels;
  buf_.resize(stride_ * bh_);
  source_->load(bytes, info, r, channels, buf_.data(), stride_, buf_.size());
}

void RasterDecoder::apply(const CropPlan& p, int channels, Interpolation interp, uint8_t* out, int out_w,
                          int out_h, ResampleTools& tools) {
  const int cx0 = std::max(p.clip_x0, bx_) - bx_, cx1 = std::min(p.clip_x1, bx_ + bw_) - bx_;
  const int cy0 = std::max(p.clip_y0, by_) - by_, cy1 = std::min(p.clip_y1, by_ + bh_) - by_;
  const ResizeAxis ax{p.x0 - bx_, p.w, cx0, cx1};
  const ResizeAxis ay{p.y0 - by_, p.h, cy0, cy1};
  resample(buf_.data(), stride_, bw_, bh_, channels, ax, ay, p.flip, interp, out, out_w, out_h, tools.resizer,
           tools.kernel, tools.geometry);
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

DecodeResult RasterDecoder::decode(std::span<const uint8_t> bytes, const ImageTransform& t, uint64_t seed,
                                   uint8_t* out, size_t out_size, ResampleTools& tools) {
  const ImageInfo info = source_->header(bytes, t.max_pixels);
  const int W = info.width, H = info.height;
  if (t.kind == ImageTransform::Kind::kNone) {
    const size_t need = static_cast<size_t>(W) * H * 3;
    check_out_size("decode", out_size, need);
    source_->load(bytes, info, PixelRect{0, W, 0, H}, 3, out, static_cast<size_t>(W) * 3, need);
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
  load(bytes, info, PixelRect{x0, x1, y0, y1}, 3);
  apply(p, 3, Interpolation::kAntialiased, out, t.size, t.size, tools);
  DecodeResult r = result_of(info, p, t.size, t.size);
  r.geometry = geometry_from_plan(p, W, H, t.size, t.size, t.kind == ImageTransform::Kind::kTrain);
  return r;
}

DecodeResult RasterDecoder::decode_region(std::span<const uint8_t> bytes, int x, int y, int w, int h,
                                          uint8_t* out, size_t out_size, uint64_t max_pixels) {
  const ImageInfo info = source_->header(bytes, max_pixels);
  const int W = info.width, H = info.height;
  if (x < 0 || y < 0 || w < 1 || h < 1 || x > W - w || y > H - h) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_region: rectangle " + std::to_string(w) + "x" + std::to_string(h) +
                    "+" + std::to_string(x) + "+" + std::to_string(y) + " is outside the " +
                    std::to_string(W) + "x" + std::to_string(H) + " image");
  }
  const size_t row = static_cast<size_t>(w) * 3;
  check_out_size("decode_region", out_size, row * h);
  load(bytes, info, PixelRect{x, x + w, y, y + h}, 3);
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

DecodeResult RasterDecoder::decode_with(std::span<const uint8_t> bytes, const ImageGeometry& g,
                                        const FollowOutput& o, uint8_t* out, size_t out_size,
                                        ResampleTools& tools) {
  const ImageInfo info = source_->header(bytes, o.max_pixels);
  const int W = info.width, H = info.height;
  const FollowPlan plan = plan_follow(g, o, W, H);
  const CropPlan& p = plan.crop;
  const int ow = plan.out_w, oh = plan.out_h;
  const int x0 = plan.x0, x1 = plan.x1, y0 = plan.y0, y1 = plan.y1;
  check_out_size("decode_with", out_size, static_cast<size_t>(ow) * oh * o.channels);
  load(bytes, info, PixelRect{x0, x1, y0, y1}, o.channels);
  apply(p, o.channels, o.interpolation, out, ow, oh, tools);
  DecodeResult r = result_of(info, p, ow, oh);
  r.geometry = geometry_from_plan(p, W, H, ow, oh, g.clip_to_window);
  return r;
}

}  // namespace stoker::internal
