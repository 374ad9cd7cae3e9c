// Tests of the format table (src/decode/formats.h): a toy format registered at run time
// ("STKRAW": magic, width, height, raw RGB) is sniffed, named, probed, decoded through
// ImageDecoder (whole, region, transform, Follow) and packed from a WebDataset tar, with
// no change anywhere but its row and its RasterSource below; and the built-in rows keep
// what the rest of the library relies on.
#include "decode/formats.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "decode/image_check.h"
#include "decode/raster_decode.h"
#include "pack/pack_common.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/pack.h"
#include "util/tar_builder.h"
#include "benchlib/image_encode.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using internal::ImageFormatRow;
using internal::PixelRect;
using testing::error_code_of;
using testing::TempDir;

constexpr uint8_t kRawMagic[8] = {'S', 'T', 'K', 'R', 'A', 'W', '1', '\n'};
constexpr size_t kRawHeader = 12;  // magic, then width and height as u16 little-endian

std::vector<uint8_t> encode_raw(const std::vector<uint8_t>& rgb, int w, int h) {
  std::vector<uint8_t> b(kRawMagic, kRawMagic + 8);
  b.push_back(static_cast<uint8_t>(w));
  b.push_back(static_cast<uint8_t>(w >> 8));
  b.push_back(static_cast<uint8_t>(h));
  b.push_back(static_cast<uint8_t>(h >> 8));
  b.insert(b.end(), rgb.begin(), rgb.end());
  return b;
}

// The toy format's pixel access: any rectangle is exact, so widen() asks for no margin.
class RawSource final : public internal::RasterSource {
 public:
  ImageInfo header(std::span<const uint8_t> b, uint64_t max_pixels) override {
    if (b.size() < kRawHeader) throw Error(ErrorCode::kDataLoss, "STKRAW: truncated header");
    ImageInfo info;
    info.format = image_format_of(b);
    info.width = b[8] | (b[9] << 8);
    info.height = b[10] | (b[11] << 8);
    info.channels = 3;
    if (info.width == 0 || info.height == 0) throw Error(ErrorCode::kDataLoss, "STKRAW: empty image");
    internal::check_pixels("STKRAW", info.width, info.height, max_pixels);
    return info;
  }
  PixelRect widen(const ImageInfo&, PixelRect want, int) const override { return want; }
  void load(std::span<const uint8_t> b, const ImageInfo& info, PixelRect r, int channels, uint8_t* out,
            size_t stride, size_t out_size) override {
    if (channels != 3) throw Error(ErrorCode::kInvalidArgument, "STKRAW stores colour");
    const size_t row = static_cast<size_t>(info.width) * 3;
    if (b.size() < kRawHeader + row * info.height) throw Error(ErrorCode::kDataLoss, "STKRAW: truncated pixels");
    const size_t n = static_cast<size_t>(r.x1 - r.x0) * 3;
    EXPECT_LE(stride * (r.y1 - r.y0 - 1) + n, out_size);
    for (int y = r.y0; y < r.y1; ++y)
      std::memcpy(out + stride * (y - r.y0), b.data() + kRawHeader + row * y + static_cast<size_t>(r.x0) * 3, n);
  }
};

bool raw_sniff(std::span<const uint8_t> b) noexcept {
  return b.size() >= 8 && std::memcmp(b.data(), kRawMagic, 8) == 0;
}

std::string raw_check_header(std::span<const uint8_t> b, internal::ImageHeaderFacts*) {
  return b.size() < kRawHeader ? "truncated STKRAW header" : "";
}

constexpr const char* kRawExtensions[] = {"stkraw", "raw"};

// Registered once per process: rows are never removed.
ImageFormat raw_format() {
  static const ImageFormat id = internal::register_image_format(ImageFormatRow{
      .name = "stkraw",
      .display = "STKRAW",
      .extensions = kRawExtensions,
      .sniff = raw_sniff,
      .probe = internal::probe_raster<RawSource>,
      .check_header = raw_check_header,
      .check_decodes = internal::check_raster_decodes<RawSource>,
      .make_decoder = internal::make_raster_decoder<RawSource>,
  });
  return id;
}

