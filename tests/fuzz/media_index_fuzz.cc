// libFuzzer target: arbitrary bytes through the media index parser (stoker/media.h,
// parse_media_value): a video or audio field's value as a shard could hold it.
//
// Whatever the input, the parser must not crash, hang, leak or read out of bounds, and
// what it accepts must be self-consistent: the file lies inside the value, keyframes
// ascend within the stream, and writing the index again gives back the same value.
// Inputs without the magic are also tried with a valid index's checksum fixed up, so the
// field checks past the CRC see them.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target media_index_fuzz
// Run:   ./build-fuzz/media_index_fuzz tests/fuzz/corpus/media_index
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/media.h"

namespace {
void check(std::span<const uint8_t> in) {
  try {
    stoker::MediaInfo info;
    const std::span<const uint8_t> file = stoker::parse_media_value(in, info);
    if (file.data() < in.data() || file.data() + file.size() != in.data() + in.size()) std::abort();
    for (size_t k = 1; k < info.keyframes.size(); ++k)
      if (info.keyframes[k].pts <= info.keyframes[k - 1].pts) std::abort();
    const std::vector<uint8_t> again = stoker::make_media_value(info, file);
    stoker::MediaInfo back;
    stoker::parse_media_value(again, back);
    if (!(back == info)) std::abort();
  } catch (const stoker::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(std::span<const uint8_t>(data, size));
  // The same bytes with the checksum made right (when they hold a plausible header size).
  if (size >= 108) {
    std::vector<uint8_t> b(data, data + size);
    b[0] = 'S', b[1] = 'T', b[2] = 'K', b[3] = 'M';
    const uint32_t head = static_cast<uint32_t>(b[4]) | (static_cast<uint32_t>(b[5]) << 8) |
                          (static_cast<uint32_t>(b[6]) << 16) | (static_cast<uint32_t>(b[7]) << 24);
    if (head >= 12 && head <= size) {
      const uint32_t crc = stoker::crc32c(b.data() + 12, head - 12);
      for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<uint8_t>(crc >> (8 * i));
      check(b);
    }
  }
  return 0;
}
