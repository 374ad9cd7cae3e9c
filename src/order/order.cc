// Sample order: keyed permutations, epoch orders, rank schedules, resumable state.
#include "stoker/order.h"

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "util/enum_names.h"
#include "util/parse.h"

namespace stoker {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// Domain-separation tags: the permutation keys, window keys and per-sample seeds are
// hashed from different starting points, so no two of them are related.
constexpr uint64_t kTagShuffle = 0x73746f6b2d736866ULL;  // "stok-shf"
constexpr uint64_t kTagChunks = 0x73746f6b2d63686bULL;   // "stok-chk"
constexpr uint64_t kTagWindow = 0x73746f6b2d77696eULL;   // "stok-win"
constexpr uint64_t kTagSample = 0x73746f6b2d736d70ULL;   // "stok-smp"

// One link of a hash chain. For a fixed h it is a bijection of x (mix64 is one), and
// h is itself a mix64 output, so chains of different prefixes behave independently.
inline uint64_t chain(uint64_t h, uint64_t x) noexcept { return mix64(h ^ (x + kGolden)); }

inline uint64_t key3(uint64_t tag, uint64_t seed, uint64_t epoch) noexcept {
  return chain(chain(mix64(tag), seed), epoch);
}

uint64_t checked_sum(const std::vector<uint64_t>& sizes) {
  uint64_t total = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    if (sizes[g] > kMaxOrderUnits - total) {
      throw_error(ErrorCode::kInvalidArgument,
                  "order: total units exceed 2^62 at group " + std::to_string(g));
    }
    total += sizes[g];
  }
  return total;
}

}  // namespace

namespace {
// The body of mix64, inlinable here: the exported symbol is called through the PLT.
inline uint64_t mix64_local(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t mix64(uint64_t z) noexcept { return mix64_local(z); }

uint64_t sample_seed(uint64_t seed, uint64_t epoch, uint64_t sample_index) noexcept {
  return chain(key3(kTagSample, seed, epoch), sample_index);
}

// ---------------------------------------------------------------------------------
// Permutation

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n) {
  if (n == 0 || n > kMaxOrderUnits) {
    throw_error(ErrorCode::kInvalidArgument,
                "permutation: size " + std::to_string(n) + " is outside [1, 2^62]");
  }
  const int bits = n == 1 ? 0 : 64 - __builtin_clzll(n - 1);
  left_bits_ = (bits + 1) / 2;
  right_bits_ = bits / 2;
  right_mask_ = right_bits_ == 0 ? 0 : (uint64_t{1} << right_bits_) - 1;
  // Narrow halves give each round few functions to choose from, so a small domain
  // needs more rounds before the permutation it draws is close to uniform; the
  // Permutation.TinyDomainsDrawEveryPermutationUniformly test's chi-square over all n!
  // permutations is what sets kRounds. Cost is irrelevant at these sizes.
  rounds_ = bits <= 8 ? kRounds : bits <= 16 ? 16 : 12;
  uint64_t state = mix64(key ^ 0x6a09e667f3bcc909ULL);
  for (int i = 0; i < rounds_; ++i) {
    state += kGolden;
    keys_[i] = mix64(state);
  }
}

// Alternating Feistel: even half-rounds change the left (high) part from the right,
// odd ones the right from the left. Each half-round is its own inverse given the
// unchanged half, so the whole network is a bijection of [0, 2^bits).
uint64_t Permutation::encrypt(uint64_t x) const noexcept {
  uint64_t left = x >> right_bits_;
  uint64_t right = x & right_mask_;
  for (int i = 0; i < rounds_; i += 2) {
    if (left_bits_ > 0) left ^= mix64_local(right ^ keys_[i]) >> (64 - left_bits_);
    if (right_bits_ > 0) right ^= mix64_local(left ^ keys_[i + 1]) >> (64 - right_bits_);
  }
  return (left << right_bits_) | right;
}

uint64_t Permutation::decrypt(uint64_t x) const noexcept {
  uint64_t left = x >> right_bits_;
  uint64_t right = x & right_mask_;
  for (int i = rounds_ - 2; i >= 0; i -= 2) {
    if (right_bits_ > 0) right ^= mix64_local(left ^ keys_[i + 1]) >> (64 - right_bits_);
    if (left_bits_ > 0) left ^= mix64_local(right ^ keys_[i]) >> (64 - left_bits_);
  }
  return (left << right_bits_) | right;
}

// Cycle-walking: the cycle of the network through i < n reaches another point < n,
// and following it is still a bijection of [0, n). The domain is < 2n, so the
// expected number of walks is < 2.
uint64_t Permutation::operator()(uint64_t i) const noexcept {
  assert(i < n_);
  uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

namespace {

// The Feistel network over blocks of values held as their two halves. Written as flat
// loops over the block so the compiler vectorises them; the x86-64-v4 clone (AVX-512
// has the 64-bit multiply mix64 needs) is picked at load time where the CPU has it.
constexpr size_t kBlock = 64;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("arch=x86-64-v4", "default")))
#endif
void feistel_block(const uint64_t* keys, int rounds, int left_bits, int right_bits, uint64_t* __restrict left,
                   uint64_t* __restrict right, size_t n) {
  const int ls = 64 - left_bits, rs = 64 - right_bits;
  for (int r = 0; r < rounds; r += 2) {
    const uint64_t k0 = keys[r], k1 = keys[r + 1];
    for (size_t i = 0; i < n; ++i) left[i] ^= mix64_local(right[i] ^ k0) >> ls;
    for (size_t i = 0; i < n; ++i) right[i] ^= mix64_local(left[i] ^ k1) >> rs;
  }
}

}  // namespace

