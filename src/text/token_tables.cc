#include "text/token_tables.h"

#include <utility>

#include "stoker/error.h"

namespace stoker::internal {

bool BytesTable::insert(std::string_view key, uint32_t id) {
  if (find(key) != kMissing) return false;
  if ((count_ + 1) * 2 > slots_.size()) grow();
  if (arena_.size() + key.size() > 0xFFFFFFFFull)
    throw_error(ErrorCode::kResourceExhausted, "tokenizer vocabulary over 4 GiB of token text");
  Slot s{hash_bytes(key), static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
  arena_.append(key);
  size_t i = s.hash & mask_;
  while (slots_[i].id != kMissing) i = (i + 1) & mask_;
  slots_[i] = s;
  ++count_;
  return true;
}

void BytesTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id == kMissing) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].id != kMissing) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

PairTable::PairTable() : slots_(1024), mask_(1023) {}

bool PairTable::insert(uint32_t left, uint32_t right, PairMerge merge) {
  if (find(left, right).rank != kNoRank) return false;
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = (static_cast<uint64_t>(left) << 32) | right;
  size_t i = mix(key) & mask_;
  while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
  slots_[i] = Slot{key, merge};
  ++count_;
  return true;
}

void PairTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = mix(s.key) & mask_;
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

}  // namespace stoker::internal
