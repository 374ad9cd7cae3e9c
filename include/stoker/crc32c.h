// CRC32C (Castagnoli), the checksum of every byte stoker stores.
//
// Uses the SSE4.2 crc32 instruction (x86-64) or the ARMv8 crc32c instructions (aarch64)
// when the CPU has them (checked once at run time; the library is not built with
// -march=native) and a portable slicing-by-8 table otherwise. Both give identical results. Thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker {

/// Extends `crc` (0 for a fresh checksum) over `size` bytes at `data`.
/// crc32c_extend(crc32c_extend(0, a), b) == crc32c(a ++ b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) noexcept;

inline uint32_t crc32c(const void* data, size_t size) noexcept {
  return crc32c_extend(0, data, size);
}

/// True when the hardware path is in use (for reports and benchmarks).
bool crc32c_is_hardware() noexcept;

}  // namespace stoker