void Permutation::apply(uint64_t* xs, size_t n) const noexcept {
  // Halves of 0 bits (sizes up to 2) take the plain path: a shift by 64 is undefined.
  if (left_bits_ == 0 || right_bits_ == 0) {
    for (size_t i = 0; i < n; ++i) xs[i] = (*this)(xs[i]);
    return;
  }
  uint64_t left[kBlock], right[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    uint64_t* x = xs + b;
    for (size_t i = 0; i < m; ++i) {
      assert(x[i] < n_);
      left[i] = x[i] >> right_bits_;
      right[i] = x[i] & right_mask_;
    }
    feistel_block(keys_, rounds_, left_bits_, right_bits_, left, right, m);
    for (size_t i = 0; i < m; ++i) {
      x[i] = (left[i] << right_bits_) | right[i];
      while (x[i] >= n_) x[i] = encrypt(x[i]);  // cycle-walking, as operator() does
    }
  }
}

uint64_t Permutation::inverse(uint64_t x) const noexcept {
  assert(x < n_);
  uint64_t i = decrypt(x);
  while (i >= n_) i = decrypt(i);
  return i;
}

// ---------------------------------------------------------------------------------
// kinds

namespace {
constexpr internal::EnumName<OrderKind> kOrderKindNames[] = {{OrderKind::kSequential, "sequential"},
                                                             {OrderKind::kShuffled, "shuffled"},
                                                             {OrderKind::kChunkLocal, "chunk_local"},
                                                             {OrderKind::kTokenWindow, "token_window"}};
}  // namespace

const char* order_kind_name(OrderKind kind) noexcept { return internal::enum_name(kOrderKindNames, kind, "unknown"); }
OrderKind order_kind_from_name(std::string_view name) {
  return internal::enum_from_name(kOrderKindNames, name, "order kind");
}

// ---------------------------------------------------------------------------------
// UnitLayout

UnitLayout::UnitLayout(const std::vector<uint64_t>& group_sizes) {
  checked_sum(group_sizes);
  begin_.reserve(group_sizes.size() + 1);
  begin_.push_back(0);
  for (uint64_t s : group_sizes) begin_.push_back(begin_.back() + s);
  // Packed tokens: every record holds R rows but the last, which may hold fewer. Then a
  // unit's group is a division, not a search over every record's prefix sum.
  if (!group_sizes.empty() && group_sizes[0] > 0) {
    const uint64_t r = group_sizes[0];
    bool uniform = group_sizes.back() > 0 && group_sizes.back() <= r;
    for (size_t g = 0; uniform && g + 1 < group_sizes.size(); ++g) uniform = group_sizes[g] == r;
    if (uniform) uniform_size_ = r;
  }
}

