// libFuzzer target: arbitrary bytes through the PNG path of ImageDecoder (libspng).
//
// Whatever the input, stoker must not crash, hang, leak or read out of bounds: every
// failure surfaces as a stoker::Error. Exercised: the header probe, the train and eval
// transforms (full decode to RGB, crop, resize), decode_region, and decode_with as a
// one-channel nearest-neighbour mask (as-stored values: palette indices, sub-byte gray,
// 16-bit) with a geometry derived from the input. The input is forced to start with the
// PNG signature so the fuzzer spends its time past the sniffing. max_pixels is lowered
// so that declared sizes cannot make one input take seconds.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target png_fuzz
// Run:   ./build-fuzz/png_fuzz tests/fuzz/corpus/png
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
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> bytes(kSig, kSig + 8);
  if (size >= 8 && std::memcmp(data, kSig, 8) == 0) {
    bytes.assign(data, data + size);
  } else {
    bytes.insert(bytes.end(), data, data + size);
  }
  const std::span<const uint8_t> in(bytes);
  uint64_t seed = size;
  for (size_t i = 0; i < size && i < 8; ++i) seed = seed * 131 + data[i];

  stoker::ImageTransform t;
  t.kind = stoker::ImageTransform::Kind::kTrain;
  t.size = 64;
  t.max_pixels = 1u << 20;
  stoker::DecodeResult r;
  bool decoded = false;
  try {
    r = decoder.decode(in, t, seed, out.data(), out.size());
    decoded = true;
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
    if (static_cast<uint64_t>(info.width) * info.height <= (1u << 20) && info.width >= 4 &&
        info.height >= 4) {
      decoder.decode_region(in, 1, 1, 3, 3, out.data(), out.size(), 1u << 20);
    }
  } catch (const stoker::Error&) {
  }
  if (decoded) {
    stoker::FollowOutput mo;
    mo.channels = 1;
    mo.interpolation = stoker::Interpolation::kNearest;
    mo.max_pixels = 1u << 20;
    try {
      decoder.decode_with(in, r.geometry, mo, out.data(), out.size());
    } catch (const stoker::Error&) {
    }
  }
  return 0;
}
