#include "io/io_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "stoker/error.h"
#include "util/log.h"

namespace stoker::internal {

// UniqueFd::reset is defined in util/bytes.cc.

namespace {
// On huge pages where the kernel has them: a read into 4 KiB pages is one segment per
// page (29 for a 116 KiB token record) for the kernel and the disk to walk, registered
// buffer or not; on 2 MiB pages one or two.
PageBuffer map_slab(size_t bytes) {
  try {
    return PageBuffer(bytes);
  } catch (const std::system_error& e) {
    throw errno_error("mmap of a " + std::to_string(bytes) + "-byte IO slab", e.code().value());
  }
}
}  // namespace

SlabAllocator::SlabAllocator(size_t bytes) : region_(map_slab(round_up(bytes, kDirectAlignment))) {
  if (region_.size()) free_.emplace(0, region_.size());
}

IoBuffer SlabAllocator::allocate(size_t bytes) {
  const uint64_t need = round_up(bytes == 0 ? 1 : bytes, kDirectAlignment);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > need) free_.emplace(off + need, len - need);
    IoBuffer b;
    b.data_ = base() + off;
    b.size_ = need;
    b.slab_ = shared_from_this();
    return b;
  }
  return {};
}

void SlabAllocator::release(uint8_t* p, size_t bytes) noexcept {
  uint64_t off = static_cast<uint64_t>(p - base()), len = bytes;
  std::lock_guard<std::mutex> lock(mu_);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free_.emplace(off, len);
}

size_t SlabAllocator::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& [o, l] : free_) n += l;
  return n;
}

static std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

void FileTable::add_reason(const std::string& r) {
  if (reasons_.find(r) != std::string::npos) return;
  if (!reasons_.empty()) reasons_ += "; ";
  reasons_ += r;
}

uint32_t FileTable::add(const std::string& path) {
  OpenFile f;
  f.path = path;
  std::string refused;
  if (want_direct_) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd >= 0) {
      f.fd.reset(fd);
      // Some filesystems accept the flag at open and refuse the read; probe once.
      void* probe = nullptr;
      if (::posix_memalign(&probe, kDirectAlignment, kDirectAlignment) != 0) {
        throw errno_error("allocating the O_DIRECT probe buffer for " + path, ENOMEM);
      }
      ssize_t n;
      do {
        n = ::pread(fd, probe, kDirectAlignment, 0);
      } while (n < 0 && (errno == EINTR || errno == EAGAIN));
      const int err = errno;
      std::free(probe);
      if (n >= 0) {
        f.direct = true;
      } else if (err == EINVAL) {
        refused = "an aligned O_DIRECT read of " + path + " failed: " + errno_text(err);
        f.fd.reset();
      } else {
        throw errno_error("read " + path + " offset 0 length 4096", err);
      }
    } else if (errno == EINVAL) {
      refused = "open(" + path + ", O_DIRECT) failed: " + errno_text(EINVAL);
    } else {
      throw errno_error("open " + path, errno);
    }
  }
  if (!f.fd) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw errno_error("open " + path, errno);
    f.fd.reset(fd);
  }
  struct stat st {};
  if (::fstat(f.fd.get(), &st) != 0) throw errno_error("stat " + path, errno);
  f.size = static_cast<uint64_t>(st.st_size);
  if (!refused.empty()) {
    direct_refused_ = true;
    const std::string msg = "O_DIRECT refused: " + refused +
                            " (the filesystem does not support direct IO); reading it "
                            "buffered through the page cache instead; to read direct, keep "
                            "the dataset on a filesystem that supports O_DIRECT (ext4, xfs)";
    add_reason(msg);
    log_warn_once("odirect", msg);
  }
  if (!free_ids_.empty()) {
    // Reused: a long run that opens and closes shards keeps its ids (and an io_uring
    // engine its registered slots) as few as the files open at once.
    const auto lowest = std::min_element(free_ids_.begin(), free_ids_.end());
    const uint32_t id = *lowest;
    free_ids_.erase(lowest);
    files_[id] = std::move(f);
    return id;
  }
  files_.push_back(std::move(f));
  return static_cast<uint32_t>(files_.size() - 1);
}

void FileTable::remove(uint32_t id) {
  OpenFile& f = at(id);
  f.fd.reset();
  f.buffered_fd.reset();
  f.removed = true;
  free_ids_.push_back(id);
}

OpenFile& FileTable::at(uint32_t id) {
  if (id >= files_.size()) {
    throw_error(ErrorCode::kInvalidArgument,
                "read request names file id " + std::to_string(id) + " but only " +
                    std::to_string(files_.size()) + " files were added");
  }
  if (files_[id].removed)
    throw_error(ErrorCode::kInvalidArgument, "read request names file id " + std::to_string(id) + " (" +
                                                 files_[id].path + "), which was removed");
  return files_[id];
}

const OpenFile& FileTable::at(uint32_t id) const {
  return const_cast<FileTable*>(this)->at(id);
}

int FileTable::fd_for(const ReadRequest& r, bool* unaligned) {
  OpenFile& f = at(r.file);
  *unaligned = false;
  if (!f.direct) return f.fd.get();
  if (is_aligned(r.offset, kDirectAlignment) && is_aligned(r.length, kDirectAlignment) &&
      is_aligned(reinterpret_cast<uintptr_t>(r.buf), kDirectAlignment)) {
    return f.fd.get();
  }
  *unaligned = true;
  if (!f.buffered_fd) {
    int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    f.buffered_fd.reset(fd);
  }
  return f.buffered_fd.get();
}

std::string read_error_text(const std::string& path, uint64_t offset, uint64_t length, int err) {
  return "read " + path + " offset " + std::to_string(offset) + " length " +
         std::to_string(length) + ": " + errno_text(err);
}

void BusyClock::update(size_t inflight_now) noexcept {
  if (inflight_now > 0 && !busy_) {
    busy_ = true;
    since_ = Clock::now();
  } else if (inflight_now == 0 && busy_) {
    busy_ = false;
    total_ += std::chrono::duration<double>(Clock::now() - since_).count();
  }
}

double BusyClock::seconds() const noexcept {
  double t = total_;
  if (busy_) t += std::chrono::duration<double>(Clock::now() - since_).count();
  return t;
}

IoBuffer alloc_from_slab(const std::shared_ptr<SlabAllocator>& slab, size_t bytes) {
  if (slab) {
    IoBuffer b = slab->allocate(bytes);
    if (b) return b;
  }
  return IoBuffer::aligned(bytes);
}

}  // namespace stoker::internal
