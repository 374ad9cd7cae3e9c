// ImageDecoder and the JPEG utilities of include/stoker/image.h. PNG and WebP are
// dispatched to raster_decode.cc at the top of each entry point.
#include "stoker/image.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "decode/crop.h"
#include "decode/geometry.h"
#include "decode/jpeg_handle.h"
#include "decode/raster_decode.h"
#include "decode/webp_decode.h"
#include "decode/resize.h"
#include "decode/restart_index.h"
#include "decode/restart_splice.h"
#include "stoker/error.h"
#include "util/convert.h"

namespace stoker {

using internal::CropPlan;
using internal::JpegAbortGuard;
using internal::JpegDecompressor;
using internal::jpeg_guarded;
using internal::ResizeAxis;
using internal::ResizeKernel;

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

// Adobe applications write CMYK JPEGs inverted (0 = full ink); libjpeg hands the stored
// values through unchanged. saw_Adobe_marker is the customary test for that convention.
void cmyk_to_rgb(const uint8_t* in, uint8_t* out, int n, bool inverted) {
  for (int i = 0; i < n; ++i, in += 4, out += 3) {
    int c = in[0], m = in[1], y = in[2], k = in[3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    out[0] = static_cast<uint8_t>((c * k + 127) / 255);
    out[1] = static_cast<uint8_t>((m * k + 127) / 255);
    out[2] = static_cast<uint8_t>((y * k + 127) / 255);
  }
}

// One axis of a transform in the (possibly DCT-scaled) decoded image.
struct AxisPlan {
  double start, length;  // sampling window
  int need_lo, need_hi;  // pixels the filter reads (inside the clip range)
};

AxisPlan plan_axis(double x0, double len, int clip0, int clip1, int denom, int dim, int size) {
  AxisPlan a;
  a.start = x0 / denom;
  a.length = len / denom;
  int clip_lo = std::min(clip0 / denom, dim - 1);
  int clip_hi = std::min(dim, (clip1 + denom - 1) / denom);
  if (clip_hi <= clip_lo) clip_hi = clip_lo + 1;
  const double support = std::max(a.length / size, 1.0);
  a.need_lo = std::max(clip_lo, static_cast<int>(std::floor(a.start - support)) - 1);
  a.need_hi = std::min(clip_hi, static_cast<int>(std::ceil(a.start + a.length + support)) + 1);
  if (a.need_hi <= a.need_lo) {  // cannot happen for a window inside the clip; be safe
    a.need_lo = clip_lo;
    a.need_hi = clip_hi;
  }
  return a;
}

void check_pixel_limit(uint64_t width, uint64_t height, uint64_t max_pixels) {
  const uint64_t px = width * height;
  if (px > max_pixels) {
    throw Error(ErrorCode::kResourceExhausted,
                "JPEG is " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                    std::to_string(px) + " pixels, above the limit of " +
                    std::to_string(max_pixels));
  }
}

}  // namespace

struct ImageDecoder::Impl {
  JpegDecompressor dec;
  internal::Resizer resizer;
  ResizeKernel kernel = ResizeKernel::kScalar;
  std::vector<uint8_t> region;  // RGB rows of the decoded region, region_w * 3 apart
  std::vector<uint8_t> cmyk_row;
  std::vector<uint8_t> gray;  // one channel of a gray JPEG for decode_with
  internal::RasterDecoder raster;
  internal::GeometryScratch gscratch;
  int region_x = 0, region_w = 0;
  bool cmyk = false;
  internal::RestartLayout layout;  // of the current fast-crop JPEG
  std::vector<uint8_t> spliced;    // the intervals a crop needs, as a JPEG

