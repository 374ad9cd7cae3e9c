// Image decode (JPEG, PNG, WebP) fused with the training/eval image transforms.
//
// ImageDecoder turns the bytes of one image into one uint8 HWC image of the size a batch
// slot wants. The format is sniffed from the magic bytes (JPEG FF D8, PNG's 8-byte
// signature, RIFF....WEBP), never from a file name.
//
// JPEG does as little work as the transform allows: the crop is chosen from the header's
// dimensions before any pixel is decoded, libjpeg decodes only the crop's columns
// (jpeg_crop_scanline) and rows (jpeg_skip_scanlines, then jpeg_abort_decompress), at a
// 1/2 or 1/4 DCT scale when the scaled crop is still at least the target size. PNG
// (libspng) is decoded row by row down to the last row the crop needs, at full width;
// WebP (libwebp) decodes only the crop's rectangle and a small margin (libwebp's own
// cropping). Either way the pixels used equal those of a full decode.
// For every format a separable antialiased resize (AVX2 when the CPU has it, chosen at
// run time; a portable path gives identical bytes) writes the result, with the
// horizontal flip folded into its horizontal pass.
//
// Conversions to RGB (3-channel output): gray is replicated, palette entries looked up,
// alpha dropped (not composited), 16-bit samples reduced to their high byte, CMYK
// converted. One-channel output (decode_with, for masks) gives the stored values: the
// gray level or the palette index, never a colour.
//
// Randomness: every draw of a decode comes from `sample_seed` alone, through
// splitmix64 -> xoshiro256** (see ImageDecoder::decode), so the same bytes and seed give
// the same output bytes on any thread, in any order. decode_with draws nothing: it
// applies a geometry another decode returned ("Follow": a segmentation mask gets exactly
// the crop, resize and flip of its image).
//
// Fast crop: a JPEG rewritten by jpeg_for_fast_crop carries an index of its restart
// intervals; decode() and decode_region() then hand libjpeg a small JPEG spliced from
// only the intervals the crop needs (plus one MCU of context each side), which decodes
// to the same bytes as the whole file would. An index that fails its CRC or does not
// match the data is kDataLoss naming why, never a silent fallback.
//
// Untrusted input: corrupt, truncated and unrecognised bytes raise stoker::Error
// kDataLoss naming the format and reason (libjpeg's corrupt-data warnings count as
// errors); images whose declared size exceeds the max_pixels limit raise
// kResourceExhausted, checked from the header before any pixel memory is allocated;
// progressive JPEGs with more than 500 scans are rejected as kDataLoss.
//
// Threading: an ImageDecoder is owned by one thread at a time (not thread-safe); the free
// functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>


