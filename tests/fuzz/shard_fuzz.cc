// libFuzzer target: arbitrary bytes as a shard file. Opening, reading every record and
// verifying must never crash, hang or allocate without bound; stoker::Error is fine.
// The input is also parsed as a header block with magic, size and checksum fixed up,
// so the fuzzer reaches the (v1 and v2) field descriptor parser behind the checksum;
// whatever parses must encode back to the same schema.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include <string>

#include "format/shard_layout.h"
#include "stoker/crc32c.h"
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
    stoker::internal::decode_header({data, size}, "fuzz");
  } catch (const stoker::Error&) {
  }
  if (size >= 12) {
    // A shard-like input (the seeds) is used as the header block itself; anything else
    // picks the version from byte 0 and fills the block from offset 16 on.
    std::vector<uint8_t> block(stoker::kHeaderBlock, 0);
    if (std::memcmp(data, "STKSHARD", std::min<size_t>(size, 8)) == 0) {
      std::memcpy(block.data(), data, std::min<size_t>(size, stoker::kHeaderBlock - 4));
    } else {
      std::memcpy(block.data(), "STKSHARD", 8);
      block[8] = data[0] % 3;  // 0 (bad), 1 or 2
      const size_t n = std::min<size_t>(size - 4, stoker::kHeaderBlock - 20);
      std::memcpy(block.data() + 16, data + 4, n);
    }
    stoker::internal::put_u32(&block[12], stoker::kHeaderBlock);
    stoker::internal::put_u32(&block[stoker::kHeaderBlock - 4], stoker::crc32c(block.data(), stoker::kHeaderBlock - 4));
    try {
      stoker::ShardHeader h = stoker::internal::decode_header(block, "fuzz");
      stoker::ShardWriterOptions o;
      o.version = h.version;
      o.align = h.align;
      o.compression = h.compression;
      o.zstd_level = h.zstd_level;
      stoker::ShardHeader back = stoker::internal::decode_header(stoker::internal::encode_header(h.schema, o), "fuzz");
      if (!(back.schema == h.schema) || back.version != h.version) __builtin_trap();
      for (const stoker::Field& f : h.schema.fields) (void)f.check_size(f.unit_size() * 3);
    } catch (const stoker::Error&) {
    }
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