  // Reads the header; kResourceExhausted above max_pixels (nothing allocated yet).
  void read_header(std::span<const uint8_t> jpeg, uint64_t max_pixels) {
    internal::require_soi(jpeg.data(), jpeg.size());
    jpeg_decompress_struct* c = dec.get();
    jpeg_guarded(dec.err(), "JPEG header", [&] {
      jpeg_mem_src(c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
      jpeg_read_header(c, TRUE);
    });
    check_pixel_limit(c->image_width, c->image_height, max_pixels);
  }

  // Makes libjpeg ready to decode at 1/denom the scaled columns [xs0, xs1) and rows
  // [ys0, ys1) of the fast-crop JPEG described by `layout`, from a splice of only the
  // intervals they need when that is less than the whole file. Returns where the
  // decoded image starts in the original's scaled output (MCU sizes are multiples of 8,
  // so the offsets divide exactly).
  std::pair<int, int> open_splice(std::span<const uint8_t> jpeg, int denom, int xs0, int xs1,
                                  int ys0, int ys1, uint64_t max_pixels) {
    const internal::SpliceRect rect = internal::splice_restart_intervals(
        jpeg, layout, xs0 * denom, std::min(layout.width, xs1 * denom), ys0 * denom,
        std::min(layout.height, ys1 * denom), denom, spliced);
    if (rect.whole) {
      read_header(jpeg, max_pixels);
      prepare(denom);
      return {0, 0};
    }
    read_header(spliced, max_pixels);
    prepare(denom);
    return {rect.x / denom, rect.y / denom};
  }

  // Selects RGB (or CMYK, converted by us) output at 1/denom scale; returns the output
  // dimensions.
  std::pair<int, int> prepare(int denom) {
    jpeg_decompress_struct* c = dec.get();
    cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
    c->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // gray -> RGB replicates in turbo
    c->scale_num = 1;
    c->scale_denom = static_cast<unsigned>(denom);
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    jpeg_guarded(dec.err(), "JPEG decode", [&] { jpeg_calc_output_dimensions(c); });
    return {static_cast<int>(c->output_width), static_cast<int>(c->output_height)};
  }

  // Decodes columns [x0, x1) (libjpeg widens the start to an iMCU boundary: region_x,
  // region_w say what came out) of rows [y0, y1) as RGB into `region`, or into `direct`
  // (rows x1 * 3 bytes apart) when it is given and the columns are the full width.
  void read_region(int x0, int x1, int y0, int y1, uint8_t* direct) {
    jpeg_decompress_struct* c = dec.get();
    assert(direct == nullptr || x0 == 0);
    jpeg_guarded(dec.err(), "JPEG decode", [&] {
      jpeg_start_decompress(c);
      JDIMENSION xoff = static_cast<JDIMENSION>(x0), w = static_cast<JDIMENSION>(x1 - x0);
      if (w < c->output_width) jpeg_crop_scanline(c, &xoff, &w);
      region_x = static_cast<int>(xoff);
      region_w = static_cast<int>(w);
      const size_t stride = static_cast<size_t>(region_w) * 3;
      const int rows = y1 - y0;
      uint8_t* base = direct;
      if (base == nullptr) {
        region.resize(stride * rows);
        base = region.data();
      }
      if (cmyk) cmyk_row.resize(static_cast<size_t>(region_w) * 4);
      if (y0 > 0) jpeg_skip_scanlines(c, static_cast<JDIMENSION>(y0));
      for (int r = 0; r < rows; ++r) {
        JSAMPROW row = cmyk ? cmyk_row.data() : base + stride * r;
        if (jpeg_read_scanlines(c, &row, 1) != 1) {
          std::snprintf(dec.err().message, sizeof(dec.err().message),
                        "no scanline %d returned", y0 + r);
          longjmp(dec.err().jmp, 1);
        }
        if (cmyk) cmyk_to_rgb(cmyk_row.data(), base + stride * r, region_w, c->saw_Adobe_marker);
      }
    });
  }
};

ImageDecoder::ImageDecoder() : ImageDecoder(ImageDecoderOptions{}) {}

ImageDecoder::ImageDecoder(const ImageDecoderOptions& options) : impl_(new Impl) {
  impl_->kernel = options.allow_simd ? internal::best_resize_kernel() : ResizeKernel::kScalar;
}

ImageDecoder::~ImageDecoder() = default;
ImageDecoder::ImageDecoder(ImageDecoder&&) noexcept = default;
ImageDecoder& ImageDecoder::operator=(ImageDecoder&&) noexcept = default;

bool ImageDecoder::uses_simd() const noexcept {
  return impl_->kernel != ResizeKernel::kScalar;
}

DecodeResult ImageDecoder::decode(std::span<const uint8_t> jpeg, const ImageTransform& t,
                                  uint64_t sample_seed, uint8_t* out, size_t out_size) {
  validate(t);
  Impl& im = *impl_;
  const ImageFormat fmt = internal::sniff_format(jpeg);
  if (fmt != ImageFormat::kJpeg) {
    return im.raster.decode(fmt, jpeg, t, sample_seed, out, out_size, im.resizer, im.kernel);
  }
  JpegAbortGuard guard(im.dec);
  const bool indexed = internal::read_restart_layout(jpeg, im.layout);
  DecodeResult r;
  if (indexed) {
    check_pixel_limit(im.layout.width, im.layout.height, t.max_pixels);
    r.src_width = im.layout.width;
    r.src_height = im.layout.height;
  } else {
    im.read_header(jpeg, t.max_pixels);
    r.src_width = static_cast<int>(im.dec.get()->image_width);
    r.src_height = static_cast<int>(im.dec.get()->image_height);
  }
  const int W = r.src_width, H = r.src_height;

  if (t.kind == ImageTransform::Kind::kNone) {
    const size_t need = static_cast<size_t>(W) * H * 3;
    if (out_size < need) {
      throw Error(ErrorCode::kInvalidArgument,
                  "decode: output holds " + std::to_string(out_size) + " bytes, the " +
                      std::to_string(W) + "x" + std::to_string(H) + " image needs " +
                      std::to_string(need));
    }
    if (indexed) im.read_header(jpeg, t.max_pixels);
    im.prepare(1);
    im.read_region(0, W, 0, H, out);
    r.out_width = W;
    r.out_height = H;
    r.crop_w = W;
    r.crop_h = H;
    CropPlan whole;
    whole.w = W;
    whole.h = H;
    r.geometry = internal::geometry_from_plan(whole, W, H, W, H, true);
    return r;
  }

  const size_t need = static_cast<size_t>(t.size) * t.size * 3;
  if (out_size < need) {
    throw Error(ErrorCode::kInvalidArgument, "decode: output holds " + std::to_string(out_size) +
                                                 " bytes, size " + std::to_string(t.size) +
                                                 " needs " + std::to_string(need));
  }
  const CropPlan p = t.kind == ImageTransform::Kind::kTrain
                         ? internal::plan_train_crop(W, H, t, sample_seed)
                         : internal::plan_eval_crop(W, H, t);
  int denom = 1;
  if (t.allow_dct_scaling) {
    for (int d : {4, 2}) {
      if (p.w / d >= t.size && p.h / d >= t.size) {
        denom = d;
        break;
      }
    }
  }
  // libjpeg's scaled output size, ceil(dim / denom).
  int ow = (W + denom - 1) / denom, oh = (H + denom - 1) / denom;
  if (!indexed) std::tie(ow, oh) = im.prepare(denom);
  const AxisPlan ax = plan_axis(p.x0, p.w, p.clip_x0, p.clip_x1, denom, ow, t.size);
  const AxisPlan ay = plan_axis(p.y0, p.h, p.clip_y0, p.clip_y1, denom, oh, t.size);
  // One column of margin each side keeps the needed columns away from the region's
  // edges, where fancy upsampling would replicate chroma instead of reading a neighbour.
  const int xs0 = std::max(0, ax.need_lo - 1), xs1 = std::min(ow, ax.need_hi + 1);
  int sx = 0, sy = 0;
  if (indexed) {
    std::tie(sx, sy) = im.open_splice(jpeg, denom, xs0, xs1, ay.need_lo, ay.need_hi, t.max_pixels);
  }
  im.read_region(xs0 - sx, xs1 - sx, ay.need_lo - sy, ay.need_hi - sy, nullptr);
  im.region_x += sx;
  im.dec.abort();  // release libjpeg's buffers before the resize (the guard's is a no-op)

  ResizeAxis rx{ax.start - im.region_x, ax.length, ax.need_lo - im.region_x,
                ax.need_hi - im.region_x};
  ResizeAxis ry{ay.start - ay.need_lo, ay.length, 0, ay.need_hi - ay.need_lo};
  im.resizer.resize(im.region.data(), static_cast<size_t>(im.region_w) * 3, im.region_w,
                    ay.need_hi - ay.need_lo, rx, ry, p.flip, out, t.size, t.size, im.kernel);
  r.out_width = t.size;
  r.out_height = t.size;
  r.crop_x = static_cast<int>(std::lround(p.x0));
  r.crop_y = static_cast<int>(std::lround(p.y0));
  r.crop_w = static_cast<int>(std::lround(p.w));
  r.crop_h = static_cast<int>(std::lround(p.h));
  r.flipped = p.flip;
  r.scale_denom = denom;
  r.geometry = internal::geometry_from_plan(p, W, H, t.size, t.size,
                                            t.kind == ImageTransform::Kind::kTrain);
  return r;
}

DecodeResult ImageDecoder::decode_region(std::span<const uint8_t> jpeg, int x, int y, int w,
                                         int h, uint8_t* out, size_t out_size,
                                         uint64_t max_pixels) {
  Impl& im = *impl_;
  const ImageFormat fmt = internal::sniff_format(jpeg);
  if (fmt != ImageFormat::kJpeg) {
    return im.raster.decode_region(fmt, jpeg, x, y, w, h, out, out_size, max_pixels);
  }
  JpegAbortGuard guard(im.dec);
  const bool indexed = internal::read_restart_layout(jpeg, im.layout);
  int W, H;
  if (indexed) {
    check_pixel_limit(im.layout.width, im.layout.height, max_pixels);
    W = im.layout.width;
    H = im.layout.height;
  } else {
    im.read_header(jpeg, max_pixels);
    W = static_cast<int>(im.dec.get()->image_width);
    H = static_cast<int>(im.dec.get()->image_height);
  }
  if (x < 0 || y < 0 || w < 1 || h < 1 || x > W - w || y > H - h) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_region: rectangle " + std::to_string(w) + "x" + std::to_string(h) +
                    "+" + std::to_string(x) + "+" + std::to_string(y) + " is outside the " +
                    std::to_string(W) + "x" + std::to_string(H) + " image");
  }
  const size_t need = static_cast<size_t>(w) * h * 3;
  if (out_size < need) {
    throw Error(ErrorCode::kInvalidArgument, "decode_region: output holds " +
                                                 std::to_string(out_size) + " bytes, needs " +
                                                 std::to_string(need));
  }
  const int xs0 = std::max(0, x - 1), xs1 = std::min(W, x + w + 1);
  int sx = 0, sy = 0;
  if (indexed) {
    std::tie(sx, sy) = im.open_splice(jpeg, 1, xs0, xs1, y, y + h, max_pixels);
  } else {
    im.prepare(1);
  }
  im.read_region(xs0 - sx, xs1 - sx, y - sy, y + h - sy, nullptr);
  im.region_x += sx;
  const size_t stride = static_cast<size_t>(im.region_w) * 3;
  for (int r = 0; r < h; ++r) {
    std::memcpy(out + static_cast<size_t>(r) * w * 3,
                im.region.data() + stride * r + static_cast<size_t>(x - im.region_x) * 3,
                static_cast<size_t>(w) * 3);
  }
  DecodeResult r;
  r.src_width = W;
  r.src_height = H;
  r.out_width = w;
  r.out_height = h;
  r.crop_x = x;
  r.crop_y = y;
  r.crop_w = w;
  r.crop_h = h;
  CropPlan rect;
  rect.x0 = x;
  rect.y0 = y;
  rect.w = w;
  rect.h = h;
  r.geometry = internal::geometry_from_plan(rect, W, H, w, h, true);
  return r;
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
  Impl& im = *impl_;
  const ImageFormat fmt = internal::sniff_format(image);
  if (fmt != ImageFormat::kJpeg) {
    return im.raster.decode_with(fmt, image, g, o, out, out_size, im.resizer, im.kernel);
  }
  JpegAbortGuard guard(im.dec);
  im.read_header(image, o.max_pixels);
  const jpeg_decompress_struct* c = im.dec.get();
  const int W = static_cast<int>(c->image_width), H = static_cast<int>(c->image_height);
  if (o.channels == 1 && c->jpeg_color_space != JCS_GRAYSCALE) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_with: a one-channel output needs a gray JPEG; this one stores colour");
  }
  const CropPlan p = internal::plan_from_geometry(g, W, H);
  const int ow = o.width > 0 ? o.width : g.out_width;
  const int oh = o.height > 0 ? o.height : g.out_height;
  internal::check_out_size("decode_with", out_size, static_cast<size_t>(ow) * oh * o.channels);
  int x0, x1, y0, y1;
  internal::needed_range(p.x0, p.w, ow, p.clip_x0, p.clip_x1, &x0, &x1);
  internal::needed_range(p.y0, p.h, oh, p.clip_y0, p.clip_y1, &y0, &y1);
  im.prepare(1);
  // Margin column as in decode(): keep fancy upsampling off the region's edges.
  im.read_region(std::max(0, x0 - 1), std::min(W, x1 + 1), y0, y1, nullptr);
  im.dec.abort();
  const ResizeAxis ax{p.x0 - im.region_x, p.w, x0 - im.region_x, x1 - im.region_x};
  const ResizeAxis ay{p.y0 - y0, p.h, 0, y1 - y0};
  const uint8_t* src = im.region.data();
  size_t stride = static_cast<size_t>(im.region_w) * 3;
  if (o.channels == 1) {  // gray decodes replicated to RGB; keep one copy
    const size_t n = static_cast<size_t>(im.region_w) * (y1 - y0);
    im.gray.resize(n);
    for (size_t i = 0; i < n; ++i) im.gray[i] = im.region[3 * i];
    src = im.gray.data();
    stride = static_cast<size_t>(im.region_w);
  }
  internal::resample(src, stride, im.region_w, y1 - y0, o.channels, ax, ay, p.flip,
                     o.interpolation, out, ow, oh, im.resizer, im.kernel, im.gscratch);
  DecodeResult r;
  r.src_width = W;
  r.src_height = H;
  r.out_width = ow;
  r.out_height = oh;
  r.crop_x = static_cast<int>(std::lround(p.x0));
  r.crop_y = static_cast<int>(std::lround(p.y0));
  r.crop_w = static_cast<int>(std::lround(p.w));
  r.crop_h = static_cast<int>(std::lround(p.h));
  r.flipped = p.flip;
  r.geometry = internal::geometry_from_plan(p, W, H, ow, oh, g.clip_to_window);
  return r;
}

