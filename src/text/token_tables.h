// The lookup tables of the BPE core: token bytes -> id, and (left id, right id) -> the
// merge they make. Open addressing over flat arrays (power-of-two capacity, at most half
// full, linear probing): lookups are the inner loop of every merge, and std's node-based
// maps cost a cache miss per node.
//
// Threading: built once, then only read (any number of threads).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::internal {

/// 64-bit hash of a byte string (8 bytes at a time, multiply-xorshift mixed).
inline uint64_t hash_bytes(std::string_view s) noexcept {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

/// Byte strings -> ids. The strings live in the table's own arena.
class BytesTable {
 public:
  static constexpr uint32_t kMissing = 0xFFFFFFFFu;
  /// Adds `key` -> `id`; false (and nothing changed) when `key` is already there.
  bool insert(std::string_view key, uint32_t id);
  uint32_t find(std::string_view key) const noexcept {
    if (slots_.empty()) return kMissing;
    const uint64_t h = hash_bytes(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id == kMissing) return kMissing;
      if (s.hash == h && s.len == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return s.id;
    }
  }
  size_t size() const noexcept { return count_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, len = 0;
    uint32_t id = kMissing;
  };
  void grow();
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0, count_ = 0;
};

/// What merging a pair of adjacent tokens gives: the merge's rank (lower merges first)
/// and the merged token's id.
struct PairMerge {
  uint32_t rank;
  uint32_t merged;
};

/// (left id, right id) -> PairMerge.
class PairTable {
 public:
  static constexpr uint32_t kNoRank = 0xFFFFFFFFu;
  /// Adds a merge; false (and nothing changed) when the pair is already there.
  bool insert(uint32_t left, uint32_t right, PairMerge merge);
  PairMerge find(uint32_t left, uint32_t right) const noexcept {
    const uint64_t key = (static_cast<uint64_t>(left) << 32) | right;
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {kNoRank, 0};
    }
  }
  size_t size() const noexcept { return count_; }
  PairTable();

 private:
  static constexpr uint64_t kEmpty = ~0ull;  // ids are below 2^32 - 1, so no pair is this
  static uint64_t mix(uint64_t k) noexcept {
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 32);
  }
  struct Slot {
    uint64_t key = kEmpty;
    PairMerge merge{kNoRank, 0};
  };
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0;
};

}  // namespace stoker::internal
