// MixtureOrder: which source each position of a weighted mixture's epoch draws from,
// and which sample of that source — a pure function of (sources, weights, seed, epoch,
// position), like EpochOrder (order.h), so the sequence does not depend on the world
// size and a run resumes from OrderState::consumed like a single dataset's.
//
// The rule. An epoch of the mixture is `samples_per_epoch` positions (default: the
// sources' sizes summed). Positions are cut into blocks of kBlock (65536). Each source s
// gets a quota q_s of every block: its weight's share of kBlock, rounded by largest
// remainder so the quotas sum to kBlock (a weight under 1/kBlock of the total is
// refused). Within block b a keyed permutation pi_b of [0, kBlock) (Permutation, keyed
// by seed, epoch and b) sends position o of the block to u = pi_b(o); the source is the
// s whose range [Q_s, Q_s + q_s) holds u (Q: the quotas' prefix sums). So every block
// holds exactly q_s positions of source s, spread uniformly at random over it (a batch's
// make-up varies as sampling without replacement does). The source's draw number is
// d = b * q_s + (how many of the block's positions before o are also source s's): each
// source's draws run 0, 1, 2, ... in position order, so a source is read through its own
// epoch order front to back (a token source's windows, once each), and a resume knows
// every source's count from the blocks before it. A block's table (2 bytes and 4 bytes
// a position, built in O(kBlock)) answers all its positions; the sources of single
// positions need no table (source_at: O(log sources)). A short last block (the epoch's
// size is no multiple of kBlock) has quotas of its own length.
//
// Draw d of source s is sample d mod n_s of the source's own epoch order for source
// epoch `epoch * rounds_s + d / n_s` (rounds_s: how many times an epoch of the mixture
// can run through source s): a source that runs out is reshuffled, a new sub-epoch of
// its own, and no two mixture epochs share a source epoch.
//
// Threading: immutable after construction; const methods are safe from any threads.
#pragma once

#include <cstdint>
#include <vector>

#include "stoker/order.h"

namespace stoker {

struct MixtureSource {
  uint64_t samples = 0;  ///< the source's epoch size (records, or token rows), >= 1
  double weight = 1;     ///< > 0, relative to the others'
};

class MixtureOrder {
 public:
  static constexpr uint64_t kBlock = uint64_t{1} << 16;

  /// kInvalidArgument: no source, a source without samples, a weight that is not a
  /// positive finite number or gets no share of a block.
  MixtureOrder(std::vector<MixtureSource> sources, uint64_t seed, uint64_t epoch, uint64_t samples_per_epoch = 0);

  uint64_t size() const noexcept { return size_; }  ///< positions in the epoch
  struct Draw {
    uint32_t source = 0;
    uint64_t source_epoch = 0;  ///< the source's own epoch to take the sample's order from
    uint64_t position = 0;      ///< the position in that source epoch's order, < samples
  };
  /// Positions [first, first + count) of the epoch (within size(), else kInvalidArgument),
  /// into out: one block table per block touched.
  void draws(uint64_t first, uint64_t count, Draw* out) const;
  Draw at(uint64_t p) const;  ///< one position: builds its block's table (O(kBlock))
  uint32_t source_at(uint64_t p) const;  ///< the source of position p alone, O(log sources)
  /// Every block's draws of each source (they sum to kBlock).
  const std::vector<uint64_t>& quotas() const noexcept { return quota_; }

 private:
  Permutation block_permutation(uint64_t b) const;
  uint32_t source_of(uint64_t b, uint64_t u) const;  ///< the source of u = pi_b(o)

  std::vector<MixtureSource> sources_;
  std::vector<uint64_t> quota_, first_;  // per source: q_s, Q_s
  std::vector<uint64_t> last_quota_, last_first_;  // the short last block's (last_len_ positions)
  uint64_t last_len_ = 0;
  std::vector<uint64_t> rounds_;         // per source: sub-epochs one mixture epoch takes
  uint64_t seed_ = 0, epoch_ = 0, size_ = 0;
};

}  // namespace stoker
