// libFuzzer target: arbitrary bytes through the .npy header parser (src/format/npy.h).
//
// Whatever the input, the parser must not crash, hang, leak or read out of bounds, and
// what it accepts must be self-consistent: the data offset lies inside the bytes it was
// given, the element count is the product of the shape and the byte count fits. Inputs
// without the magic get it (and a version-1 length field) so the dict parser sees them.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target npy_fuzz
// Run:   ./build-fuzz/npy_fuzz tests/fuzz/corpus/npy
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "format/npy.h"
#include "stoker/error.h"

namespace {
void check(std::span<const uint8_t> in) {
  try {
    const stoker::internal::NpyHeader h = stoker::internal::parse_npy_header(in, "fuzz.npy");
    uint64_t n = 1;
    for (uint64_t d : h.shape) n *= d;
    if (h.data_offset > in.size() || n != h.count ||
        h.data_bytes != h.count * static_cast<uint64_t>(h.itemsize)) {
      std::abort();
    }
  } catch (const stoker::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(std::span<const uint8_t>(data, size));
  if (size < 6 || std::memcmp(data, "\x93NUMPY", 6) != 0) {
    std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                              static_cast<uint8_t>(size), static_cast<uint8_t>(size >> 8)};
    b.insert(b.end(), data, data + size);
    check(b);
  }
  return 0;
}