std::pair<size_t, uint64_t> UnitLayout::locate(uint64_t unit) const {
  if (unit >= units()) {
    throw_error(ErrorCode::kInvalidArgument, "unit layout: unit " + std::to_string(unit) +
                                                 " is out of range (" +
                                                 std::to_string(units()) + " units)");
  }
  if (uniform_size_) return {static_cast<size_t>(unit / uniform_size_), unit % uniform_size_};
  // Last prefix <= unit: its group is non-empty because the next prefix is > unit.
  auto it = std::upper_bound(begin_.begin(), begin_.end(), unit) - 1;
  size_t g = static_cast<size_t>(it - begin_.begin());
  return {g, unit - *it};
}

// ---------------------------------------------------------------------------------
// EpochOrder

EpochOrder::EpochOrder(const OrderOptions& options, const std::vector<uint64_t>& group_sizes,
                       uint64_t epoch)
    : EpochOrder(options, std::make_shared<const UnitLayout>(group_sizes), epoch) {}

EpochOrder::EpochOrder(const OrderOptions& options, uint64_t units, uint64_t epoch)
    : EpochOrder(options, std::make_shared<const UnitLayout>(UnitLayout::single(units)),
                 epoch) {}

EpochOrder::EpochOrder(const OrderOptions& options, std::shared_ptr<const UnitLayout> layout, uint64_t epoch,
                       std::shared_ptr<const std::vector<uint64_t>> sequence)
    : options_(options), layout_(std::move(layout)), epoch_(epoch), sequence_(std::move(sequence)) {
  if (!layout_ || !sequence_) throw_error(ErrorCode::kInvalidArgument, "epoch order: null layout or sequence");
  n_ = sequence_->size();
  if (windowed()) throw_error(ErrorCode::kInvalidArgument, "epoch order: a given sequence cannot be windowed");
}

EpochOrder::EpochOrder(const OrderOptions& options, std::shared_ptr<const UnitLayout> layout,
                       uint64_t epoch)
    : options_(options), layout_(std::move(layout)), epoch_(epoch) {
  if (!layout_) throw_error(ErrorCode::kInvalidArgument, "epoch order: null layout");
  n_ = layout_->units();
  switch (options_.kind) {
    case OrderKind::kSequential:
      return;
    case OrderKind::kShuffled:
      shuffle_key_ = key3(kTagShuffle, options_.seed, epoch_);
      if (n_ > 0) perm_ = Permutation(n_, shuffle_key_);
      return;
    case OrderKind::kChunkLocal:
      if (options_.chunk_size == 0) {
        throw_error(ErrorCode::kInvalidArgument, "epoch order: chunk_size must be >= 1");
      }
      break;
    case OrderKind::kTokenWindow:
      break;
    default:
      throw_error(ErrorCode::kInvalidArgument, "epoch order: unknown kind");
  }
  if (options_.window_chunks == 0) {
    throw_error(ErrorCode::kInvalidArgument, "epoch order: window_chunks must be >= 1");
  }
  window_ = options_.window_chunks;
  shuffle_key_ = key3(kTagWindow, options_.seed, epoch_);

  const size_t groups = layout_->groups();
  group_chunk_.resize(groups + 1);
  group_chunk_[0] = 0;
  for (size_t g = 0; g < groups; ++g) group_chunk_[g + 1] = group_chunk_[g] + chunk_per_group(g);
  chunks_ = group_chunk_[groups];
  if (chunks_ == 0) return;

  // Walk the epoch's chunk order once: the k-th chunk of the order starts at unit
  // ordered_begin_[k] and occupies positions [ordered_pos_[k], ordered_pos_[k+1]).
  const Permutation chunk_order(chunks_, key3(kTagChunks, options_.seed, epoch_));
  ordered_pos_.resize(chunks_ + 1);
  ordered_begin_.resize(chunks_);
  ordered_pos_[0] = 0;
  for (uint64_t k = 0; k < chunks_; ++k) {
    const auto [begin, end] = chunk_units(chunk_order(k));
    ordered_begin_[k] = begin;
    ordered_pos_[k + 1] = ordered_pos_[k] + (end - begin);
  }
  assert(ordered_pos_[chunks_] == n_);
  // Each window's permutation, made once: at() is called for every sample, and keying
  // a permutation costs as much as evaluating it.
  const uint64_t windows = chunks_ / window_ + (chunks_ % window_ != 0);
  window_perm_.reserve(windows);
  for (uint64_t w = 0; w < windows; ++w) {
    const uint64_t first = w * window_, last = std::min(first + window_, chunks_);
    window_perm_.emplace_back(ordered_pos_[last] - ordered_pos_[first], chain(shuffle_key_, w));
  }
}