namespace stoker {

/// Image formats a kImage field (shard.h) may hold: these built in, more registered by
/// a decoder table row (src/decode/formats.h).
enum class ImageFormat : uint8_t { kUnknown = 0, kJpeg, kPng, kWebp };
/// Sniffs the format from the first bytes (JPEG FF D8 FF, PNG's 8-byte signature,
/// RIFF....WEBP). kUnknown for anything else.
ImageFormat image_format_of(std::span<const uint8_t> bytes) noexcept;
const char* image_format_name(ImageFormat f) noexcept;  ///< "jpeg", "png", "webp", "unknown"


/// What to do with a decoded image. Every field has a default; decode() rejects values
/// outside the stated ranges with kInvalidArgument.
struct ImageTransform {
  enum class Kind {
    kTrain,  ///< RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(flip_prob)
    kEval,   ///< Resize(round(size / eval_crop_fraction)) + CenterCrop(size)
    kNone,   ///< decode the full image at full resolution; no resize, no flip
  };
  Kind kind = Kind::kTrain;
  /// Output is size x size pixels (kTrain, kEval). Must be >= 1. Ignored by kNone,
  /// whose output is src_width x src_height.
  int size = 224;
  /// RandomResizedCrop area fraction bounds, 0 < scale_min <= scale_max (torchvision
  /// allows scale_max > 1; so do we: the 10-attempt loop simply fails more often).
  float scale_min = 0.08f, scale_max = 1.0f;
  /// Aspect ratio (w/h) bounds, drawn log-uniformly; 0 < ratio_min <= ratio_max.
  float ratio_min = 3.f / 4, ratio_max = 4.f / 3;
  /// Probability of a horizontal flip (kTrain only), in [0, 1].
  float flip_prob = 0.5f;
  /// Eval: the short side is resized to round(size / eval_crop_fraction) (torchvision
  /// Resize semantics: long side truncated), then the center size x size is cropped.
  /// In (0, 1]. 0.875 with size 224 is the classic Resize(256) + CenterCrop(224).
  float eval_crop_fraction = 0.875f;
  /// Decode at 1/2 or 1/4 scale (libjpeg DCT scaling) when the crop, so scaled, is still
  /// >= size in both dimensions. Changes the pixels slightly (a different low-pass);
  /// set false for output that depends only on the full-resolution image.
  bool allow_dct_scaling = true;
  /// Images with width * height above this are rejected with kResourceExhausted before
  /// anything is allocated (decompression-bomb guard for untrusted input).
  uint64_t max_pixels = 1ull << 28;
};

/// The exact geometry of one decode, in the source coordinates of the image it was drawn
/// for, so that decode_with can apply it to another image (a mask) without drawing.
///
/// Output pixel (i, j) (row i, column j; before the flip) samples the source point
/// (x + (j + 0.5) * w / out_width, y + (i + 0.5) * h / out_height): the antialiased
/// resize centres its triangle filter there, nearest-neighbour takes the pixel that
/// contains it. With `flip` the output row is mirrored (output column j shows what
/// column out_width - 1 - j would have shown). The filter reads source pixels inside
/// the window's clip range only: the window itself when `clip_to_window` (kTrain and
/// decode_region: crop, then resize) or the whole image (kEval: resize, then crop).
struct ImageGeometry {
  int src_width = 0, src_height = 0;  ///< size of the image the window refers to, >= 1
  double x = 0, y = 0, w = 0, h = 0;  ///< sampling window, w > 0, h > 0
  bool clip_to_window = true;
  bool flip = false;
  int out_width = 0, out_height = 0;  ///< output size, >= 1
};

/// What a decode did, in source (full-resolution) pixel coordinates.
struct DecodeResult {
  int src_width = 0, src_height = 0;  ///< the image's dimensions
  int out_width = 0, out_height = 0;  ///< what was written to `out`
  /// The source region the output shows (kEval: its fractional window, rounded).
  int crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;
  bool flipped = false;
  int scale_denom = 1;  ///< libjpeg DCT scaling used: 1, 2 or 4 (always 1 for PNG/WebP)
  ImageFormat format = ImageFormat::kJpeg;
  /// The geometry applied, exact (unrounded); pass it to decode_with to Follow.
  ImageGeometry geometry;
};

/// How decode_with resamples.
enum class Interpolation {
  kAntialiased,  ///< the triangle filter of decode() (images)
  kNearest,      ///< the source pixel containing each sample point: no new values (masks)
};

/// What decode_with writes.
struct FollowOutput {
  int width = 0, height = 0;  ///< output size; 0 (both) = the geometry's out size
  /// 3: RGB, as decode(). 1: the stored single-channel values (gray level or palette
  /// index); only for gray or palette PNGs, gray+alpha PNGs (the gray), and gray JPEGs;
  /// any other source is kInvalidArgument.
  int channels = 3;
  Interpolation interpolation = Interpolation::kAntialiased;
  /// Images with width * height above this are rejected with kResourceExhausted.
  uint64_t max_pixels = 1ull << 28;
  /// JPEG, 3 channels: decode at 1/2 or 1/4 scale (libjpeg DCT scaling) when the window,
  /// so scaled, is still >= the output in both dimensions, as ImageTransform's option
  /// (the pixels then differ slightly: a different low-pass). false: the result depends
  /// only on the full-resolution pixels (what a mask that follows needs).
  bool allow_dct_scaling = false;
};

/// Options of an ImageDecoder.
struct ImageDecoderOptions {
  /// Use the SIMD resize where there is one (AVX2 on x86-64 when the CPU has it, checked
  /// at run time; NEON on aarch64). false forces the portable path; both give identical
  /// bytes (tests compare them).
  bool allow_simd = true;
};

/// Owns libjpeg decompression state and scratch buffers, reused across calls (no
/// allocation in steady state). Non-copyable, movable (a moved-from decoder may only be
/// destroyed or assigned to); one thread at a time. A decoder stays usable after any
/// error it throws.
class ImageDecoder {
 public:
  ImageDecoder();
  explicit ImageDecoder(const ImageDecoderOptions& options);
  ~ImageDecoder();
  ImageDecoder(ImageDecoder&&) noexcept;
  ImageDecoder& operator=(ImageDecoder&&) noexcept;
  ImageDecoder(const ImageDecoder&) = delete;
  ImageDecoder& operator=(const ImageDecoder&) = delete;

