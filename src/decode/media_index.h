// The media index read on its own, without the file behind it (stoker/media.h has the
// value as a whole): for readers that need a record's stored facts — its frame size and
// rotation — and read only the first bytes of its field, as the bucket plan does when
// a Loader opens.
//
// Threading: free functions, safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "stoker/media.h"

namespace stoker::internal {

/// Bytes a media field's value needs to be read for its index: at least 8; the index's
/// size once `head` holds its first 8 bytes. kDataLoss for a bad magic or a size out of
/// range.
uint32_t media_index_bytes(std::span<const uint8_t> head);

/// The index at the start of `head` (at least media_index_bytes(head) bytes of a media
/// field's value), checked as parse_media_value checks it, except that the file's size
/// cannot be (its bytes are not there). kDataLoss naming the reason.
MediaInfo parse_media_index(std::span<const uint8_t> head);

}  // namespace stoker::internal
