#include "io/mapped_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/unique_fd.h"

namespace stoker::internal {

MappedShards::~MappedShards() {
  for (Map& m : maps_) unmap(m);
}

void MappedShards::unmap(Map& m) noexcept {
  if (m.base) {
    munmap(const_cast<uint8_t*>(m.base), m.len);
    mapped_bytes_ -= m.len;
  }
  m = Map{};
}

bool MappedShards::cached(const Map& m) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  pages_.resize((m.len + page - 1) / page);
  if (mincore(const_cast<uint8_t*>(m.base), m.len, pages_.data()) != 0) return false;
  size_t missing = 0;
  for (unsigned char p : pages_) missing += !(p & 1);
  if (missing * 100 > pages_.size()) return false;
  // The few pages missing are read now, ahead of the decoders, which would otherwise
  // each stall on a fault's read of one.
  for (size_t i = 0; i < pages_.size();) {
    if (pages_[i] & 1) {
      ++i;
      continue;
    }
    size_t e = i;
    while (e < pages_.size() && !(pages_[e] & 1)) ++e;
    madvise(const_cast<uint8_t*>(m.base) + i * page, (e - i) * page, MADV_WILLNEED);
    i = e;
  }
  return true;
}

void MappedShards::map(Map& m, const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st{};
  if (!fd || fstat(fd.get(), &st) != 0 || st.st_size <= 0) return;
  const auto len = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return;
  // Records are taken in shuffled order: a page evicted meanwhile is faulted back alone,
  // not with a readahead window of neighbours no record asked for.
  madvise(p, len, MADV_RANDOM);
  m.base = static_cast<const uint8_t*>(p);
  m.len = len;
  m.dev = static_cast<uint64_t>(st.st_dev);
  m.ino = static_cast<uint64_t>(st.st_ino);
  mapped_bytes_ += len;
}

std::span<const uint8_t> MappedShards::at(size_t shard, const std::string& path) {
  if (shard >= maps_.size()) return {};
  Map& m = maps_[shard];
  if (m.asked_run != run_) {
    struct stat st{};
    const bool there = stat(path.c_str(), &st) == 0 && st.st_size > 0;
    // Gone, replaced or resized since the last run: the mapping is of another file now.
    if (m.base && (!there || m.dev != static_cast<uint64_t>(st.st_dev) ||
                   m.ino != static_cast<uint64_t>(st.st_ino) || m.len != static_cast<size_t>(st.st_size)))
      unmap(m);
    if (there && !m.base) map(m, path);
    m.resident = m.base && cached(m);
    m.asked_run = run_;
  }
  return answer(m);
}

}  // namespace stoker::internal
