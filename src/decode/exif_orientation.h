// EXIF orientation of JPEGs, and the lossless turn that makes a photo upright.
//
// Cameras and phones store the sensor's pixels as they came and say in EXIF tag 0x0112
// (Orientation, 1..8) how to turn them for display. Decoders for training ignore it
// (libjpeg-turbo, and torchvision's default), so a portrait phone photo trains lying on
// its side. pack's exif_transpose option turns such JPEGs upright once, at pack time,
// by TurboJPEG's lossless transform (the DCT coefficients are moved, not re-encoded),
// and sets the tag to 1 so that no viewer turns them again.
//
// Thread-safe: no shared state (a TurboJPEG transform handle per call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace stoker::internal {

/// The Orientation tag (1..8) of the first EXIF APP1 segment before the first scan,
/// or 0 when there is none or it cannot be read (never throws: any input). When
/// `value_offset` is given it receives the offset of the tag's 2-byte value in `jpeg`.
int jpeg_exif_orientation(std::span<const uint8_t> jpeg, size_t* value_offset = nullptr);

struct ExifTranspose {
  std::vector<uint8_t> jpeg;  ///< the upright JPEG (tag set to 1); empty when no turn was needed
  int orientation = 0;        ///< the tag the input carried (0: none)
  /// The turn could not be exact on this image's size (a partial MCU at an edge that
  /// moves): the edge's partial MCU row or column (< 16 pixels) was dropped, as
  /// `jpegtran -trim` does, to stay lossless.
  bool trimmed = false;
};

/// Turns `jpeg` upright by its EXIF orientation, losslessly (see above). Orientation 1,
/// none or unreadable: nothing to do (result.jpeg empty). Throws kDataLoss with
/// TurboJPEG's reason when the transform fails.
ExifTranspose jpeg_exif_transpose(std::span<const uint8_t> jpeg);

}  // namespace stoker::internal
