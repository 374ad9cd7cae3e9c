// libFuzzer target: fast-crop JPEGs (image.h jpeg_for_fast_crop) with hostile indexes.
//
// The index segment carries its own CRC32C, so plain mutations mostly stop there. The
// harness therefore runs each input twice: as it is, and with the CRC of its STKRST
// segment recomputed, so mutated geometry fields and interval sizes reach the index
// parser, the splice and libjpeg. Whatever the input, every failure must be a
// stoker::Error and nothing may read outside the input (ASan: libFuzzer's buffer is
// exactly the input's size, and the copy is too). Seeds: tests/fuzz/corpus/splice, small
// fast-crop files of several layouts.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target splice_fuzz
// Run:   ./build-fuzz/splice_fuzz tests/fuzz/corpus/splice
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/image.h"

namespace {

// Recomputes the CRC of the first STKRST segment; false when there is none.
bool fix_index_crc(std::vector<uint8_t>& f) {
  static const uint8_t tag[7] = {'S', 'T', 'K', 'R', 'S', 'T', 0};
  for (size_t i = 0; i + 4 + sizeof(tag) <= f.size(); ++i) {
    if (f[i] != 0xFF || f[i + 1] != 0xEF || std::memcmp(&f[i + 4], tag, sizeof(tag)) != 0) continue;
    const size_t len = (static_cast<size_t>(f[i + 2]) << 8) | f[i + 3];
    if (len < 2 + 4 || i + 2 + len > f.size()) return false;
    uint8_t* p = &f[i + 4];
    const size_t pl = len - 2;
    const uint32_t crc = stoker::crc32c(p, pl - 4);
    for (int b = 0; b < 4; ++b) p[pl - 4 + b] = static_cast<uint8_t>(crc >> (8 * b));
    return true;
  }
  return false;
}

void run(const std::vector<uint8_t>& f, uint64_t seed) {
  static stoker::ImageDecoder decoder;
  static std::vector<uint8_t> out(256 * 256 * 3);
  const std::span<const uint8_t> bytes(f.data(), f.size());
  try {
    stoker::check_fast_crop_index(bytes);
  } catch (const stoker::Error&) {
  }
  stoker::ImageTransform t;
  t.size = 40;
  t.max_pixels = 1u << 20;
  for (int k = 0; k < 3; ++k) {
    t.kind = k == 2 ? stoker::ImageTransform::Kind::kEval : stoker::ImageTransform::Kind::kTrain;
    t.allow_dct_scaling = k != 1;
    try {
      decoder.decode(bytes, t, seed + k, out.data(), out.size());
    } catch (const stoker::Error&) {
    }
  }
  try {
    const stoker::JpegInfo info = stoker::probe_jpeg(bytes);
    if (info.width > 0 && info.height > 0 && static_cast<uint64_t>(info.width) * info.height <= (1u << 16)) {
      const int x = static_cast<int>(seed % info.width), y = static_cast<int>((seed >> 16) % info.height);
      decoder.decode_region(bytes, x, y, info.width - x, info.height - y, out.data(), out.size(), 1u << 16);
    }
  } catch (const stoker::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t seed = size;
  for (size_t i = 0; i < size && i < 8; ++i) seed = seed * 131 + data[size - 1 - i];
  std::vector<uint8_t> f(data, data + size);
  run(f, seed);
  if (fix_index_crc(f)) {
    f.shrink_to_fit();
    run(f, seed);
  }
  return 0;
}
