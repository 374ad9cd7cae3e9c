// libFuzzer target: arbitrary bytes through the PNG path of ImageDecoder (libspng).
//
// Whatever the input, stoker must not crash, hang, leak or read out of bounds: every
// failure surfaces as a stoker::Error. Exercised (raster_fuzz.h): the header probe, the
// train and eval transforms (full decode to RGB, crop, resize), decode_region, and
// decode_with as a one-channel nearest-neighbour mask (as-stored values: palette indices,
// sub-byte gray, 16-bit) with a geometry derived from the input. The input is forced to
// start with the PNG signature so the fuzzer spends its time past the sniffing.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target png_fuzz
// Run:   ./build-fuzz/png_fuzz tests/fuzz/corpus/png
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "raster_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> bytes(kSig, kSig + 8);
  if (size >= 8 && std::memcmp(data, kSig, 8) == 0) {
    bytes.assign(data, data + size);
  } else {
    bytes.insert(bytes.end(), data, data + size);
  }
  stoker::FollowOutput mask;
  mask.channels = 1;
  mask.interpolation = stoker::Interpolation::kNearest;
  stoker::fuzz::exercise_raster_decoder(bytes, data, size, mask, 1, 1);
  return 0;
}