uint64_t EpochOrder::chunk_per_group(size_t g) const {
  const uint64_t size = layout_->group_size(g);
  if (options_.kind == OrderKind::kTokenWindow) return size > 0 ? 1 : 0;
  return size / options_.chunk_size + (size % options_.chunk_size != 0);
}

bool EpochOrder::windowed() const noexcept {
  return options_.kind == OrderKind::kChunkLocal || options_.kind == OrderKind::kTokenWindow;
}

uint64_t EpochOrder::at(uint64_t p) const {
  if (p >= n_) {
    throw_error(ErrorCode::kInvalidArgument, "epoch order: position " + std::to_string(p) +
                                                 " is out of range (" + std::to_string(n_) +
                                                 " samples)");
  }
  if (sequence_) return (*sequence_)[p];
  switch (options_.kind) {
    case OrderKind::kSequential:
      return p;
    case OrderKind::kShuffled:
      return perm_(p);
    default:
      break;
  }
  const uint64_t w = window_of(p);
  const uint64_t base = window_positions(w).first;
  return unit_at_window_position(w, base + window_perm_[w](p - base));
}

uint64_t EpochOrder::ordered_chunk_at(uint64_t w, uint64_t q) const {
  // The last of the window's chunks starting at or before q. Without branches: a
  // shuffled window's positions land in its chunks at random, so a branching search
  // would mispredict about every other step, for every sample of the token loader's
  // hot path (its price is in bench/README.md).
  const uint64_t first = w * window_;
  const uint64_t* k = ordered_pos_.data() + first;
  for (uint64_t len = std::min(first + window_, chunks_) - first; len > 1;) {
    const uint64_t half = len / 2;
    k = k[half] <= q ? k + half : k;
    len -= half;
  }
  return static_cast<uint64_t>(k - ordered_pos_.data());
}

uint64_t EpochOrder::unit_at_window_position(uint64_t w, uint64_t q) const {
  const uint64_t k = ordered_chunk_at(w, q);
  return ordered_begin_[k] + (q - ordered_pos_[k]);
}

void EpochOrder::at_strided(uint64_t first, uint64_t stride, uint64_t n, uint64_t* out) const {
  strided_positions(first, stride, n, out, nullptr);
}

void EpochOrder::at_strided(uint64_t first, uint64_t stride, uint64_t n, uint64_t* out,
                            uint32_t* chunk_in_window) const {
  require_windowed("at_strided with chunk places");
  strided_positions(first, stride, n, out, chunk_in_window);
}

void EpochOrder::strided_positions(uint64_t first, uint64_t stride, uint64_t n, uint64_t* out,
                                   uint32_t* chunk_in_window) const {
  if (n == 0) return;
  const uint64_t last_pos = first + (n - 1) * stride;
  if (last_pos >= n_ || last_pos < first) {
    throw_error(ErrorCode::kInvalidArgument, "epoch order: positions " + std::to_string(first) + " + i*" +
                                                 std::to_string(stride) + " for " + std::to_string(n) +
                                                 " samples run past the epoch (" + std::to_string(n_) +
                                                 " samples)");
  }
  if (sequence_) {
    for (uint64_t i = 0; i < n; ++i) out[i] = (*sequence_)[first + i * stride];
    return;
  }
  for (uint64_t i = 0; i < n; ++i) out[i] = first + i * stride;
  switch (options_.kind) {
    case OrderKind::kSequential:
      return;
    case OrderKind::kShuffled:
      perm_.apply(out, n);
      return;
    default:
      break;
  }
  // Runs of positions in one window: offsets into it, permuted together, then mapped
  // from window position to unit as at() does.
  for (uint64_t i = 0; i < n;) {
    const uint64_t w = window_of(out[i]);
    const auto [base, end] = window_positions(w);
    uint64_t m = 0;
    while (i + m < n && out[i + m] < end) {
      out[i + m] -= base;
      ++m;
    }
    window_perm_[w].apply(out + i, m);
    for (uint64_t t = i; t < i + m; ++t) {
      const uint64_t q = base + out[t];
      const uint64_t k = ordered_chunk_at(w, q);
      out[t] = ordered_begin_[k] + (q - ordered_pos_[k]);
      if (chunk_in_window) chunk_in_window[t] = static_cast<uint32_t>(k - w * window_);
    }
    i += m;
  }
}

