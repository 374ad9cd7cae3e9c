// libFuzzer target: arbitrary bytes through the JPEG decode + transform wrapper.
//
// Whatever the input, stoker must not crash, hang, leak or read out of bounds: every
// failure has to surface as a stoker::Error. Exercised: the train transform (ROI decode,
// DCT scaling, resize), the eval transform, the header probe and, for small inputs, the
// lossless baseline rewrite and EXIF orientation turn. max_pixels is lowered so that declared sizes cannot make a
// single input take seconds (the limit itself is what is being tested for big ones).
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target jpeg_fuzz
// Run:   ./build-fuzz/jpeg_fuzz -max_len=200000 CORPUS_DIR
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "decode/exif_orientation.h"
#include "stoker/error.h"
#include "stoker/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static stoker::ImageDecoder decoder;
  static std::vector<uint8_t> out(96 * 96 * 3);
  const std::span<const uint8_t> bytes(data, size);

  stoker::ImageTransform train;
  train.kind = stoker::ImageTransform::Kind::kTrain;
  train.size = 96;
  train.max_pixels = 1u << 22;
  uint64_t seed = size;
  for (size_t i = 0; i < size && i < 8; ++i) seed = seed * 131 + data[i];
  try {
    decoder.decode(bytes, train, seed, out.data(), out.size());
  } catch (const stoker::Error&) {
  }

  stoker::ImageTransform eval = train;
  eval.kind = stoker::ImageTransform::Kind::kEval;
  eval.size = 32;
  try {
    decoder.decode(bytes, eval, 0, out.data(), out.size());
  } catch (const stoker::Error&) {
  }

  const int orientation = stoker::internal::jpeg_exif_orientation(bytes);
  if (orientation < 0 || orientation > 8) __builtin_trap();

  try {
    stoker::probe_jpeg(bytes);
  } catch (const stoker::Error&) {
  }

  if (size < 4096) {
    try {
      const auto info = stoker::probe_jpeg(bytes);
      if (static_cast<uint64_t>(info.width) * info.height <= (1u << 20)) {
        stoker::jpeg_to_baseline(bytes);
        stoker::internal::jpeg_exif_transpose(bytes);
      }
    } catch (const stoker::Error&) {
    }
  }
  return 0;
}