std::vector<uint8_t> crop(const std::vector<uint8_t>& rgb, int w, int x, int y, int cw, int ch) {
  std::vector<uint8_t> out;
  for (int r = y; r < y + ch; ++r) {
    const auto* p = rgb.data() + (static_cast<size_t>(r) * w + x) * 3;
    out.insert(out.end(), p, p + static_cast<size_t>(cw) * 3);
  }
  return out;
}

TEST(ImageFormatTable, BuiltInRowsKeepTheirIdsNamesAndExtensions) {
  EXPECT_EQ(internal::image_format_row(ImageFormat::kJpeg)->name, std::string("jpeg"));
  EXPECT_EQ(internal::image_format_row(ImageFormat::kPng)->display, std::string("PNG"));
  EXPECT_EQ(internal::image_format_row(ImageFormat::kUnknown), nullptr);
  EXPECT_EQ(internal::image_format_by_extension("jpeg")->id, ImageFormat::kJpeg);
  EXPECT_EQ(internal::image_format_by_extension("jpeg")->extensions.front(), std::string("jpg"));
  EXPECT_EQ(internal::image_format_by_extension("webp")->id, ImageFormat::kWebp);
  EXPECT_EQ(internal::image_format_by_extension("gif"), nullptr);
  // A JPEG's decoder judges anything starting FF D8; image_format_of wants FF D8 FF.
  const std::vector<uint8_t> soi_only = {0xFF, 0xD8, 0x00, 0x01};
  EXPECT_EQ(image_format_of(soi_only), ImageFormat::kUnknown);
  EXPECT_EQ(internal::decoding_row(soi_only).id, ImageFormat::kJpeg);
}

