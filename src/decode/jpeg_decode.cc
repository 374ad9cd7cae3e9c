#include "decode/jpeg_decode.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "decode/crop.h"
#include "decode/geometry.h"
#include "decode/jpeg_handle.h"
#include "decode/resize.h"
#include "decode/restart_index.h"
#include "decode/restart_splice.h"
#include "stoker/error.h"
#include "stoker/image.h"

namespace stoker::internal {

namespace {

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

class JpegDecoder final : public FormatDecoder {
 public:
  DecodeResult decode(std::span<const uint8_t> jpeg, const ImageTransform& t, uint64_t sample_seed, uint8_t* out,
                      size_t out_size, ResampleTools& tools) override;
  DecodeResult decode_region(std::span<const uint8_t> jpeg, int x, int y, int w, int h, uint8_t* out,
                             size_t out_size, uint64_t max_pixels) override;
  DecodeResult decode_with(std::span<const uint8_t> image, const ImageGeometry& g, const FollowOutput& o,
                           uint8_t* out, size_t out_size, ResampleTools& tools) override;

 private:
  JpegDecompressor dec;
  std::vector<uint8_t> region;  // RGB rows of the decoded region, region_w * 3 apart
  std::vector<uint8_t> cmyk_row;
  std::vector<uint8_t> gray;  // one channel of a gray JPEG for decode_with
  int region_x = 0, region_w = 0;
  bool cmyk = false;
  RestartLayout layout;  // of the current fast-crop JPEG
  std::vector<uint8_t> spliced;  // the intervals a crop needs, as a JPEG

  // Reads the header; kResourceExhausted above max_pixels (nothing allocated yet).
  void read_header(std::span<const uint8_t> jpeg, uint64_t max_pixels) {
    require_soi(jpeg.data(), jpeg.size());
    read_jpeg_header(dec, jpeg, "JPEG header");
    check_pixels("JPEG", dec.get()->image_width, dec.get()->image_height, max_pixels);
  }

