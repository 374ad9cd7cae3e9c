// check_image_decodes: does an image decode, checked before it is packed.
//
// The loader fails a batch on an image it cannot decode, in whatever epoch first
// reads it; pack runs this check so that such an image is refused (or skipped) when
// it is packed instead. For a JPEG it is the decode without the pixel work: header,
// every scan's entropy-coded data (a truncated or corrupt stream fails, with the
// loader's rule that corrupt-data warnings are errors) and, when the file carries one,
// the fast-crop index. PNG and WebP have no cheaper complete pass: they are decoded.
// Each format's check is its row's check_decodes (formats.h).
//
// Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace stoker::internal {

/// Returns "" when `image` (any format of the table, told by its magic bytes) decodes, else
/// the reason ("JPEG decode check: Premature end of JPEG file"). Images of more than
/// `max_pixels` pixels are refused without being decoded.
std::string check_image_decodes(std::span<const uint8_t> image, uint64_t max_pixels = 1ull << 28);

}  // namespace stoker::internal
