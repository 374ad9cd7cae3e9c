// Read-only mappings of shard files whose bytes are all in the page cache.
//
// Records under a block are read through the page cache anyway (one buffered read, one
// copy each); tens of thousands a second, those reads cost the reader thread a core's
// tenth or more in syscalls and copies on a machine whose every other core tokenises.
// When a whole shard is cached, its records can be taken straight from a mapping of it:
// no request, no copy. Whether it is cached is asked once per run (mincore over the
// file): at least 99 % of its pages must be. A shard that is not (a dataset larger than
// the memory, a first epoch from cold storage) goes on being read by the engine, whose
// buffered reads cache it for the next run. The few pages missing (a shared machine's
// page cache loses scattered pages even with memory free) are asked for then
// (MADV_WILLNEED); one evicted during the run is read back by the fault of the thread
// that touches it: one 4 KiB read (MADV_RANDOM), a stall, not an error.
//
// A shard truncated in place while mapped would fault with SIGBUS: stoker never
// modifies a shard in place (datasets are written whole and renamed), and a shard
// replaced by rename keeps its mapping of the old file, as an open descriptor keeps the
// old file for the engine.
//
// Threading: new_run / at are called by the one reader thread; the bytes at() returns
// are read by any thread until the MappedShards is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace stoker::internal {

class MappedShards {
 public:
  explicit MappedShards(size_t shards) : maps_(shards) {}
  ~MappedShards();
  MappedShards(const MappedShards&) = delete;
  MappedShards& operator=(const MappedShards&) = delete;

  /// A new run: each shard's residency is asked again at its first at().
  void new_run() { ++run_; }
  /// This run's answer for `shard` when it was asked already (what at() returned), else
  /// nullopt: the reader's path per record costs no file name.
  std::optional<std::span<const uint8_t>> answered(size_t shard) const {
    if (shard >= maps_.size() || maps_[shard].asked_run != run_) return std::nullopt;
    return answer(maps_[shard]);
  }
  /// Shard `shard`'s file (`path`) mapped, when it was cached (99 % of its pages) at
  /// this run's first ask (then the file was stated again: one replaced or resized
  /// since the last run is mapped anew); empty otherwise (read it through the engine).
  /// Never throws: a file that cannot be opened, stated or mapped is left to the
  /// engine, which names the problem.
  std::span<const uint8_t> at(size_t shard, const std::string& path);
  /// Bytes of the shards mapped now.
  uint64_t mapped_bytes() const noexcept { return mapped_bytes_; }

 private:
  struct Map {
    const uint8_t* base = nullptr;
    size_t len = 0;
    uint64_t dev = 0, ino = 0;
    uint64_t asked_run = 0;  // the run whose first at() asked about this shard (0: none)
    bool resident = false;   // the answer that run got
  };
  static std::span<const uint8_t> answer(const Map& m) {
    return m.resident ? std::span<const uint8_t>(m.base, m.len) : std::span<const uint8_t>();
  }
  void unmap(Map& m) noexcept;
  /// Maps `path` into `m` (left empty when the file cannot be opened or mapped).
  void map(Map& m, const std::string& path);
  /// Whether at least 99 % of `m`'s pages are in the page cache; if so, the others are
  /// asked for (read ahead of the threads that will touch them).
  bool cached(const Map& m);
  std::vector<Map> maps_;
  uint64_t run_ = 1;
  uint64_t mapped_bytes_ = 0;
  std::vector<unsigned char> pages_;  // mincore's answer, reused
};

}  // namespace stoker::internal
