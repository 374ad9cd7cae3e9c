// Private building blocks shared by the IO engines: RAII handles for descriptors and
// mappings, the aligned slab allocator behind IoEngine::alloc(), the table of opened
// files (O_DIRECT probe included), per-request error text, once-per-process fallback
// reports and the busy-time clock.
//
// Threading: UniqueFd is a plain value. SlabAllocator is thread-safe (buffers
// are released on any thread). FileTable is used by the engine's one thread; entries
// never move once added (deque), so a worker may keep an fd number of an entry.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "stoker/io.h"
#include "util/huge_pages.h"
#include "util/unique_fd.h"

namespace stoker::internal {

// UniqueFd comes from util/unique_fd.h (shared with the format code).

/// First-fit allocator of kDirectAlignment-granular pieces of one mapping. Held by
/// shared_ptr: every IoBuffer from it keeps it (and the mapping) alive.
class SlabAllocator : public std::enable_shared_from_this<SlabAllocator> {
 public:
  explicit SlabAllocator(size_t bytes);
  uint8_t* base() const noexcept { return region_.get(); }
  size_t size() const noexcept { return region_.size(); }
  bool contains(const void* p, size_t len) const noexcept {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base());
    return a >= b && a + len <= b + size() && a + len >= a;
  }
  /// A buffer from the slab, or a null IoBuffer when no free piece is large enough.
  IoBuffer allocate(size_t bytes);
  void release(uint8_t* p, size_t bytes) noexcept;
  size_t free_bytes() const;

 private:
  PageBuffer region_;  // on huge pages where the kernel has them
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, non-adjacent
};

/// What IoEngine::alloc() gives: a piece of `slab` when it has room (null slab: none),
/// else a posix_memalign'd buffer.
IoBuffer alloc_from_slab(const std::shared_ptr<SlabAllocator>& slab, size_t bytes);

/// Rounds up to a multiple of `a` (a power of two).
inline uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }
inline bool is_aligned(uint64_t v, uint64_t a) { return (v & (a - 1)) == 0; }

struct OpenFile {
  std::string path;
  UniqueFd fd;           // O_DIRECT when `direct`
  UniqueFd buffered_fd;  // opened on first unaligned request of a direct file
  bool direct = false;
  uint64_t size = 0;
  bool removed = false;  // remove()d: its id waits for the next add()
};

/// The files an engine reads: ids in add order, a removed file's id reused by the next add.
class FileTable {
 public:
  explicit FileTable(bool want_direct) : want_direct_(want_direct) {}
  /// Opens and probes; returns the id (the lowest removed one, else the next). Throws
  /// errno_error naming the path.
  uint32_t add(const std::string& path);
  /// Closes file `id`'s descriptors; kInvalidArgument for an unknown or removed id.
  void remove(uint32_t id);
  /// kInvalidArgument for an unknown or removed id.
  OpenFile& at(uint32_t id);
  const OpenFile& at(uint32_t id) const;
  size_t size() const noexcept { return files_.size(); }
  /// The descriptor a request should use, opening the buffered one when the file is
  /// O_DIRECT and the request is not aligned (sets `unaligned`). -errno on failure.
  int fd_for(const ReadRequest& r, bool* unaligned);
  /// True when O_DIRECT was asked for and every file so far accepted it.
  bool direct() const noexcept { return want_direct_ && !direct_refused_; }
  const std::string& reasons() const noexcept { return reasons_; }
  void add_reason(const std::string& r);
  void clear() noexcept { files_.clear(); }

 private:
  bool want_direct_;
  bool direct_refused_ = false;
  std::string reasons_;
  std::deque<OpenFile> files_;
  std::vector<uint32_t> free_ids_;  // removed ids, reused lowest first
};

/// "read PATH offset O length L: <strerror> (errno N)".
std::string read_error_text(const std::string& path, uint64_t offset, uint64_t length, int err);

/// Accumulates the time during which something is in flight.
class BusyClock {
 public:
  void update(size_t inflight_now) noexcept;
  double seconds() const noexcept;

 private:
  using Clock = std::chrono::steady_clock;
  bool busy_ = false;
  Clock::time_point since_{};
  double total_ = 0;
};

}  // namespace stoker::internal
