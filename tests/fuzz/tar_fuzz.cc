// libFuzzer target for the tar reader (`stoker pack wds` input, on libarchive): any
// byte string — a tar, or one compressed by any filter libarchive detects — must either
// parse or raise stoker::Error: never crash, hang or allocate beyond the configured
// limits, and never return an unchecked member name. Both read paths are exercised: whole
// members, and headers with a prefix of the data (the WebDataset discovery pass).
// Seed corpus: tests/fuzz/corpus/tar/.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target tar_fuzz
// Run:   ./build-fuzz/tar_fuzz -max_len=65536 -max_total_time=60 tests/fuzz/corpus/tar
#include <cstddef>
#include <cstdint>

#include <span>

#include "pack/tar_reader.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::internal::TarReaderOptions o;
  o.max_member_size = 1 << 20;
  for (int pass = 0; pass < 2; ++pass) {
    try {
      stoker::internal::TarReader reader(std::span<const uint8_t>(data, size), "fuzz.tar", o);
      stoker::internal::TarMember m;
      while (pass == 0 ? reader.next(m) : reader.next_header(m)) {
        if (pass == 1) reader.read_data(m, 64);
        if (m.data.size() > o.max_member_size || m.data.size() > m.size) __builtin_trap();
        if (m.name.empty() || m.name[0] == '/') __builtin_trap();
      }
    } catch (const stoker::Error&) {
    }
  }
  return 0;
}