void EpochOrder::require_windowed(const char* what) const {
  if (!windowed()) {
    throw_error(ErrorCode::kInvalidArgument, std::string("epoch order: ") + what +
                                                 " needs a windowed kind, not " +
                                                 order_kind_name(options_.kind));
  }
}

uint64_t EpochOrder::window_count() const noexcept {
  if (n_ == 0) return 0;
  if (!windowed()) return 1;
  return chunks_ / window_ + (chunks_ % window_ != 0);
}

uint64_t EpochOrder::window_of(uint64_t p) const {
  if (p >= n_) {
    throw_error(ErrorCode::kInvalidArgument,
                "epoch order: position " + std::to_string(p) + " is out of range");
  }
  if (!windowed()) return 0;
  const auto pos = ordered_pos_.begin();
  const uint64_t k = static_cast<uint64_t>(std::upper_bound(pos, ordered_pos_.end(), p) - pos) - 1;
  return k / window_;
}

std::pair<uint64_t, uint64_t> EpochOrder::window_positions(uint64_t w) const {
  if (w >= window_count()) {
    throw_error(ErrorCode::kInvalidArgument,
                "epoch order: window " + std::to_string(w) + " is out of range");
  }
  if (!windowed()) return {0, n_};
  const uint64_t first = w * window_;
  const uint64_t last = std::min(first + window_, chunks_);
  return {ordered_pos_[first], ordered_pos_[last]};
}

std::vector<uint64_t> EpochOrder::window_chunks(uint64_t w) const {
  require_windowed("window_chunks");
  if (w >= window_count()) {
    throw_error(ErrorCode::kInvalidArgument,
                "epoch order: window " + std::to_string(w) + " is out of range");
  }
  const uint64_t first = w * window_;
  const uint64_t last = std::min(first + window_, chunks_);
  std::vector<uint64_t> out;
  out.reserve(last - first);
  for (uint64_t k = first; k < last; ++k) out.push_back(chunk_of(ordered_begin_[k]));
  return out;
}

uint64_t EpochOrder::chunk_of(uint64_t unit) const {
  require_windowed("chunk_of");
  const auto [g, i] = layout_->locate(unit);
  if (options_.kind == OrderKind::kTokenWindow) return group_chunk_[g];
  return group_chunk_[g] + i / options_.chunk_size;
}

size_t EpochOrder::chunk_group(uint64_t chunk) const {
  require_windowed("chunk_group");
  if (chunk >= chunks_) {
    throw_error(ErrorCode::kInvalidArgument,
                "epoch order: chunk " + std::to_string(chunk) + " is out of range");
  }
  // Last group whose first chunk is <= chunk; empty groups share their successor's
  // first chunk, and upper_bound skips past them.
  auto it = std::upper_bound(group_chunk_.begin(), group_chunk_.end(), chunk) - 1;
  return static_cast<size_t>(it - group_chunk_.begin());
}

std::pair<uint64_t, uint64_t> EpochOrder::chunk_units(uint64_t chunk) const {
  const size_t g = chunk_group(chunk);
  const uint64_t group_begin = layout_->group_begin(g);
  const uint64_t group_end = group_begin + layout_->group_size(g);
  if (options_.kind == OrderKind::kTokenWindow) return {group_begin, group_end};
  const uint64_t begin = group_begin + (chunk - group_chunk_[g]) * options_.chunk_size;
  return {begin, std::min(begin + options_.chunk_size, group_end)};
}

// ---------------------------------------------------------------------------------
// RankSchedule

