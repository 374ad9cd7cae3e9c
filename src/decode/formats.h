// The table of media formats stoker reads: one row per format, and every place that
// depends on the format (sniffing, probing, decoding, pack-time checks, file
// extensions) looks its row up here instead of naming formats itself.
//
// A row gives a format's names, its magic bytes, its header probe, its pack-time checks
// and a factory for its decoder. Built-in rows (JPEG, PNG, WebP) are defined beside
// their decoders (jpeg_decode.cc, png_decode.cc, webp_decode.cc) and listed in
// formats.cc; adding a format is one row plus its decoder file. `media` says what a
// decoder produces; only still images exist today, and ImageDecoder accepts only them,
// so a video or audio row would not reach an image decode.
//
// register_image_format adds a row at run time (tests add a toy format through it).
// Rows are never removed; lookups are lock-free and may run on any thread, but a
// registration must happen-before the decodes that are to see it.
//
// Threading: all functions are thread-safe; a FormatDecoder belongs to one thread at a
// time (its ImageDecoder's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "decode/geometry.h"
#include "decode/resize.h"
#include "stoker/image.h"

namespace stoker::internal {

/// What a format's decoder produces.
enum class MediaKind : uint8_t { kImage, kVideo, kAudio };

/// What the resampling of one ImageDecoder shares across its formats' decoders.
struct ResampleTools {
  Resizer resizer;
  ResizeKernel kernel = ResizeKernel::kScalar;
  GeometryScratch geometry;
};

/// One format's half of ImageDecoder: each method is the ImageDecoder method of the
/// same name for bytes this format claimed, with the arguments already validated
/// (transform, FollowOutput channels and size). Errors as ImageDecoder documents them.
class FormatDecoder {
 public:
  virtual ~FormatDecoder() = default;
  virtual DecodeResult decode(std::span<const uint8_t> bytes, const ImageTransform& t,
                              uint64_t seed, uint8_t* out, size_t out_size,
                              ResampleTools& tools) = 0;
  virtual DecodeResult decode_region(std::span<const uint8_t> bytes, int x, int y, int w, int h,
                                     uint8_t* out, size_t out_size, uint64_t max_pixels) = 0;
  virtual DecodeResult decode_with(std::span<const uint8_t> bytes, const ImageGeometry& g,
                                   const FollowOutput& o, uint8_t* out, size_t out_size,
                                   ResampleTools& tools) = 0;
};

/// What a pack-time header check learnt. JPEG fills every field; other formats may
/// leave them 0 (pack uses `progressive` for JPEG only).
struct ImageHeaderFacts {
  int width = 0, height = 0;
  bool progressive = false;
};

/// One format. Every function pointer is required unless its comment says otherwise.
struct ImageFormatRow {
  ImageFormat id = ImageFormat::kUnknown;  ///< set by the table for registered rows
  MediaKind media = MediaKind::kImage;
  const char* name = "";     ///< lower-case, as image_format_name prints it: "jpeg"
  const char* display = "";  ///< as messages print it: "JPEG"
  /// File extensions (lower-case, no dot); the first is the canonical spelling that
  /// packers name a field by ("jpeg" -> "jpg").
  std::span<const char* const> extensions;
  /// The format's magic bytes are at the start of `bytes` (image_format_of).
  bool (*sniff)(std::span<const uint8_t> bytes) noexcept = nullptr;
  /// Optional, looser than sniff: bytes the format's decoder is the one to judge (and
  /// to name what is wrong with), tried before any row's sniff. nullptr: sniff.
  bool (*claims)(std::span<const uint8_t> bytes) noexcept = nullptr;
  /// Header facts without decoding pixels; kDataLoss when the header is bad.
  ImageInfo (*probe)(std::span<const uint8_t> bytes) = nullptr;
  /// Pack-time structural check of the header of bytes `sniff` accepted, cheap: "" or
  /// the reason. `facts` may be null.
  std::string (*check_header)(std::span<const uint8_t> bytes, ImageHeaderFacts* facts) = nullptr;
  /// Pack-time check that the whole image decodes (or the format's complete pass that
  /// is cheaper than a decode); throws stoker::Error naming why it does not.
  void (*check_decodes)(std::span<const uint8_t> bytes, uint64_t max_pixels) = nullptr;
  /// A decoder with its own state, reused across images by one ImageDecoder.
  std::unique_ptr<FormatDecoder> (*make_decoder)() = nullptr;
};

/// Most rows the table holds, built-in and registered together. ImageFormat values of
/// registered rows follow the built-in ones and stay below this.
inline constexpr size_t kMaxImageFormats = 16;

/// Adds `row` (every required field set; its extensions must name no existing row's)
/// and returns the ImageFormat assigned to it. kInvalidArgument for a malformed row,
/// kResourceExhausted when the table is full. The row's strings and extension array
/// must outlive the process (string literals, static arrays).
ImageFormat register_image_format(const ImageFormatRow& row);

/// The row of format `f`; nullptr for kUnknown or a value no row has.
const ImageFormatRow* image_format_row(ImageFormat f) noexcept;

/// The first row whose magic bytes start `bytes`; nullptr when none does.
const ImageFormatRow* sniff_image_format(std::span<const uint8_t> bytes) noexcept;

/// The row whose decoder is to read `bytes` (claims, then sniff); kDataLoss naming the
/// formats known and the first bytes when none is.
const ImageFormatRow& decoding_row(std::span<const uint8_t> bytes);

/// The row with `extension` (lower-case, no dot) among its extensions; nullptr if none.
const ImageFormatRow* image_format_by_extension(const std::string& extension) noexcept;

/// The display names of every row, for messages: "JPEG, PNG or WebP".
std::string image_format_list();

/// Every row, in lookup order, for callers that list formats (`visit` is called with
/// each; rows registered while it runs may be missed).
template <class F>
void for_each_image_format(F&& visit);

/// kInvalidArgument unless out_size >= need (`what` names the call).
void check_out_size(const char* what, size_t out_size, size_t need);

/// kResourceExhausted when width * height > max_pixels (`what` names the format).
void check_pixels(const char* what, uint64_t width, uint64_t height, uint64_t max_pixels);

namespace detail {
size_t image_format_count() noexcept;
const ImageFormatRow& image_format_at(size_t i) noexcept;
}  // namespace detail

template <class F>
void for_each_image_format(F&& visit) {
  const size_t n = detail::image_format_count();
  for (size_t i = 0; i < n; ++i) visit(detail::image_format_at(i));
}

}  // namespace stoker::internal
