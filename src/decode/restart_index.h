// The restart-interval index of a fast-crop JPEG: writing it (a lossless transcode) and
// reading it back.
//
// A fast-crop JPEG is a sequential, Huffman-optimised JPEG with one interleaved scan and a
// restart interval of `interval` MCUs that divides the MCUs per row, so every MCU row
// starts a new interval and any run of whole intervals is an independently decodable
// rectangle of the image. The byte offset of each interval inside the entropy-coded data
// is stored in an APP15 segment ("STKRST\0", version 1) written after SOI (and JFIF
// APP0), so the file stays a valid JPEG that other decoders read unchanged:
//
//   offset size  field (integers little-endian)
//   0      7     "STKRST\0"
//   7      1     version = 1
//   8      2     interval: MCUs per restart interval
//   10     2     MCUs per row
//   12     2     MCU rows
//   14     4     entropy-coded bytes: from the end of the SOS segment to the EOI marker
//   18     4     intervals = MCUs per row * MCU rows / interval
//   22     ...   each interval's size in bytes, LEB128 (its trailing RSTn marker included;
//                the last interval has none)
//   end-4  4     CRC32C of every byte above
//
// Offsets are relative to the entropy-coded data, so header segments may come and go
// before it without touching the index. Readers check the CRC, the geometry against SOF
// and DRI, that the sizes add up to the scan and that EOI ends it; the RST marker at each
// interval boundary is checked by whoever uses that boundary (restart_splice.h, verify).
//
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/image.h"

namespace stoker::internal {

constexpr int kRestartIndexMarker = 0xEF;  // APP15
constexpr uint8_t kRestartIndexVersion = 1;

/// Everything the splice needs, from one walk over the header segments.
struct RestartLayout {
  int width = 0, height = 0;
  int components = 0;
  int mcu_w = 0, mcu_h = 0;  ///< MCU size in full-resolution pixels
  int mcus_per_row = 0, mcu_rows = 0;
  int interval = 0;          ///< MCUs per restart interval
  size_t sof_offset = 0;     ///< the SOF marker's FF byte
  size_t index_offset = 0;   ///< the APP15 marker's FF byte
  size_t index_size = 0;     ///< the whole APP15 segment, marker included
  size_t scan_offset = 0;    ///< first byte of entropy-coded data
  size_t scan_bytes = 0;     ///< entropy-coded bytes, up to the EOI marker
  /// Start of each interval relative to scan_offset; intervals + 1 entries, the last
  /// being scan_bytes.
  std::vector<uint32_t> starts;

  size_t intervals() const { return starts.empty() ? 0 : starts.size() - 1; }
  int intervals_per_row() const { return interval == 0 ? 0 : mcus_per_row / interval; }
};

/// Walks the header of `jpeg`. Returns false when it carries no index (the walk stops
/// quietly at anything it does not understand before the index is seen: libjpeg will
/// say what is wrong with such a file). Returns true and fills `out` (its vectors are
/// reused) when it carries a valid index. Throws Error(kDataLoss, "fast-crop index: ...")
/// naming the reason when the index is there but fails its CRC, has an unknown version,
/// or does not match the image (geometry, DRI, scan size, EOI).
bool read_restart_layout(std::span<const uint8_t> jpeg, RestartLayout& out);

/// Throws kDataLoss unless the two bytes before interval i's start (i >= 1) are the
/// marker RST((i - 1) mod 8).
void check_restart_marker(std::span<const uint8_t> jpeg, const RestartLayout& l, size_t i);

/// The interval read_restart_layout would accept for this geometry: the largest
/// divisor of mcus_per_row that is <= target and >= min_interval, keeping the index
/// within one APP15 segment; the smallest such divisor when none is <= target.
/// 0 when there is none.
int choose_restart_interval(int mcus_per_row, int mcu_rows, int target, int min_interval);

/// Bytes one restart interval adds to a file, on average: its RST marker, the padding
/// to a byte boundary before it, the DC values coded whole after it, and its entry in
/// the fast-crop index. Used to predict an interval that keeps the growth in budget.
inline constexpr double kBytesPerRestartInterval = 5.0;

/// Losslessly rewrites `jpeg` as a sequential Huffman-optimised JPEG (coefficients
/// copied; APPn other than JFIF/Adobe and COM kept) with a restart interval chosen by
/// choose_restart_interval(.., target_interval, min_interval) when target_interval > 0,
/// none otherwise. `restart_budget` > 0 (bytes) raises min_interval (and the target)
/// so that the intervals cost about that much at kBytesPerRestartInterval each.
/// Returns the interval used through `interval_out` (0: none).
/// kDataLoss for corrupt input, kResourceExhausted above max_pixels.
std::vector<uint8_t> transcode_sequential(std::span<const uint8_t> jpeg, int target_interval,
                                          int min_interval, uint64_t max_pixels,
                                          int* interval_out, double restart_budget = 0);

/// jpeg_for_fast_crop (image.h) with a size budget: when `max_growth` > 0 the restart
/// interval is raised above options.target_interval as far as needed for the result to
/// be at most (1 + max_growth) times the input (predicted from the bytes per MCU, then
/// checked, with one retry at twice the interval). What coarser intervals cannot remove
/// (a progressive input made sequential) may still exceed it. 0: jpeg_for_fast_crop.
std::vector<uint8_t> fast_crop_within_budget(std::span<const uint8_t> jpeg, const FastCropOptions& options,
                                             double max_growth);

/// Builds the APP15 index of a transcode_sequential output with a restart interval and
/// returns the file with it inserted. Returns an empty vector when the index does not
/// fit one segment (the caller retries with a larger interval).
std::vector<uint8_t> insert_restart_index(std::span<const uint8_t> jpeg, int interval);

}  // namespace stoker::internal
