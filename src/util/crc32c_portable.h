// The portable CRC32C (slicing-by-8 tables): what stoker/crc32c.h's crc32c_extend runs
// on a CPU without the crc32 instructions, and the reference the hardware paths are
// tested and measured against. Thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::internal {

/// crc32c_extend (stoker/crc32c.h) without the hardware path: the same results.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t size) noexcept;

}  // namespace stoker::internal
