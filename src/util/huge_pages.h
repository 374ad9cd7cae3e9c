// Anonymous mappings meant to be backed by transparent huge pages: the IO slab and the
// batch slots. O_DIRECT reads into them become a segment or two instead of one per 4 KiB
// page, and the decoders streaming through them miss the TLB less.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::internal {

inline constexpr size_t kHugePage = size_t{2} << 20;

/// Maps `bytes` of zero-filled anonymous memory. From 2 MiB up, the mapping starts on a
/// 2 MiB boundary and is advised MADV_HUGEPAGE (advice only: where THP is off, plain
/// pages). Returns nullptr when the kernel refuses (errno set); free with unmap_pages.
void* map_pages(size_t bytes) noexcept;
void unmap_pages(void* p, size_t bytes) noexcept;

/// Owns a map_pages mapping. Throws std::system_error (the mmap errno) when the kernel
/// refuses it.
class PageBuffer {
 public:
  PageBuffer() noexcept = default;
  explicit PageBuffer(size_t bytes);
  PageBuffer(PageBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    if (this != &o) {
      unmap_pages(data_, size_);
      data_ = o.data_;
      size_ = o.size_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  ~PageBuffer() { unmap_pages(data_, size_); }
  uint8_t* get() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return data_ != nullptr; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace stoker::internal
