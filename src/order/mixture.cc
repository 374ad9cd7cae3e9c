// MixtureOrder (stoker/mixture.h).
#include "stoker/mixture.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <string>

#include "stoker/error.h"
#include "stoker/order.h"

namespace stoker {

namespace {

// Largest remainder: each weight's share of `slots`, floored, then one more each to the
// largest fractions (ties to the lower index) until they sum to `slots`.
std::vector<uint64_t> apportion(const std::vector<MixtureSource>& sources, double total, uint64_t slots) {
  const size_t K = sources.size();
  std::vector<uint64_t> q(K);
  std::vector<double> frac(K);
  uint64_t given = 0;
  for (size_t s = 0; s < K; ++s) {
    const double share = sources[s].weight / total * static_cast<double>(slots);
    q[s] = static_cast<uint64_t>(std::floor(share));
    frac[s] = share - std::floor(share);
    given += q[s];
  }
  std::vector<size_t> by(K);
  std::iota(by.begin(), by.end(), 0);
  std::stable_sort(by.begin(), by.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  for (size_t i = 0; given < slots; ++i, ++given) q[by[i % K]]++;
  return q;
}

std::vector<uint64_t> prefix(const std::vector<uint64_t>& q) {
  std::vector<uint64_t> f(q.size(), 0);
  for (size_t s = 1; s < q.size(); ++s) f[s] = f[s - 1] + q[s - 1];
  return f;
}

}  // namespace

MixtureOrder::MixtureOrder(std::vector<MixtureSource> sources, uint64_t seed, uint64_t epoch,
                           uint64_t samples_per_epoch)
    : sources_(std::move(sources)), seed_(seed), epoch_(epoch) {
  if (sources_.empty()) throw_error(ErrorCode::kInvalidArgument, "a mixture needs at least one source");
  if (sources_.size() > 65535) throw_error(ErrorCode::kInvalidArgument, "a mixture takes at most 65535 sources");
  double total = 0;
  uint64_t samples = 0;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const MixtureSource& src = sources_[s];
    if (src.samples == 0) throw_error(ErrorCode::kInvalidArgument, "mixture source " + std::to_string(s) + " has no samples");
    if (!(src.weight > 0) || !std::isfinite(src.weight))
      throw_error(ErrorCode::kInvalidArgument, "mixture source " + std::to_string(s) + ": weight " +
                                                   std::to_string(src.weight) + " is not a positive number");
    total += src.weight;
    samples += src.samples;
  }
  size_ = samples_per_epoch ? samples_per_epoch : samples;
  if (size_ > kMaxOrderUnits) throw_error(ErrorCode::kInvalidArgument, "mixture epoch too large");
  const size_t K = sources_.size();
  quota_ = apportion(sources_, total, kBlock);
  first_ = prefix(quota_);
  // A short last block has quotas of its own length, so each source's draws in the
  // epoch stay a prefix 0, 1, ... of its draw numbers (no sample of a source sub-epoch
  // is passed over while a later one is drawn).
  const uint64_t full = size_ / kBlock;
  last_len_ = size_ % kBlock;
  last_quota_ = apportion(sources_, total, last_len_);
  last_first_ = prefix(last_quota_);
  rounds_.resize(K);
  for (size_t s = 0; s < K; ++s) {
    if (quota_[s] == 0)
      throw_error(ErrorCode::kInvalidArgument, "mixture source " + std::to_string(s) + ": weight " +
                                                   std::to_string(sources_[s].weight) + " is under 1/" +
                                                   std::to_string(kBlock) + " of the total");
    const uint64_t draws = full * quota_[s] + last_quota_[s];
    rounds_[s] = std::max<uint64_t>(1, (draws + sources_[s].samples - 1) / sources_[s].samples);
  }
}

Permutation MixtureOrder::block_permutation(uint64_t b) const {
  // A key per (seed, epoch, block), apart from every key the orders use (the tag).
  const uint64_t key = mix64(mix64(mix64(seed_ ^ 0x6d69787475726531ull) ^ epoch_) ^ b);
  return Permutation(b == size_ / kBlock ? last_len_ : kBlock, key);
}

uint32_t MixtureOrder::source_of(uint64_t b, uint64_t u) const {
  const std::vector<uint64_t>& first = b == size_ / kBlock ? last_first_ : first_;
  // The last source whose range starts at or before u (an empty range shares its start
  // with the next and is passed over).
  return static_cast<uint32_t>(std::upper_bound(first.begin(), first.end(), u) - first.begin() - 1);
}

uint32_t MixtureOrder::source_at(uint64_t p) const {
  assert(p < size_);
  const uint64_t b = p / kBlock;
  return source_of(b, block_permutation(b)(p % kBlock));
}

void MixtureOrder::draws(uint64_t first, uint64_t count, Draw* out) const {
  if (first > size_ || count > size_ - first)
    throw_error(ErrorCode::kInvalidArgument, "mixture positions [" + std::to_string(first) + ", " +
                                                 std::to_string(first + count) + ") pass the epoch's " +
                                                 std::to_string(size_));
  std::vector<uint32_t> rank;  // per position of the block: its draw within the block
  std::vector<uint16_t> src;
  std::vector<uint64_t> seen(sources_.size());
  for (uint64_t p = first; p < first + count;) {
    const uint64_t b = p / kBlock, begin = b * kBlock, len = b == size_ / kBlock ? last_len_ : kBlock;
    // The block's table, up to the last position asked for.
    const uint64_t upto = std::min(len, first + count - begin);
    rank.resize(upto);
    src.resize(upto);
    std::fill(seen.begin(), seen.end(), 0);
    const Permutation pi = block_permutation(b);
    for (uint64_t o = 0; o < upto; ++o) {
      const uint32_t s = source_of(b, pi(o));
      src[o] = static_cast<uint16_t>(s);
      rank[o] = static_cast<uint32_t>(seen[s]++);
    }
    for (; p < begin + upto; ++p) {
      const uint32_t s = src[p - begin];
      const uint64_t d = b * quota_[s] + rank[p - begin];
      const uint64_t n = sources_[s].samples;
      out[p - first] = Draw{s, epoch_ * rounds_[s] + d / n, d % n};
    }
  }
}

MixtureOrder::Draw MixtureOrder::at(uint64_t p) const {
  Draw d;
  draws(p, 1, &d);
  return d;
}

}  // namespace stoker
