// Builds, from a fast-crop JPEG (restart_index.h), a smaller JPEG holding only the
// restart intervals a crop needs, which libjpeg then decodes like any other file.
//
// The splice takes the MCU rows and the intervals covering the crop, each side widened by
// one MCU where the crop comes closer to it than one decoded chroma sample: fancy
// upsampling of subsampled chroma reads the neighbouring chroma sample, which at a splice
// edge would be replicated instead (the margin keeps the crop's pixels identical to a
// decode of the whole file). The header is copied without the index segment, its
// SOF height and width patched; the intervals are copied with their RST markers
// renumbered in splice order (libjpeg checks the sequence, and its default resync would
// otherwise decode a misnumbered file with warnings only).
//
// Thread-safe: pure function (the output buffer is the caller's).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode/restart_index.h"

namespace stoker::internal {

/// Where the spliced image lies in the original, in full-resolution pixels. x and y are
/// multiples of the MCU size.
struct SpliceRect {
  int x = 0, y = 0, width = 0, height = 0;
  bool whole = false;  ///< the splice would be the whole image; `out` is left empty
};

/// Splices the intervals covering full-resolution columns [x0, x1) and rows [y0, y1)
/// (0 <= x0 < x1 <= width, 0 <= y0 < y1 <= height), to be decoded at DCT scale 1/denom
/// (1, 2 or 4), into `out` (overwritten; its capacity is reused). Throws kDataLoss when an interval boundary it uses does not carry the
/// RST marker the index promises.
SpliceRect splice_restart_intervals(std::span<const uint8_t> jpeg, const RestartLayout& l,
                                    int x0, int x1, int y0, int y1, int denom,
                                    std::vector<uint8_t>& out);

}  // namespace stoker::internal