RankSchedule::RankSchedule(uint64_t total, uint64_t batch_size, uint32_t world_size,
                           uint32_t rank, bool drop_last, uint64_t consumed, TailPolicy tail)
    : total_(total), batch_(batch_size), world_(world_size), rank_(rank),
      drop_last_(drop_last), tail_(tail), start_(consumed) {
  if (total > kMaxOrderUnits) {
    throw_error(ErrorCode::kInvalidArgument,
                "rank schedule: " + std::to_string(total) + " samples exceed 2^62");
  }
  if (batch_size == 0 || batch_size > kMaxOrderUnits) {
    throw_error(ErrorCode::kInvalidArgument,
                "rank schedule: batch size " + std::to_string(batch_size) + " is not >= 1");
  }
  if (world_size == 0 || rank >= world_size) {
    throw_error(ErrorCode::kInvalidArgument,
                "rank schedule: rank " + std::to_string(rank) + " is not in [0, world size " +
                    std::to_string(world_size) + ")");
  }
  if (consumed > total) {
    throw_error(ErrorCode::kInvalidArgument,
                "rank schedule: consumed " + std::to_string(consumed) + " exceeds the " +
                    std::to_string(total) + " samples of the epoch");
  }
  if (__builtin_mul_overflow(batch_size, uint64_t{world_size}, &step_)) {
    throw_error(ErrorCode::kInvalidArgument, "rank schedule: batch size * world size overflows");
  }
  const uint64_t left = total - consumed;
  const uint64_t full = left / step_;
  const uint64_t rest = left % step_;
  end_ = start_ + full * step_;
  steps_ = full;
  last_len_ = batch_;
  if (drop_last_ || rest == 0) return;
  if (tail_ == TailPolicy::kPad) {
    // Every rank takes ceil(rest / W) positions; those past the epoch wrap (position()).
    last_len_ = (rest + world_ - 1) / world_;
    padding_ = last_len_ * world_ - rest;
    end_ = total_;
    steps_ = full + 1;
  } else {
    const uint64_t each = rest / world_;
    if (each == 0) return;  // fewer left than ranks: the step goes, the full ones stay
    last_len_ = each;
    end_ += each * world_;
    steps_ = full + 1;
  }
}

uint64_t RankSchedule::batch_length(uint64_t k) const {
  if (k >= steps_) {
    throw_error(ErrorCode::kInvalidArgument, "rank schedule: batch " + std::to_string(k) +
                                                 " is past the last (" +
                                                 std::to_string(steps_) + " batches)");
  }
  return k + 1 == steps_ ? last_len_ : batch_;
}

std::vector<uint64_t> RankSchedule::positions(uint64_t k) const {
  const uint64_t len = batch_length(k);
  std::vector<uint64_t> out(len);
  for (uint64_t j = 0; j < len; ++j) out[j] = position(k, j);
  return out;
}

uint64_t RankSchedule::consumed_after(uint64_t steps_done) const noexcept {
  if (steps_done >= steps_) return end_;
  return start_ + steps_done * step_;
}

// ---------------------------------------------------------------------------------
// rank_from_env


RankInfo rank_from_env() {
  const char* rank_text = std::getenv("RANK");
  const char* world_text = std::getenv("WORLD_SIZE");
  if (rank_text == nullptr && world_text == nullptr) return {};
  if (rank_text == nullptr || world_text == nullptr) {
    throw_error(ErrorCode::kInvalidArgument,
                std::string("rank_from_env: ") + (rank_text ? "RANK" : "WORLD_SIZE") +
                    " is set but " + (rank_text ? "WORLD_SIZE" : "RANK") + " is not");
  }
  uint64_t rank = 0, world = 0;
  auto bad = [](const char* name, const char* value, const char* why) {
    std::string v(value);
    if (v.size() > 32) v = v.substr(0, 32) + "...";
    throw_error(ErrorCode::kInvalidArgument,
                std::string("rank_from_env: ") + name + "='" + v + "' " + why);
  };
  const auto world_v = std::string_view(world_text).size() <= 19 ? internal::parse_decimal<uint64_t>(world_text)
                                                                 : std::nullopt;
  const auto rank_v = std::string_view(rank_text).size() <= 19 ? internal::parse_decimal<uint64_t>(rank_text)
                                                               : std::nullopt;
  if (world_v) world = *world_v;
  if (rank_v) rank = *rank_v;
  if (!world_v || world > UINT32_MAX) {
    bad("WORLD_SIZE", world_text, "is not a decimal integer in [1, 2^32)");
  }
  if (world == 0) bad("WORLD_SIZE", world_text, "must be >= 1");
  if (!rank_v || rank > UINT32_MAX) {
    bad("RANK", rank_text, "is not a decimal integer");
  }
  if (rank >= world) {
    bad("RANK", rank_text, ("is not below WORLD_SIZE=" + std::to_string(world)).c_str());
  }
  return {static_cast<uint32_t>(rank), static_cast<uint32_t>(world)};
}

