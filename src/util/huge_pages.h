// Anonymous mappings meant to be backed by transparent huge pages: the IO slab and the
// batch slots. O_DIRECT reads into them become a segment or two instead of one per 4 KiB
// page, and the decoders streaming through them miss the TLB less.
#pragma once

#include <cstddef>

namespace stoker::internal {

inline constexpr size_t kHugePage = size_t{2} << 20;

/// Maps `bytes` of zero-filled anonymous memory. From 2 MiB up, the mapping starts on a
/// 2 MiB boundary and is advised MADV_HUGEPAGE (advice only: where THP is off, plain
/// pages). Returns nullptr when the kernel refuses (errno set); free with unmap_pages.
void* map_pages(size_t bytes) noexcept;
void unmap_pages(void* p, size_t bytes) noexcept;

}  // namespace stoker::internal