  // Makes libjpeg ready to decode at 1/denom the scaled columns [xs0, xs1) and rows
  // [ys0, ys1) of the fast-crop JPEG described by `layout`, from a splice of only the
  // intervals they need when that is less than the whole file. Returns where the
  // decoded image starts in the original's scaled output (MCU sizes are multiples of 8,
  // so the offsets divide exactly).
  std::pair<int, int> open_splice(std::span<const uint8_t> jpeg, int denom, int xs0, int xs1,
                                  int ys0, int ys1, uint64_t max_pixels) {
    const SpliceRect rect = splice_restart_intervals(
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

DecodeResult JpegDecoder::decode(std::span<const uint8_t> jpeg, const ImageTransform& t, uint64_t sample_seed,
                                 uint8_t* out, size_t out_size, ResampleTools& tools) {
  JpegAbortGuard guard(dec);
  const bool indexed = read_restart_layout(jpeg, layout);
  DecodeResult r;
  if (indexed) {
    check_pixels("JPEG", layout.width, layout.height, t.max_pixels);
    r.src_width = layout.width;
    r.src_height = layout.height;
  } else {
    read_header(jpeg, t.max_pixels);
    r.src_width = static_cast<int>(dec.get()->image_width);
    r.src_height = static_cast<int>(dec.get()->image_height);
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
    if (indexed) read_header(jpeg, t.max_pixels);
    prepare(1);
    read_region(0, W, 0, H, out);
    r.out_width = W;
    r.out_height = H;
    r.crop_w = W;
    r.crop_h = H;
    CropPlan whole;
    whole.w = W;
    whole.h = H;
    r.geometry = geometry_from_plan(whole, W, H, W, H, true);
    return r;
  }

  const size_t need = static_cast<size_t>(t.size) * t.size * 3;
  if (out_size < need) {
    throw Error(ErrorCode::kInvalidArgument, "decode: output holds " + std::to_string(out_size) +
                                                 " bytes, size " + std::to_string(t.size) +
                                                 " needs " + std::to_string(need));
  }
  const CropPlan p = t.kind == ImageTransform::Kind::kTrain
                         ? plan_train_crop(W, H, t, sample_seed)
                         : plan_eval_crop(W, H, t);
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
  if (!indexed) std::tie(ow, oh) = prepare(denom);
  const AxisPlan ax = plan_axis(p.x0, p.w, p.clip_x0, p.clip_x1, denom, ow, t.size);
  const AxisPlan ay = plan_axis(p.y0, p.h, p.clip_y0, p.clip_y1, denom, oh, t.size);
  // One column of margin each side keeps the needed columns away from the region's
  // edges, where fancy upsampling would replicate chroma instead of reading a neighbour.
  const int xs0 = std::max(0, ax.need_lo - 1), xs1 = std::min(ow, ax.need_hi + 1);
  int sx = 0, sy = 0;
  if (indexed) {
    std::tie(sx, sy) = open_splice(jpeg, denom, xs0, xs1, ay.need_lo, ay.need_hi, t.max_pixels);
  }
  read_region(xs0 - sx, xs1 - sx, ay.need_lo - sy, ay.need_hi - sy, nullptr);
  region_x += sx;
  dec.abort();  // release libjpeg's buffers before the resize (the guard's is a no-op)

  ResizeAxis rx{ax.start - region_x, ax.length, ax.need_lo - region_x,
                ax.need_hi - region_x};
  ResizeAxis ry{ay.start - ay.need_lo, ay.length, 0, ay.need_hi - ay.need_lo};
  tools.resizer.resize(region.data(), static_cast<size_t>(region_w) * 3, region_w,
                    ay.need_hi - ay.need_lo, rx, ry, p.flip, out, t.size, t.size, tools.kernel);
  r.out_width = t.size;
  r.out_height = t.size;
  r.crop_x = static_cast<int>(std::lround(p.x0));
  r.crop_y = static_cast<int>(std::lround(p.y0));
  r.crop_w = static_cast<int>(std::lround(p.w));
  r.crop_h = static_cast<int>(std::lround(p.h));
  r.flipped = p.flip;
  r.scale_denom = denom;
  r.geometry = geometry_from_plan(p, W, H, t.size, t.size,
                                            t.kind == ImageTransform::Kind::kTrain);
  return r;
}

DecodeResult JpegDecoder::decode_region(std::span<const uint8_t> jpeg, int x, int y, int w, int h, uint8_t* out,
                                        size_t out_size, uint64_t max_pixels) {
  JpegAbortGuard guard(dec);
  const bool indexed = read_restart_layout(jpeg, layout);
  int W, H;
  if (indexed) {
    check_pixels("JPEG", layout.width, layout.height, max_pixels);
    W = layout.width;
    H = layout.height;
  } else {
    read_header(jpeg, max_pixels);
    W = static_cast<int>(dec.get()->image_width);
    H = static_cast<int>(dec.get()->image_height);
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
    std::tie(sx, sy) = open_splice(jpeg, 1, xs0, xs1, y, y + h, max_pixels);
  } else {
    prepare(1);
  }
  read_region(xs0 - sx, xs1 - sx, y - sy, y + h - sy, nullptr);
  region_x += sx;
  const size_t stride = static_cast<size_t>(region_w) * 3;
  for (int r = 0; r < h; ++r) {
    std::memcpy(out + static_cast<size_t>(r) * w * 3,
                region.data() + stride * r + static_cast<size_t>(x - region_x) * 3,
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
  r.geometry = geometry_from_plan(rect, W, H, w, h, true);
  return r;
}

DecodeResult JpegDecoder::decode_with(std::span<const uint8_t> image, const ImageGeometry& g,
                                      const FollowOutput& o, uint8_t* out, size_t out_size, ResampleTools& tools) {
  JpegAbortGuard guard(dec);
  read_header(image, o.max_pixels);
  const jpeg_decompress_struct* c = dec.get();
  const int W = static_cast<int>(c->image_width), H = static_cast<int>(c->image_height);
  if (o.channels == 1 && c->jpeg_color_space != JCS_GRAYSCALE) {
    throw Error(ErrorCode::kInvalidArgument,
                "decode_with: a one-channel output needs a gray JPEG; this one stores colour");
  }
  const FollowPlan plan = plan_follow(g, o, W, H);
  const CropPlan& p = plan.crop;
  const int ow = plan.out_w, oh = plan.out_h;
  const int x0 = plan.x0, x1 = plan.x1, y0 = plan.y0, y1 = plan.y1;
  check_out_size("decode_with", out_size, static_cast<size_t>(ow) * oh * o.channels);
  int denom = 1;
  if (o.allow_dct_scaling && o.channels == 3)
    for (int d : {4, 2})
      if (p.w / d >= ow && p.h / d >= oh) {
        denom = d;
        break;
      }
  if (denom > 1) {
    // As decode(): the window and its clip range at the scaled size.
    const auto [sw, sh] = prepare(denom);
    const AxisPlan ax = plan_axis(p.x0, p.w, p.clip_x0, p.clip_x1, denom, sw, ow);
    const AxisPlan ay = plan_axis(p.y0, p.h, p.clip_y0, p.clip_y1, denom, sh, oh);
    read_region(std::max(0, ax.need_lo - 1), std::min(sw, ax.need_hi + 1), ay.need_lo, ay.need_hi, nullptr);
    dec.abort();
    const ResizeAxis rx{ax.start - region_x, ax.length, ax.need_lo - region_x, ax.need_hi - region_x};
    const ResizeAxis ry{ay.start - ay.need_lo, ay.length, 0, ay.need_hi - ay.need_lo};
    resample(region.data(), static_cast<size_t>(region_w) * 3, region_w, ay.need_hi - ay.need_lo, 3, rx, ry, p.flip,
             o.interpolation, out, ow, oh, tools.resizer, tools.kernel, tools.geometry);
  } else {
    prepare(1);
    // Margin column as in decode(): keep fancy upsampling off the region's edges.
    read_region(std::max(0, x0 - 1), std::min(W, x1 + 1), y0, y1, nullptr);
    dec.abort();
    const ResizeAxis ax{p.x0 - region_x, p.w, x0 - region_x, x1 - region_x};
    const ResizeAxis ay{p.y0 - y0, p.h, 0, y1 - y0};
    const uint8_t* src = region.data();
    size_t stride = static_cast<size_t>(region_w) * 3;
    if (o.channels == 1) {  // gray decodes replicated to RGB; keep one copy
      const size_t n = static_cast<size_t>(region_w) * (y1 - y0);
      gray.resize(n);
      for (size_t i = 0; i < n; ++i) gray[i] = region[3 * i];
      src = gray.data();
      stride = static_cast<size_t>(region_w);
    }
    resample(src, stride, region_w, y1 - y0, o.channels, ax, ay, p.flip, o.interpolation, out, ow, oh, tools.resizer,
             tools.kernel, tools.geometry);
  }
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
  r.scale_denom = denom;
  r.geometry = geometry_from_plan(p, W, H, ow, oh, g.clip_to_window);
  return r;
}

// Header and entropy decode into coefficient arrays: no IDCT, no colour conversion;
// then the fast-crop index, when the file carries one.
void check_jpeg_decodes(std::span<const uint8_t> jpeg, uint64_t max_pixels) {
  JpegDecompressor dec;
  JpegAbortGuard guard(dec);
  read_jpeg_header(dec, jpeg, "JPEG");
  jpeg_decompress_struct* c = dec.get();
  check_pixels("JPEG", c->image_width, c->image_height, max_pixels);
  jpeg_guarded(dec.err(), "JPEG", [&] {
    jpeg_read_coefficients(c);
    jpeg_finish_decompress(c);
  });
  check_fast_crop_index(jpeg);  // throws when an index is there and wrong
}

ImageInfo probe_jpeg_info(std::span<const uint8_t> jpeg) {
  const JpegInfo j = probe_jpeg(jpeg);
  ImageInfo info;
  info.format = ImageFormat::kJpeg;
  info.width = j.width;
  info.height = j.height;
  info.channels = j.components;
  info.bit_depth = 8;
  return info;
}

bool jpeg_sniff(std::span<const uint8_t> b) noexcept {
  return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

bool jpeg_claims(std::span<const uint8_t> b) noexcept { return b.size() >= 2 && b[0] == 0xFF && b[1] == 0xD8; }

std::unique_ptr<FormatDecoder> make_jpeg_decoder() { return std::make_unique<JpegDecoder>(); }

struct TjDecompressor {
  tjhandle h = tjInitDecompress();
  ~TjDecompressor() {
    if (h) tjDestroy(h);
  }
};

// The first spelling is the field name packers use for every spelling.
constexpr const char* kJpegExtensions[] = {"jpg", "jpeg"};

}  // namespace

std::string check_jpeg_header(std::span<const uint8_t> b, ImageHeaderFacts* info) {
  if (b.size() < 4 || b[0] != 0xFF || b[1] != 0xD8 || b[2] != 0xFF) return "not a JPEG (no SOI marker)";
  // Walk the marker segments to the first start-of-frame: it says baseline or
  // progressive, and a broken segment chain means a broken file.
  size_t pos = 2;
  bool progressive = false, found_sof = false;
  while (!found_sof) {
    if (pos >= b.size() || b[pos] != 0xFF) return "corrupt JPEG marker structure at byte " + std::to_string(pos);
    while (pos < b.size() && b[pos] == 0xFF) ++pos;
    if (pos >= b.size()) return "truncated JPEG header";
    const uint8_t m = b[pos++];
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {
      if (m == 0xD9) return "JPEG ends before its frame header";
      continue;
    }
    if (pos + 2 > b.size()) return "truncated JPEG header";
    const size_t len = (static_cast<size_t>(b[pos]) << 8) | b[pos + 1];
    if (len < 2 || pos + len > b.size()) return "truncated JPEG header segment at byte " + std::to_string(pos);
    if (m == 0xDA) return "JPEG scan starts before its frame header";
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      found_sof = true;
      progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE;
    }
    pos += len;
  }
  thread_local TjDecompressor tj;
  if (!tj.h) return "cannot create a TurboJPEG handle";
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(tj.h, b.data(), static_cast<unsigned long>(b.size()), &w, &h, &subsamp, &cs) != 0)
    return std::string("bad JPEG header: ") + tjGetErrorStr2(tj.h);
  if (w <= 0 || h <= 0) return "JPEG with empty dimensions";
  if (info) {
    info->width = w;
    info->height = h;
    info->progressive = progressive;
  }
  return {};
}

constinit const ImageFormatRow kJpegFormat{
    .id = ImageFormat::kJpeg,
    .media = MediaKind::kImage,
    .name = "jpeg",
    .display = "JPEG",
    .extensions = kJpegExtensions,
    .sniff = jpeg_sniff,
    .claims = jpeg_claims,
    .probe = probe_jpeg_info,
    .check_header = check_jpeg_header,
    .check_decodes = check_jpeg_decodes,
    .make_decoder = make_jpeg_decoder,
};

}  // namespace stoker::internal

namespace stoker {

JpegInfo probe_jpeg(std::span<const uint8_t> jpeg) {
  internal::require_soi(jpeg.data(), jpeg.size());
  internal::JpegDecompressor dec;
  internal::JpegAbortGuard guard(dec);
  internal::read_jpeg_header(dec, jpeg, "JPEG header");
  const jpeg_decompress_struct* c = dec.get();
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

}  // namespace stoker