// ---------------------------------------------------------------------------------
// OrderState

namespace {

constexpr const char* kMagic = "stoker-order";
constexpr size_t kMaxStateText = 512;

[[noreturn]] void corrupt(const std::string& why) {
  throw_error(ErrorCode::kDataLoss, "order state: " + why);
}

}  // namespace

OrderState OrderState::start(const OrderOptions& options, uint64_t total, uint64_t epoch) {
  OrderState s;
  s.kind = options.kind;
  s.seed = options.seed;
  s.epoch = epoch;
  s.total = total;
  if (options.kind == OrderKind::kChunkLocal) s.chunk_size = options.chunk_size;
  if (options.kind == OrderKind::kChunkLocal || options.kind == OrderKind::kTokenWindow) {
    s.window_chunks = options.window_chunks;
  }
  return s;
}

OrderOptions OrderState::options() const {
  OrderOptions o;
  o.kind = kind;
  o.seed = seed;
  if (chunk_size != 0) o.chunk_size = chunk_size;
  if (window_chunks != 0) o.window_chunks = window_chunks;
  return o;
}

OrderState OrderState::next_epoch() const {
  OrderState s = *this;
  s.epoch = epoch + 1;
  s.consumed = 0;
  return s;
}

std::string OrderState::serialize() const {
  std::string body = std::string(kMagic) + " v" + std::to_string(version) +
                     " kind=" + order_kind_name(kind) + " seed=" + std::to_string(seed) +
                     " epoch=" + std::to_string(epoch) + " consumed=" + std::to_string(consumed) +
                     " total=" + std::to_string(total) + " chunk=" + std::to_string(chunk_size) +
                     " window=" + std::to_string(window_chunks);
  if (bucket_batch) body += " bucket=" + std::to_string(bucket_batch);
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", crc32c(body.data(), body.size()));
  return body + " crc=" + crc;
}