  /// Decodes `jpeg` (or a PNG or WebP: the name is historical) and applies `t`, writing
  /// RGB uint8 HWC (row-major, 3 bytes a pixel,
  /// no padding) to `out`: t.size * t.size * 3 bytes for kTrain/kEval, width * height * 3
  /// for kNone. `out_size` smaller than that: kInvalidArgument.
  ///
  /// Randomness (kTrain): a xoshiro256** generator seeded through splitmix64 from
  /// `sample_seed` draws, in order, up to 10 (area, log-ratio) pairs then the crop's
  /// top and left (torchvision RandomResizedCrop.get_params, with its center-crop
  /// fallback), then the flip. Uniform doubles are the generator's top 53 bits; integers
  /// in [0, n) are (next * n) >> 64. Same bytes + seed -> same output bytes, bit-exact,
  /// with the same build (the draws use std::log/exp/sqrt of the C library).
  ///
  /// Errors: kDataLoss (not a JPEG/PNG/WebP, corrupt or truncated data, including
  /// libjpeg's corrupt-data warnings; the message says why), kResourceExhausted (more than
  /// t.max_pixels), kInvalidArgument (bad transform or short `out`). Only the rows the
  /// transform needs are decoded, so damage below them is not detected.
  DecodeResult decode(std::span<const uint8_t> jpeg, const ImageTransform& t,
                      uint64_t sample_seed, uint8_t* out, size_t out_size);

  /// Decodes exactly the rectangle [x, x+w) x [y, y+h) of the full-resolution image as
  /// RGB uint8 HWC (w * h * 3 bytes into `out`), decoding only the columns and rows it
  /// needs; bit-identical to a full decode (ISLOW IDCT, fancy upsampling) then crop.
  /// PNG and WebP are accepted too (PNG decodes the rows down to y + h, WebP the
  /// rectangle and a small margin through libwebp's cropping).
  /// The rectangle must lie inside the image (kInvalidArgument otherwise). `max_pixels`
  /// as in ImageTransform.
  DecodeResult decode_region(std::span<const uint8_t> jpeg, int x, int y, int w, int h,
                             uint8_t* out, size_t out_size, uint64_t max_pixels = 1ull << 28);

  /// Applies `g` (usually another decode's DecodeResult::geometry) to `image` without
  /// drawing anything, writing o.width * o.height * o.channels uint8 bytes (HWC) to `out`.
  /// When `image` is not g.src_width x g.src_height the window is scaled proportionally
  /// per axis (a half-resolution mask follows its image). No DCT scaling is used, so the
  /// result depends only on the full-resolution pixels. kNearest reads exactly one source
  /// pixel per output pixel: floor of the sample point above, clamped to the clip range,
  /// so it introduces no values and agrees with where kAntialiased centres its filter.
  /// Errors: as decode(); kInvalidArgument for a malformed geometry, a channel count
  /// other than 1 or 3, or channels == 1 on a source that stores colour.
  DecodeResult decode_with(std::span<const uint8_t> image, const ImageGeometry& g,
                           const FollowOutput& o, uint8_t* out, size_t out_size);

