#include "util/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cerrno>
#include <string>
#include <system_error>

namespace stoker::internal {

void* map_pages(size_t bytes) noexcept {
  if (bytes == 0) return nullptr;
  // A larger span, then its unaligned head and tail given back: mmap alone aligns large
  // mappings on some kernels only.
  const size_t span = bytes >= kHugePage ? bytes + kHugePage : bytes;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<uint8_t*>(p);
  if (span == bytes) return base;
  auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1));
  if (aligned != base) ::munmap(base, static_cast<size_t>(aligned - base));
  // The kernel's page, not 4 KiB: aarch64 kernels often use 64 KiB pages (Grace), and an
  // unmap at an address inside a page fails, leaving the tail mapped.
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t used = (bytes + page - 1) & ~(page - 1);
  const size_t tail = static_cast<size_t>(base + span - (aligned + used));
  if (tail) ::munmap(aligned + used, tail);
#ifdef MADV_HUGEPAGE
  ::madvise(aligned, bytes, MADV_HUGEPAGE);
#endif
  return aligned;
}

void unmap_pages(void* p, size_t bytes) noexcept {
  if (p) ::munmap(p, bytes);
}

PageBuffer::PageBuffer(size_t bytes) : data_(static_cast<uint8_t*>(map_pages(bytes))), size_(bytes) {
  if (bytes && !data_) {
    const int err = errno;  // before the message allocates
    throw std::system_error(err, std::generic_category(), "mmap of " + std::to_string(bytes) + " bytes");
  }
}

}  // namespace stoker::internal