ImageInfo probe_image(std::span<const uint8_t> image) {
  const ImageFormat fmt = internal::sniff_format(image);
  if (fmt == ImageFormat::kPng) {
    internal::PngDecoder png;
    return png.read_header(image, ~0ull);
  }
  if (fmt == ImageFormat::kWebp) return internal::webp_header(image, ~0ull);
  const JpegInfo j = probe_jpeg(image);
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.width = j.width;
  info.height = j.height;
  info.channels = j.components;
  info.bit_depth = 8;
  return info;
}

JpegInfo probe_jpeg(std::span<const uint8_t> jpeg) {
  internal::require_soi(jpeg.data(), jpeg.size());
  JpegDecompressor dec;
  JpegAbortGuard guard(dec);
  jpeg_decompress_struct* c = dec.get();
  jpeg_guarded(dec.err(), "JPEG header", [&] {
    jpeg_mem_src(c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_read_header(c, TRUE);
  });
  JpegInfo info;
  info.width = static_cast<int>(c->image_width);
  info.height = static_cast<int>(c->image_height);
  info.components = c->num_components;
  info.progressive = c->progressive_mode != 0;
  return info;
}

bool jpeg_is_progressive(std::span<const uint8_t> jpeg) { return probe_jpeg(jpeg).progressive; }

std::vector<uint8_t> jpeg_to_baseline(std::span<const uint8_t> jpeg, uint64_t max_pixels) {
  return internal::transcode_sequential(jpeg, 0, 0, max_pixels, nullptr);
}

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
