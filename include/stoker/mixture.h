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
// s whose range [Q_s, Q_s + q_s) holds u (Q: the quotas' prefix sums), and the source's
// draw number is d = b * q_s + (u - Q_s). So every block holds exactly q_s draws of
// source s, spread uniformly at random over it (a batch's make-up varies as sampling
// without replacement does), and each of the source's draw numbers 0, 1, ... is used
// once — all with O(1) memory and O(log sources) work per position, no index built.
// A short last block (the epoch's size is no multiple of kBlock) has quotas of its own
// length, so a source's draws in an epoch are always 0, 1, ..., up to its count.
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
  /// Position p (< size(), checked with assert only) of the epoch.
  Draw at(uint64_t p) const;
  /// Every block's draws of each source (they sum to kBlock).
  const std::vector<uint64_t>& quotas() const noexcept { return quota_; }

 private:
  std::vector<MixtureSource> sources_;
  std::vector<uint64_t> quota_, first_;  // per source: q_s, Q_s
  std::vector<uint64_t> last_quota_, last_first_;  // the short last block's (last_len_ positions)
  uint64_t last_len_ = 0;
  std::vector<uint64_t> rounds_;         // per source: sub-epochs one mixture epoch takes
  uint64_t seed_ = 0, epoch_ = 0, size_ = 0;
};

}  // namespace stoker
