#include "stoker/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "util/crc32c_portable.h"
#include "util/test_util.h"

namespace stoker {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) test vectors.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, HardwareAndPortableAgreeOnEveryLengthAndAlignment) {
  // Lengths around the three-way loop's rounds (3 x 256 and 3 x 8192 bytes) too.
  auto data = testing::random_bytes(200000 + 64, 7);
  for (size_t off = 0; off < 16; ++off)
    for (size_t len : {0, 1, 3, 7, 8, 9, 15, 16, 63, 64, 255, 767, 768, 769, 1000, 1543, 4096, 24575, 24576, 24577,
                       25344, 49152 + 767, 116000, 200000})
      ASSERT_EQ(crc32c(data.data() + off, len), internal::crc32c_extend_portable(0, data.data() + off, len)) << off << " " << len;
}

TEST(Crc32c, HardwareAndPortableAgreeOnEveryShortLength) {
  // Every tail and alignment the byte and 8-byte steps handle, from 0 to 3 x 256 + 40.
  auto data = testing::random_bytes(1024, 9);
  for (size_t off = 0; off < 8; ++off)
    for (size_t len = 0; len <= 808; ++len)
      ASSERT_EQ(crc32c_extend(0x12345678u, data.data() + off, len),
                internal::crc32c_extend_portable(0x12345678u, data.data() + off, len))
          << off << " " << len;
}

// The hardware path is in use wherever the CPU has the instructions (so the comparisons
// above test it): SSE4.2 on x86-64, the ARMv8 CRC32 extension on aarch64.
TEST(Crc32c, HardwarePathIsUsedWhereTheCpuHasIt) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(crc32c_is_hardware(), __builtin_cpu_supports("sse4.2") != 0);
#elif defined(__aarch64__)
  EXPECT_EQ(crc32c_is_hardware(), (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0);
  if (!crc32c_is_hardware()) GTEST_SKIP() << "this aarch64 CPU has no CRC32 instructions";
#else
  EXPECT_FALSE(crc32c_is_hardware());
#endif
}

TEST(Crc32c, ExtendEqualsWhole) {
  auto data = testing::random_bytes(10000, 3);
  for (size_t cut : {0, 1, 5, 4999, 9999, 10000}) {
    uint32_t a = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c_extend(a, data.data() + cut, data.size() - cut), crc32c(data.data(), data.size()));
  }
}

}  // namespace
}  // namespace stoker