OrderState OrderState::parse(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (text.size() > kMaxStateText) corrupt("text is " + std::to_string(text.size()) + " bytes");
  std::vector<std::string_view> tokens;
  size_t at = 0;
  while (at <= text.size()) {
    size_t sp = text.find(' ', at);
    if (sp == std::string_view::npos) sp = text.size();
    tokens.push_back(text.substr(at, sp - at));
    at = sp + 1;
  }
  if (tokens.empty() || tokens[0] != kMagic) corrupt("does not start with 'stoker-order'");
  std::optional<uint64_t> parsed_version;
  if (tokens.size() >= 2 && tokens[1].size() >= 2 && tokens[1][0] == 'v')
    parsed_version = internal::parse_decimal<uint64_t>(tokens[1].substr(1));
  if (!parsed_version) corrupt("missing version after 'stoker-order'");
  const uint64_t version = *parsed_version;
  if (version != kVersion) {
    throw_error(ErrorCode::kInvalidArgument, "order state: version " + std::to_string(version) +
                                                 " is not supported (this stoker reads v" +
                                                 std::to_string(kVersion) + ")");
  }
  static constexpr const char* kKeys[] = {"kind", "seed",  "epoch",  "consumed",
                                          "total", "chunk", "window", "crc"};
  constexpr size_t kFields = sizeof(kKeys) / sizeof(kKeys[0]);
  // An optional " bucket=G" (a bucketed order) sits before the crc.
  std::optional<uint64_t> bucket;
  if (tokens.size() == 3 + kFields) {
    const std::string_view b = tokens[1 + kFields];
    const auto x = b.size() > 7 && b.substr(0, 7) == "bucket=" && b[7] != '0' ? internal::parse_decimal<uint64_t>(b.substr(7))
                                                                             : std::nullopt;
    if (!x) corrupt("field " + std::to_string(kFields + 2) + " is not 'bucket=...' (a positive integer)");
    bucket = *x;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(1 + kFields));
  }
  if (tokens.size() != 2 + kFields) {
    corrupt("expected " + std::to_string(2 + kFields) + " space-separated fields, got " +
            std::to_string(tokens.size()));
  }
  std::string_view values[kFields];
  for (size_t i = 0; i < kFields; ++i) {
    const std::string_view tok = tokens[2 + i];
    const std::string_view key = kKeys[i];
    if (tok.size() <= key.size() || tok.substr(0, key.size()) != key || tok[key.size()] != '=') {
      corrupt("field " + std::to_string(i + 3) + " is not '" + std::string(key) + "=...'");
    }
    values[i] = tok.substr(key.size() + 1);
  }
  // CRC over everything before " crc=".
  const std::string_view crc_text = values[kFields - 1];
  const size_t body_len = static_cast<size_t>(crc_text.data() - text.data()) - 5;
  uint32_t want = 0;
  if (crc_text.size() != 8) corrupt("crc is not 8 hex digits");
  for (char c : crc_text) {
    uint32_t d;
    if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
    else corrupt("crc is not 8 lower-case hex digits");
    want = want << 4 | d;
  }
  const uint32_t got = crc32c(text.data(), body_len);
  if (got != want) corrupt("crc mismatch (the state text was altered or truncated)");

  OrderState s;
  s.version = static_cast<uint32_t>(version);
  s.bucket_batch = bucket.value_or(0);
  try {
    s.kind = order_kind_from_name(values[0]);
  } catch (const Error&) {
    corrupt("unknown kind '" + std::string(values[0]) + "'");
  }
  uint64_t* nums[] = {&s.seed, &s.epoch, &s.consumed, &s.total, &s.chunk_size, &s.window_chunks};
  for (size_t i = 0; i < 6; ++i) {
    // seed may use all 64 bits: up to 20 digits, checked for overflow.
    const std::string_view v = values[1 + i];
    const auto x = v.size() > 1 && v[0] == '0' ? std::nullopt : internal::parse_decimal<uint64_t>(v);
    if (!x) corrupt(std::string(kKeys[1 + i]) + " is not a canonical decimal integer");
    *nums[i] = *x;
  }
  if (s.total > kMaxOrderUnits) corrupt("total exceeds 2^62");
  if (s.consumed > s.total) {
    corrupt("consumed " + std::to_string(s.consumed) + " exceeds total " +
            std::to_string(s.total));
  }
  const bool chunked = s.kind == OrderKind::kChunkLocal;
  const bool windowed = chunked || s.kind == OrderKind::kTokenWindow;
  if (chunked != (s.chunk_size != 0) || windowed != (s.window_chunks != 0)) {
    corrupt(std::string("chunk/window parameters do not fit kind ") + order_kind_name(s.kind));
  }
  return s;
}

void OrderState::check_matches(const OrderOptions& options, uint64_t n) const {
  const OrderState want = start(options, n, epoch);
  auto differ = [](const char* field, const std::string& saved, const std::string& now) {
    throw_error(ErrorCode::kInvalidArgument, std::string("order state: ") + field +
                                                 " was " + saved + " when saved but is " +
                                                 now + " now");
  };
  if (kind != want.kind) differ("kind", order_kind_name(kind), order_kind_name(want.kind));
  if (seed != want.seed) differ("seed", std::to_string(seed), std::to_string(want.seed));
  if (total != want.total) {
    differ("total (samples per epoch)", std::to_string(total), std::to_string(want.total));
  }
  if (chunk_size != want.chunk_size) {
    differ("chunk_size", std::to_string(chunk_size), std::to_string(want.chunk_size));
  }
  if (window_chunks != want.window_chunks) {
    differ("window_chunks", std::to_string(window_chunks), std::to_string(want.window_chunks));
  }
}

}  // namespace stoker
