// libFuzzer target: arbitrary bytes through the WebP path of ImageDecoder (libwebp).
//
// Whatever the input, stoker must not crash, hang, leak or read out of bounds: every
// failure surfaces as a stoker::Error. Exercised: the header probe, the train transform
// (cropped decode widened for lossy, resize), the eval transform, decode_region and an
// antialiased decode_with of the train geometry. Inputs not starting with a RIFF/WEBP
// header get one, so the fuzzer spends its time past the sniffing. max_pixels is
// lowered so that declared sizes cannot make one input take seconds.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target webp_fuzz
// Run:   ./build-fuzz/webp_fuzz tests/fuzz/corpus/webp
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "stoker/error.h"
#include "stoker/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static stoker::ImageDecoder decoder;
  static std::vector<uint8_t> out(64 * 64 * 3);
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
  const std::span<const uint8_t> in(bytes);
  uint64_t seed = size;
  for (size_t i = 0; i < size && i < 8; ++i) seed = seed * 131 + data[i];

  stoker::ImageTransform t;
  t.kind = stoker::ImageTransform::Kind::kTrain;
  t.size = 64;
  t.max_pixels = 1u << 20;
  try {
    const stoker::DecodeResult r = decoder.decode(in, t, seed, out.data(), out.size());
    stoker::FollowOutput fo;
    fo.width = fo.height = 16;
    fo.max_pixels = 1u << 20;
    decoder.decode_with(in, r.geometry, fo, out.data(), out.size());
  } catch (const stoker::Error&) {
  }
  t.kind = stoker::ImageTransform::Kind::kEval;
  t.size = 32;
  try {
    decoder.decode(in, t, 0, out.data(), out.size());
  } catch (const stoker::Error&) {
  }
  try {
    const stoker::ImageInfo info = stoker::probe_image(in);
    if (static_cast<uint64_t>(info.width) * info.height <= (1u << 20) && info.width >= 5 &&
        info.height >= 5) {
      decoder.decode_region(in, 1, 2, 3, 3, out.data(), out.size(), 1u << 20);
    }
  } catch (const stoker::Error&) {
  }
  return 0;
}
