// libFuzzer target: arbitrary bytes as a shard file. Opening, reading every record and
// verifying must never crash, hang or allocate without bound; stoker::Error is fine.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "stoker/error.h"
#include "stoker/shard.h"
#include "stoker/verify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/stoker-shard-fuzz-" + std::to_string(::getpid()) + ".stk";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    stoker::parse_shard_header({data, size}, "fuzz");
  } catch (const stoker::Error&) {
  }
  try {
    stoker::ShardReaderOptions opt;
    opt.max_record_bytes = 16u << 20;
    auto r = stoker::ShardReader::open(path, opt);
    for (uint64_t i = 0; i < r->record_count() && i < 64; ++i) {
      try {
        r->read_record(i);
      } catch (const stoker::Error&) {
      }
    }
  } catch (const stoker::Error&) {
  }
  (void)stoker::verify_path(path, 1);
  return 0;
}
