#include "text/bpe_merge.h"

#include <cassert>
#include <cstring>
#include <queue>

namespace stoker::internal {

void bpe_merge_scan(std::string_view piece, const ByteTokens& bytes, const PairTable& pairs,
                    std::vector<uint32_t>& out) {
  assert(!piece.empty() && piece.size() <= kBpeScanMaxBytes);
  uint32_t ids[kBpeScanMaxBytes];
  PairMerge pair[kBpeScanMaxBytes];  // pair[i]: ids[i] with ids[i + 1]
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) ids[i] = bytes[static_cast<uint8_t>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = pairs.find(ids[i], ids[i + 1]);
  while (n > 1) {
    size_t best = 0;
    uint32_t rank = pair[0].rank;
    for (size_t i = 1; i + 1 < n; ++i)
      if (pair[i].rank < rank) rank = pair[i].rank, best = i;
    if (rank == PairTable::kNoRank) break;
    ids[best] = pair[best].merged;
    std::memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof ids[0]);
    std::memmove(pair + best, pair + best + 1, (n - best - 2) * sizeof pair[0]);
    --n;
    if (best + 1 < n) pair[best] = pairs.find(ids[best], ids[best + 1]);
    if (best > 0) pair[best - 1] = pairs.find(ids[best - 1], ids[best]);
  }
  out.insert(out.end(), ids, ids + n);
}

void bpe_merge_heap(std::string_view piece, const ByteTokens& bytes, const PairTable& pairs,
                    std::vector<uint32_t>& out) {
  struct Node {
    uint32_t id;
    int32_t prev, next;  // -1: none; a merged-away node is unlinked and never revisited
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;  // the left node; nodes keep their first byte's offset, so this orders left to right
    uint32_t left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<Node> nodes(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) nodes[i] = {bytes[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int32_t l) {
    const int32_t r = nodes[l].next;
    if (r < 0) return;
    const PairMerge m = pairs.find(nodes[l].id, nodes[r].id);
    if (m.rank != PairTable::kNoRank) heap.push({m.rank, l, nodes[l].id, nodes[r].id, m.merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // A candidate is stale when either side has merged since it was pushed.
    if (!alive[c.pos]) continue;
    const int32_t r = nodes[c.pos].next;
    if (r < 0 || nodes[c.pos].id != c.left || nodes[r].id != c.right) continue;
    nodes[c.pos].id = c.merged;
    nodes[c.pos].next = nodes[r].next;
    if (nodes[r].next >= 0) nodes[nodes[r].next].prev = c.pos;
    alive[r] = 0;
    if (nodes[c.pos].prev >= 0) consider(nodes[c.pos].prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = nodes[i].next) out.push_back(nodes[i].id);
}

}  // namespace stoker::internal
