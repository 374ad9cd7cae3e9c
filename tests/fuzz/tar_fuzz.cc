// libFuzzer target for the streaming tar reader (`stoker pack wds` input): any byte
// string must either parse or raise stoker::Error — never crash, hang or allocate
// beyond the configured limits. Seed corpus: tests/fuzz/corpus/tar/.
//
// The reader's source is compiled into this target (its definitions take precedence
// over libstoker's) so that libFuzzer's coverage instrumentation and the sanitizers see
// it even when the library itself is built without -fsanitize=fuzzer-no-link.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target tar_fuzz
// Run:   ./build-fuzz/tar_fuzz -max_len=65536 -max_total_time=60 tests/fuzz/corpus/tar
#include <cstddef>
#include <cstdint>

#include "pack/tar_reader.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::internal::MemorySource src({data, size});
  stoker::internal::TarReaderOptions o;
  o.max_member_size = 1 << 20;
  o.max_meta_size = 1 << 16;
  stoker::internal::TarReader reader(src, "fuzz.tar", o);
  stoker::internal::TarMember m;
  try {
    while (reader.next(m)) {
      if (m.data.size() > o.max_member_size) __builtin_trap();
      if (m.name.empty() || m.name[0] == '/') __builtin_trap();
    }
  } catch (const stoker::Error&) {
  }
  return 0;
}
