#include "stoker/crc32c.h"
#include "util/crc32c_portable.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <sys/auxv.h>
#endif

namespace stoker {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};
constexpr Tables kTables;

// The product of a and b modulo the polynomial, both in the reflected representation
// (bit 31 is x^0). For building the shift tables only.
constexpr uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// Moves a CRC state past `bytes` zero bytes: multiplication by x^(8 * bytes), as four
// lookups. The three-way loop below needs it to join its streams.
struct Shift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  explicit Shift(size_t bytes) {
    uint32_t x8n = 1u << 31;  // x^0
    uint32_t sq = 1u << 23;   // x^8
    for (size_t n = bytes; n; n >>= 1) {  // x^(8 * bytes) by squaring
      if (n & 1) x8n = multmodp(sq, x8n);
      sq = multmodp(sq, sq);
    }
    for (uint32_t j = 0; j < 4; ++j)
      for (uint32_t b = 0; b < 256; ++b) t[j][b] = multmodp(x8n, b << (8 * j));
  }
  uint32_t operator()(uint32_t c) const noexcept {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

// The hardware path: an ISA's 8-byte and 1-byte CRC32C instructions, compiled for the
// functions that use them only (the library is built for the baseline ISA) and chosen at
// run time. Every function of the path carries the same target, so that all of it inlines.
#if defined(__x86_64__)
#define STOKER_CRC_HW __attribute__((target("sse4.2")))
// crc32q works on a 64-bit register: keeping the state there saves a zero extension per step.
using CrcState = uint64_t;
STOKER_CRC_HW inline CrcState step8(CrcState c, uint64_t v) noexcept { return _mm_crc32_u64(c, v); }
STOKER_CRC_HW inline CrcState step1(CrcState c, uint8_t b) noexcept {
  return _mm_crc32_u8(static_cast<uint32_t>(c), b);
}

bool detect_hardware() noexcept {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & bit_SSE4_2) != 0;
}
#elif defined(__aarch64__)
// Optional in ARMv8.0, mandatory from 8.1 (every Neoverse core has them).
#if defined(__clang__)
#define STOKER_CRC_HW __attribute__((target("crc")))
#else
#define STOKER_CRC_HW __attribute__((target("+crc")))
#endif
using CrcState = uint32_t;
STOKER_CRC_HW inline CrcState step8(CrcState c, uint64_t v) noexcept { return __crc32cd(c, v); }
STOKER_CRC_HW inline CrcState step1(CrcState c, uint8_t b) noexcept { return __crc32cb(c, b); }

bool detect_hardware() noexcept { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#endif

#if defined(STOKER_CRC_HW)
// The instruction takes about three cycles and can start one per cycle (on both ISAs):
// three streams over three neighbouring blocks, joined by shifting, run about three times
// as fast as one (records are checked before they are decompressed: this is on every
// record's path).
template <size_t kBlock>
STOKER_CRC_HW inline CrcState crc_hw_3way(CrcState c, const uint8_t*& p, size_t& n,
                                          const Shift& shift) noexcept {
  while (n >= 3 * kBlock) {
    CrcState c1 = 0, c2 = 0;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kBlock + i, 8);
      std::memcpy(&v2, p + 2 * kBlock + i, 8);
      c = step8(c, v0);
      c1 = step8(c1, v1);
      c2 = step8(c2, v2);
    }
    c = shift(shift(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  return c;
}

constexpr size_t kLongBlock = 8192, kShortBlock = 256;

STOKER_CRC_HW uint32_t crc_hw(uint32_t crc, const uint8_t* p, size_t n) noexcept {
  static const Shift long_shift(kLongBlock), short_shift(kShortBlock);
  CrcState c = ~crc;
  while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
    c = step1(c, *p++);
    --n;
  }
  c = crc_hw_3way<kLongBlock>(c, p, n, long_shift);
  c = crc_hw_3way<kShortBlock>(c, p, n, short_shift);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = step8(c, v);
    p += 8;
    n -= 8;
  }
  while (n--) c = step1(c, *p++);
  return ~static_cast<uint32_t>(c);
}

const bool kHasHardware = detect_hardware();
#else
const bool kHasHardware = false;
#endif

}  // namespace

namespace internal {

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t size) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  const auto& t = kTables.t;
  while (size >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size--) c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

}  // namespace internal

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) noexcept {
#if defined(STOKER_CRC_HW)
  if (kHasHardware) return crc_hw(crc, static_cast<const uint8_t*>(data), size);
#endif
  return internal::crc32c_extend_portable(crc, data, size);
}

bool crc32c_is_hardware() noexcept { return kHasHardware; }

}  // namespace stoker
