// JPEG: the format table's row (kJpegFormat), its decoder and its pack-time checks.
//
// The decoder does as little work as the transform allows (image.h says how: the crop
// is planned from the header, libjpeg decodes only its columns and rows, at a DCT scale
// when that still covers the target, or from a splice of the restart intervals a
// fast-crop index points to). The public JPEG utilities of image.h (probe_jpeg,
// jpeg_to_baseline, ...) are defined in jpeg_decode.cc too.
//
// Threading: the functions are thread-safe; a decoder made by the row belongs to one
// thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "decode/formats.h"

namespace stoker::internal {

/// JPEG's row of the format table. It claims bytes from their SOI (FF D8) alone, so
/// that what follows is judged, and named, by the JPEG decoder.
extern const ImageFormatRow kJpegFormat;

/// Probes a JPEG without libjpeg's full state: SOI marker, the marker segment structure
/// up to the first SOF (which says baseline or progressive) and TurboJPEG's header
/// decode. Returns "" and fills `info` (when not null) when it looks like a decodable
/// JPEG, else the reason it is not.
std::string check_jpeg_header(std::span<const uint8_t> bytes, ImageHeaderFacts* info);

}  // namespace stoker::internal
