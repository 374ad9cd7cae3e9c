// libFuzzer target: arbitrary bytes through the WebP path of ImageDecoder (libwebp).
//
// Whatever the input, stoker must not crash, hang, leak or read out of bounds: every
// failure surfaces as a stoker::Error. Exercised (raster_fuzz.h): the header probe, the
// train transform (cropped decode widened for lossy, resize), the eval transform,
// decode_region and an antialiased 16x16 decode_with of the train geometry. Inputs not
// starting with a RIFF/WEBP header get one, so the fuzzer spends its time past the
// sniffing.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target webp_fuzz
// Run:   ./build-fuzz/webp_fuzz tests/fuzz/corpus/webp
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "raster_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes;
  if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) {
    bytes.assign(data, data + size);
  } else {
    const uint32_t riff = static_cast<uint32_t>(size + 4);
    bytes = {'R', 'I', 'F', 'F', static_cast<uint8_t>(riff), static_cast<uint8_t>(riff >> 8),
             static_cast<uint8_t>(riff >> 16), static_cast<uint8_t>(riff >> 24),
             'W', 'E', 'B', 'P'};
    bytes.insert(bytes.end(), data, data + size);
  }
  stoker::FollowOutput follow;
  follow.width = follow.height = 16;
  stoker::fuzz::exercise_raster_decoder(bytes, data, size, follow, 1, 2);
  return 0;
}