  /// True when this decoder's resizes use a SIMD path (AVX2 or NEON).
  bool uses_simd() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Header facts of any image ImageDecoder reads.
struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0, height = 0;
  /// Channels as stored: 1 gray or palette index (PNG palette images say 1), 2 gray +
  /// alpha, 3 colour, 4 colour + alpha or CMYK.
  int channels = 0;
  bool palette = false;  ///< PNG colour type 3
  int bit_depth = 8;     ///< bits per stored sample (PNG 1..16; JPEG, WebP 8)
};

/// Sniffs the format from the magic bytes and reads the header only. kDataLoss when the
/// bytes are none of JPEG/PNG/WebP or the header is bad.
ImageInfo probe_image(std::span<const uint8_t> image);

/// Header facts of a JPEG, read without decoding pixels.
struct JpegInfo {
  int width = 0, height = 0;
  int components = 0;  ///< 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool progressive = false;
};

/// Reads the header only. kDataLoss when the bytes are not a JPEG or the header is bad.
JpegInfo probe_jpeg(std::span<const uint8_t> jpeg);

/// probe_jpeg(jpeg).progressive (so it throws the same errors).
bool jpeg_is_progressive(std::span<const uint8_t> jpeg);

/// Losslessly rewrites a JPEG as sequential (non-progressive) Huffman-optimised JPEG, as
/// `jpegtran -optimize` does: the DCT coefficients are copied, not re-encoded, so the
/// result decodes to exactly the same pixels. APPn (other than the JFIF/Adobe markers
/// libjpeg writes itself) and COM markers are kept. Works on baseline input too.
/// kDataLoss when the input is corrupt (corrupt-data warnings included);
/// kResourceExhausted when width * height > max_pixels (checked before the coefficient
/// arrays are allocated).
std::vector<uint8_t> jpeg_to_baseline(std::span<const uint8_t> jpeg,
                                      uint64_t max_pixels = 1ull << 28);

/// Options of jpeg_for_fast_crop.
struct FastCropOptions {
  /// Wanted MCUs per restart interval: the largest divisor of the MCUs per row that is
  /// <= this is used (larger where the index would not fit one APP15 segment). Smaller:
  /// finer column selection, a larger index and more markers (bench/README.md). >= 1.
  int target_interval = 1;
  /// As in ImageTransform: kResourceExhausted above width * height.
  uint64_t max_pixels = 1ull << 28;
};

/// Losslessly rewrites a JPEG so that ImageDecoder decodes a crop of it from only the
/// restart intervals the crop covers ("fast crop"). Like jpeg_to_baseline (same DCT
/// coefficients, so exactly the same pixels; progressive becomes sequential; Huffman
/// tables optimised; APPn and COM kept), plus a restart interval that divides the MCUs
/// per row and an APP15 segment ("STKRST") indexing the intervals' byte offsets, with
/// its own CRC32C. The result is a valid JPEG for any decoder. ImageDecoder::decode and
/// decode_region give bit-identical output for the original and the rewritten file.
/// An image with more than 4 components comes back sequential without an index.
/// Errors: kDataLoss (corrupt input), kResourceExhausted (max_pixels),
/// kInvalidArgument (options).
std::vector<uint8_t> jpeg_for_fast_crop(std::span<const uint8_t> jpeg,
                                        const FastCropOptions& options = {});

/// What check_fast_crop_index found.
struct FastCropInfo {
  bool indexed = false;   ///< the JPEG carries a fast-crop index (all other fields 0 if not)
  int interval = 0;       ///< MCUs per restart interval
  int mcus_per_row = 0, mcu_rows = 0;
  size_t intervals = 0;
};

/// Says whether `jpeg` carries a fast-crop index, and checks one that is there: its
/// CRC32C, its geometry against the frame header and restart interval, its sizes against
/// the scan, and the RST marker at every interval boundary. No pixel is decoded.
/// kDataLoss naming the reason ("fast-crop index: ...") when the index is wrong.
FastCropInfo check_fast_crop_index(std::span<const uint8_t> jpeg);

/// Output layouts of convert_pixels.
enum class PixelFormat {
  kU8HWC,   ///< copy
  kU8CHW,   ///< planar uint8
  kF32CHW,  ///< planar float32, normalised
  kF16CHW,  ///< planar IEEE binary16 (bits as uint16), normalised
  kF32HWC,  ///< interleaved float32, normalised
  kF16HWC,  ///< interleaved IEEE binary16, normalised
};

/// Bytes one h x w RGB image takes in `fmt`.
size_t pixel_format_bytes(int h, int w, PixelFormat fmt);

/// Converts an RGB uint8 HWC image to `fmt`. Float outputs are (x / 255 - mean[c]) /
/// std[c], computed in float32; float16 rounds that to nearest-even. `mean`/`std` are
/// ignored (may be null) for the uint8 formats. `out` holds pixel_format_bytes(h, w, fmt).
void convert_pixels(const uint8_t* hwc, int h, int w, PixelFormat fmt, const float mean[3],
                    const float std[3], void* out);

}  // namespace stoker
