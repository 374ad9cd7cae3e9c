// Tests of src/util/stream_copy.h: the streamed copy (SSE2 on x86-64, STNP on aarch64)
// gives the source's bytes at every length and alignment and writes nothing else.
#include "util/stream_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "util/test_util.h"

namespace stoker::internal {
namespace {

TEST(StreamCopy, CopiesEveryLengthAtEveryAlignmentAndNothingElse) {
  const auto src = testing::random_bytes(4096 + 64, 21);
  alignas(64) static uint8_t dst[4096 + 128];
  const std::vector<uint8_t> fill(sizeof dst, 0x5A);
  for (size_t dst_off : {0, 1, 8, 15, 16, 32, 48}) {
    for (size_t src_off : {0, 3, 16}) {
      for (size_t len = 0; len <= 4096; len += len < 300 ? 1 : 191) {
        std::memset(dst, 0x5A, sizeof dst);
        stream_copy(dst + dst_off, src.data() + src_off, len);
        stream_copy_fence();
        ASSERT_EQ(std::memcmp(dst + dst_off, src.data() + src_off, len), 0) << dst_off << " " << src_off << " " << len;
        ASSERT_EQ(std::memcmp(dst, fill.data(), dst_off), 0) << "before, " << len;
        ASSERT_EQ(std::memcmp(dst + dst_off + len, fill.data(), sizeof dst - dst_off - len), 0) << "after, " << len;
      }
    }
  }
}

}  // namespace
}  // namespace stoker::internal