TEST(ImageFormatTable, RegisteredFormatIsSniffedNamedAndProbed) {
  const ImageFormat id = raw_format();
  EXPECT_GT(static_cast<int>(id), static_cast<int>(ImageFormat::kWebp));
  const auto rgb = testing::make_rgb_image(37, 21, 5);
  const auto raw = encode_raw(rgb, 37, 21);
  EXPECT_EQ(image_format_of(raw), id);
  EXPECT_STREQ(image_format_name(id), "stkraw");
  EXPECT_EQ(internal::image_format_by_extension("raw")->id, id);
  const ImageInfo info = probe_image(raw);
  EXPECT_EQ(info.format, id);
  EXPECT_EQ(info.width, 37);
  EXPECT_EQ(info.height, 21);
  // Messages that list the formats name it too.
  std::string msg;
  EXPECT_EQ(error_code_of([] { probe_image(std::vector<uint8_t>{'G', 'I', 'F', '8'}); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("not a JPEG, PNG, WebP or STKRAW image"), std::string::npos) << msg;
}

TEST(ImageFormatTable, RegisteredFormatDecodesThroughTheFrontDoor) {
  const ImageFormat id = raw_format();
  const int w = 64, h = 48;
  const auto rgb = testing::make_rgb_image(w, h, 11);
  const auto raw = encode_raw(rgb, w, h);
  ImageDecoder dec;

  ImageTransform whole;
  whole.kind = ImageTransform::Kind::kNone;
  std::vector<uint8_t> out(static_cast<size_t>(w) * h * 3);
  DecodeResult r = dec.decode(raw, whole, 0, out.data(), out.size());
  EXPECT_EQ(r.format, id);
  EXPECT_EQ(r.out_width, w);
  EXPECT_EQ(out, rgb);

  std::vector<uint8_t> region(static_cast<size_t>(10) * 7 * 3);
  r = dec.decode_region(raw, 13, 5, 10, 7, region.data(), region.size());
  EXPECT_EQ(region, crop(rgb, w, 13, 5, 10, 7));

  // The crop, resize and flip are the shared ones: a PNG of the same pixels gives the
  // same geometry and the same bytes for the same seed.
  const auto png = testing::encode_png_rgb(rgb, w, h);
  ImageTransform train;
  train.size = 24;
  std::vector<uint8_t> from_raw(24 * 24 * 3), from_png(24 * 24 * 3);
  for (uint64_t seed : {1u, 2u, 3u}) {
    const DecodeResult a = dec.decode(raw, train, seed, from_raw.data(), from_raw.size());
    const DecodeResult b = dec.decode(png, train, seed, from_png.data(), from_png.size());
    EXPECT_EQ(a.crop_x, b.crop_x);
    EXPECT_EQ(a.crop_w, b.crop_w);
    EXPECT_EQ(a.flipped, b.flipped);
    EXPECT_EQ(from_raw, from_png) << "seed " << seed;
    // Follow: the geometry applies to the toy format as to any other.
    std::vector<uint8_t> follow(24 * 24 * 3);
    dec.decode_with(raw, a.geometry, FollowOutput{}, follow.data(), follow.size());
    EXPECT_EQ(follow, from_raw);
  }
  FollowOutput one;
  one.channels = 1;
  std::vector<uint8_t> gray(24 * 24);
  ImageGeometry g = dec.decode(raw, train, 1, from_raw.data(), from_raw.size()).geometry;
  EXPECT_EQ(error_code_of([&] { dec.decode_with(raw, g, one, gray.data(), gray.size()); }), ErrorCode::kInvalidArgument);

  auto truncated = raw;
  truncated.resize(raw.size() - 5);
  EXPECT_EQ(error_code_of([&] { dec.decode(truncated, whole, 0, out.data(), out.size()); }), ErrorCode::kDataLoss);
  ImageTransform small = whole;
  small.max_pixels = 100;
  EXPECT_EQ(error_code_of([&] { dec.decode(raw, small, 0, out.data(), out.size()); }), ErrorCode::kResourceExhausted);
}

TEST(ImageFormatTable, RegisteredFormatGoesThroughThePackChecks) {
  const ImageFormat id = raw_format();
  const auto rgb = testing::make_rgb_image(9, 6, 3);
  const auto raw = encode_raw(rgb, 9, 6);
  auto truncated = raw;
  truncated.resize(raw.size() - 1);
  ImageFormat f = ImageFormat::kUnknown;
  EXPECT_EQ(internal::check_image_header(raw, &f, nullptr), "");
  EXPECT_EQ(f, id);
  EXPECT_EQ(internal::check_image_header(std::vector<uint8_t>(kRawMagic, kRawMagic + 8), nullptr, nullptr),
            "truncated STKRAW header");
  EXPECT_EQ(internal::check_image_decodes(raw), "");
  EXPECT_EQ(internal::check_image_decodes(truncated), "STKRAW: truncated pixels");

  // A WebDataset tar: the member extension makes an image field under the row's
  // canonical spelling, and a member that does not decode is skipped, named.
  TempDir tmp;
  testing::TarBuilder tar;
  tar.file("a.raw", raw);
  tar.file("a.cls", std::vector<uint8_t>{'1'});
  tar.file("b.stkraw", truncated);
  tar.file("b.cls", std::vector<uint8_t>{'2'});
  tar.end();
  testing::write_file(tmp.str("t.tar"), tar.bytes);
  WdsPackOptions o;
  o.skip_bad = true;
  const PackSummary s = pack_wds({tmp.str("t.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.records, 1u);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].find("truncated pixels"), std::string::npos) << s.skipped[0];
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->schema().to_string(), "__key__:text cls:int64 stkraw:image");
  const Record rec = ds->read(0);
  const auto field = rec.fields[ds->schema().find("stkraw")];
  ImageDecoder dec;
  ImageTransform whole;
  whole.kind = ImageTransform::Kind::kNone;
  std::vector<uint8_t> out(rgb.size());
  dec.decode(field, whole, 0, out.data(), out.size());
  EXPECT_EQ(out, rgb);
}

TEST(ImageFormatTable, MalformedOrClashingRowsAreRefused) {
  raw_format();
  ImageFormatRow clash{.name = "other",
                       .display = "OTHER",
                       .extensions = kRawExtensions,
                       .sniff = raw_sniff,
                       .probe = internal::probe_raster<RawSource>,
                       .check_header = raw_check_header,
                       .check_decodes = internal::check_raster_decodes<RawSource>,
                       .make_decoder = internal::make_raster_decoder<RawSource>};
  std::string msg;
  EXPECT_EQ(error_code_of([&] { internal::register_image_format(clash); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("'stkraw' is already stkraw's"), std::string::npos) << msg;
  ImageFormatRow incomplete = clash;
  static constexpr const char* kOther[] = {"other"};
  incomplete.extensions = kOther;
  incomplete.make_decoder = nullptr;
  EXPECT_EQ(error_code_of([&] { internal::register_image_format(incomplete); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
