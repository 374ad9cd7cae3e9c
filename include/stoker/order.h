// Sample order: which sample every batch holds, per epoch and per rank, resumable.
//
// Three layers, each a pure function of its inputs (no clocks, no thread ids, no
// global state), so the same seed and epoch give the same batches whatever the thread
// count, timing or world size:
//
//  1. EpochOrder maps a *position* p in [0, N) of an epoch to a *sample index* (a
//     global record index for image data, a global row index for token data). The
//     epoch's global sample sequence is S[p] = EpochOrder::at(p). Kinds:
//       kSequential   S[p] = p.
//       kShuffled     a keyed pseudorandom permutation of [0, N) (Permutation, below),
//                     keyed by (seed, epoch): a true global shuffle, O(1) memory.
//       kChunkLocal   for slow storage: records are grouped into chunks of
//                     `chunk_size` consecutive records of one shard (a chunk never
//                     straddles a shard); the chunk order is shuffled, and the records
//                     of each window of `window_chunks` consecutive chunks of that
//                     order are shuffled together. Reads stay sequential within chunks.
//       kTokenWindow  token data, where a "chunk" is one compressed record holding R
//                     rows: the units are rows, records are shuffled and rows are
//                     shuffled within a window of `window_chunks` records. A loader
//                     that keeps the current window's records decompressed (2 windows
//                     across a window boundary) decompresses every record once per
//                     epoch. With interleaved ranks (below) every rank touches every
//                     record of a window, so that is once per epoch *per rank*: W
//                     ranks decompress W times in total, the price of a sequence
//                     that does not depend on the world size. A rank's positions
//                     increase monotonically, so it never needs a window back.
//     Shuffle quality of the windowed kinds (kChunkLocal, kTokenWindow): the chunk
//     order is a uniform pseudorandom permutation, and within a window of W chunks
//     (T ~ W*R units, R units per chunk) the units form a uniform pseudorandom
//     permutation of those T units. Two units can be neighbours in S (or fall in the
//     same batch, when B <= T) only if their chunks are in the same window or in two
//     consecutive windows, so correlations reach at most ~2T positions instead of N.
//     Any given pair of nearby positions holds units from the same chunk with
//     probability ~1/W (versus 1/#chunks for kShuffled); a batch of B units draws from
//     ~W*(1-(1-1/W)^B) distinct chunks, i.e. ~min(B, W). Raise W (memory: W
//     decompressed chunks) for a better shuffle; W >= #chunks is a full global shuffle.
//
//  2. RankSchedule splits S across ranks *independently of the world size*: training
//     step k (world size W, per-rank batch B) consumes positions [k*W*B, (k+1)*W*B)
//     of S, and rank r takes every W-th of them (interleaved): its batch k holds the
//     positions k*W*B + r + j*W, j = 0..B-1. Concatenating the steps' samples in (step,
//     j, rank) order gives S for every W, so a run resumed on a different number of GPUs
//     continues the same sequence, with no sample repeated or skipped.
//
//  3. OrderState (seed, epoch, global samples consumed in the epoch, plus the kind and
//     chunk parameters so a mismatch is caught) serialises to one line of text. A new
//     RankSchedule started at `consumed` — same or different world size — yields
//     exactly S[consumed:], split across its ranks.
//
// sample_seed() gives every sample its own RNG seed from (seed, epoch, sample index),
// so augmentation draws do not depend on which thread decodes the sample.
//
// Threading: every class here is an immutable value after construction; all const
// methods are safe to call from any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stoker {

/// The largest N any permutation or order accepts (2^62 units).
inline constexpr uint64_t kMaxOrderUnits = uint64_t{1} << 62;

/// SplitMix64's output function: a bijective, strongly avalanching 64-bit mixer.
uint64_t mix64(uint64_t x) noexcept;

/// A strong hash of (seed, epoch, sample_index), a chain of SplitMix64 steps. The
/// image decoder seeds its crop/flip draws from it, so augmentation is deterministic
/// whatever the thread count. Distinct from every key the orders use internally.
uint64_t sample_seed(uint64_t seed, uint64_t epoch, uint64_t sample_index) noexcept;

/// A keyed pseudorandom permutation of [0, n) with O(1) memory and O(1) random access.
///
/// An alternating (unbalanced by at most one bit) Feistel network over the smallest
/// power of two 2^b >= n — fewer than 2n points, so cycle-walking (re-encrypting
/// until the value falls in [0, n)) takes under 2 rounds of the network on average.
/// Each half-round XORs one half with the top bits of mix64(other half ^ round key);
/// the round keys come from `key` through SplitMix64. 12 half-rounds for domains over
/// 2^16, 16 up to 2^16 and 24 up to 2^8, where narrow halves mix more slowly. A bijection for
/// every n >= 1 (each half-round is invertible and cycle-walking preserves that).
class Permutation {
 public:
  /// n: 1 <= n <= kMaxOrderUnits, else kInvalidArgument.
  Permutation(uint64_t n, uint64_t key);

  uint64_t size() const noexcept { return n_; }
  /// The image of i; i must be < size() (checked with assert only, this is hot).
  uint64_t operator()(uint64_t i) const noexcept;
  /// The inverse: inverse(operator()(i)) == i.
  uint64_t inverse(uint64_t x) const noexcept;
  /// xs[i] = operator()(xs[i]) for i < n (each < size()): the same images, computed
  /// several at a time where the CPU has 64-bit vector multiplies (a loader claims a
  /// whole batch's positions at once; one at a time they cost ~100 ns each).
  void apply(uint64_t* xs, size_t n) const noexcept;

  static constexpr int kRounds = 24;  ///< the most half-rounds (small domains)

 private:
  uint64_t encrypt(uint64_t x) const noexcept;
  uint64_t decrypt(uint64_t x) const noexcept;

  uint64_t n_ = 1;
  int left_bits_ = 0;   // the high part of x
  int right_bits_ = 0;  // the low part of x
  int rounds_ = 0;      // half-rounds in use, even
  uint64_t right_mask_ = 0;
  uint64_t keys_[kRounds] = {};
};

enum class OrderKind : uint8_t {
  kSequential,   ///< S[p] = p
  kShuffled,     ///< a global keyed permutation (default)
  kChunkLocal,   ///< shuffled chunks of consecutive records, shuffled within windows
  kTokenWindow,  ///< rows of compressed records, shuffled within windows of records
};

/// "sequential", "shuffled", "chunk_local", "token_window".
const char* order_kind_name(OrderKind kind) noexcept;
/// Inverse of order_kind_name; kInvalidArgument for anything else.
OrderKind order_kind_from_name(std::string_view name);
/// The former name of order_kind_from_name, kept for existing callers.
inline OrderKind parse_order_kind(std::string_view name) { return order_kind_from_name(name); }

struct OrderOptions {
  OrderKind kind = OrderKind::kShuffled;
  /// The run's seed. Together with the epoch it keys every permutation.
  uint64_t seed = 0;
  /// kChunkLocal only: records per chunk (>= 1). The last chunk of a shard may be
  /// shorter; chunks never straddle shards. Ignored by the other kinds (a chunk of
  /// kTokenWindow is always one whole record).
  uint64_t chunk_size = 64;
  /// kChunkLocal, kTokenWindow: chunks per shuffle window (>= 1). Ignored otherwise.
  uint64_t window_chunks = 16;
};

/// Units (records or rows) grouped consecutively (into shards or records): the
/// prefix sums that map a global unit index back to (group, index in group).
/// For token data the groups are the records and the units their rows, so
/// locate(global_row) = (record, row in record). Memory: O(#groups).
class UnitLayout {
 public:
  /// group_sizes[g] = units in group g (zero allowed). The total must be <=
  /// kMaxOrderUnits, else kInvalidArgument.
  explicit UnitLayout(const std::vector<uint64_t>& group_sizes);
  /// A single group of n units.
  static UnitLayout single(uint64_t n) { return UnitLayout(std::vector<uint64_t>{n}); }

  uint64_t units() const noexcept { return begin_.back(); }
  size_t groups() const noexcept { return begin_.size() - 1; }
  uint64_t group_begin(size_t g) const { return begin_.at(g); }
  uint64_t group_size(size_t g) const { return begin_.at(g + 1) - begin_.at(g); }
  /// Global unit index -> (group, unit within the group). kInvalidArgument when
  /// unit >= units(). O(1) when every group but the last has the same size and the
  /// last is no larger and not empty (packed tokens), else O(log #groups); never returns
  /// an empty group.
  std::pair<size_t, uint64_t> locate(uint64_t unit) const;

 private:
  std::vector<uint64_t> begin_;  // groups() + 1 prefix sums
  uint64_t uniform_size_ = 0;    // the common group size when locate() can divide, else 0
};

/// The order of one epoch: position p in [0, size()) -> sample (unit) index.
///
/// kSequential and kShuffled hold O(1) state. The windowed kinds lay the units out in
/// chunks (kChunkLocal: `chunk_size` units of one group; kTokenWindow: one group each;
/// empty groups give no chunk) and, on construction, walk the epoch's chunk
/// permutation once: O(#chunks) time and 16 bytes per chunk. at() is then two binary
/// searches and one permutation evaluation.
class EpochOrder {
 public:
  /// layout: kChunkLocal: records per shard; kTokenWindow: rows per record;
  /// kSequential / kShuffled: only the total matters. Throws kInvalidArgument for
  /// bad options (chunk_size or window_chunks of 0 where they are used).
  EpochOrder(const OrderOptions& options, std::shared_ptr<const UnitLayout> layout,
             uint64_t epoch);
  /// Convenience: a fresh layout from group sizes.
  EpochOrder(const OrderOptions& options, const std::vector<uint64_t>& group_sizes,
             uint64_t epoch);
  /// Convenience: N units in one group (enough for kSequential and kShuffled).
  EpochOrder(const OrderOptions& options, uint64_t units, uint64_t epoch);
  /// An order given as its sequence: at(p) = (*sequence)[p], size() = its length (which
  /// may exceed the layout's units when samples repeat; each entry < them, unchecked). Not windowed. The bucketed
  /// order (buckets.h) is one: its `options` are the Loader's (kShuffled).
  EpochOrder(const OrderOptions& options, std::shared_ptr<const UnitLayout> layout, uint64_t epoch,
             std::shared_ptr<const std::vector<uint64_t>> sequence);

  const OrderOptions& options() const noexcept { return options_; }
  OrderKind kind() const noexcept { return options_.kind; }
  uint64_t epoch() const noexcept { return epoch_; }
  uint64_t size() const noexcept { return n_; }
  const UnitLayout& layout() const noexcept { return *layout_; }

  /// S[position]: the sample index at `position` of this epoch. kInvalidArgument when
  /// position >= size().
  uint64_t at(uint64_t position) const;
  /// out[i] = at(first + i * stride) for i < n: a rank's batch in one call, with each
  /// window looked up once and its permutation evaluated in bulk. kInvalidArgument when
  /// the last position is >= size().
  void at_strided(uint64_t first, uint64_t stride, uint64_t n, uint64_t* out) const;
  /// at_strided, and per sample where its chunk is in its window's chunk order:
  /// window_chunks(window_of(first + i * stride))[chunk_in_window[i]] holds out[i]. A
  /// loader planning a window learns which of the window's chunks each sample needs
  /// without a search per sample. Windowed kinds only, else kInvalidArgument.
  void at_strided(uint64_t first, uint64_t stride, uint64_t n, uint64_t* out, uint32_t* chunk_in_window) const;

  // --- windows and chunks (windowed kinds; the others are one window, no chunks) ---
  bool windowed() const noexcept;
  /// Number of windows: ceil(#chunks / window_chunks); 1 for non-windowed kinds
  /// (0 when size() == 0).
  uint64_t window_count() const noexcept;
  /// The window holding `position`.
  uint64_t window_of(uint64_t position) const;
  /// Positions [begin, end) of window w.
  std::pair<uint64_t, uint64_t> window_positions(uint64_t w) const;
  /// Chunk ids of window w, in the epoch's chunk order (windowed kinds only, else
  /// kInvalidArgument). These are the chunks a loader keeps decompressed while it
  /// consumes the window's positions.
  std::vector<uint64_t> window_chunks(uint64_t w) const;
  /// Chunks in the layout (windowed kinds only; 0 otherwise).
  uint64_t chunk_count() const noexcept { return chunks_; }
  /// The chunk holding a unit (windowed kinds only).
  uint64_t chunk_of(uint64_t unit) const;
  /// Units [begin, end) of a chunk (windowed kinds only).
  std::pair<uint64_t, uint64_t> chunk_units(uint64_t chunk) const;
  /// The group (shard, or record for token data) a chunk belongs to.
  size_t chunk_group(uint64_t chunk) const;

 private:
  uint64_t chunk_per_group(size_t g) const;  // chunks of group g
  // Windowed kinds: the k-th chunk of the epoch's chunk order holds position q of
  // window w; the unit at that position.
  uint64_t ordered_chunk_at(uint64_t w, uint64_t q) const;
  uint64_t unit_at_window_position(uint64_t w, uint64_t q) const;
  void strided_positions(uint64_t first, uint64_t stride, uint64_t n, uint64_t* out, uint32_t* chunk_in_window) const;
  void require_windowed(const char* what) const;

  OrderOptions options_;
  std::shared_ptr<const UnitLayout> layout_;
  uint64_t epoch_ = 0;
  uint64_t n_ = 0;
  uint64_t shuffle_key_ = 0;  // kShuffled: the permutation key; windowed: window key base
  Permutation perm_{1, 0};    // kShuffled (when size() > 0)
  uint64_t chunks_ = 0;
  uint64_t window_ = 1;                   // chunks per window
  std::vector<uint64_t> group_chunk_;     // windowed: first chunk id of each group (+1)
  std::vector<uint64_t> ordered_pos_;     // windowed: first position of k-th ordered chunk (+1)
  std::vector<uint64_t> ordered_begin_;   // windowed: first unit of k-th ordered chunk
  std::vector<Permutation> window_perm_;  // windowed: the shuffle of each window's positions
  std::shared_ptr<const std::vector<uint64_t>> sequence_;  // a given sequence, else null
};

/// How a final step with fewer than W*B positions left is shared out (drop_last = false).
enum class TailPolicy : uint8_t {
  /// torch DistributedSampler's rule: the step is padded to a multiple of W positions,
  /// so every rank gets the same number of batches and a final batch of ceil(R/W)
  /// samples (R = positions left). Padding positions (end() onwards) wrap to the start
  /// of the epoch: position total + i holds S[i mod total], i.e. the epoch order's first
  /// samples repeat (at most W - 1 of them, whatever the resume point).
  kPad,
  /// The final step is cut to floor(R/W) samples per rank; the last R mod W (< W)
  /// positions are not delivered (with R < W the step is dropped). Token data: padding
  /// would need the epoch's first shuffle window decompressed again at its end.
  kTrim,
};

/// One rank's batches of one epoch (from a resume point), as positions of S.
///
/// Step k consumes positions [start + k*W*B, start + (k+1)*W*B) where start is the
/// `consumed` count the schedule began at; rank r's batch k holds positions
/// start + k*W*B + r + j*W for j = 0..B-1. `consumed` may be any value in [0, N]: the
/// union over ranks of every schedule's positions is [consumed, end()), whatever the
/// world size, so resuming at another world size continues the same sequence.
///
/// Every rank gets the same number of batches and batch k has the same length on every
/// rank — what DDP needs (unequal batch counts hang collective ops):
/// drop_last = true: the final incomplete step (fewer than W*B positions left) is
/// dropped for every rank. When resuming at a different world size the dropped tail
/// (< W*B samples) is that of the new world size.
/// drop_last = false: the final partial step follows `tail` (TailPolicy above): padded
/// with the epoch's first samples (images, the default), or trimmed to a multiple of W
/// (token data). With W = 1 both give a final batch of the R samples left.
class RankSchedule {
 public:
  /// total: N (samples in the epoch); batch_size >= 1; world_size >= 1;
  /// rank < world_size; consumed <= total. kInvalidArgument otherwise.
  RankSchedule(uint64_t total, uint64_t batch_size, uint32_t world_size, uint32_t rank,
               bool drop_last, uint64_t consumed = 0, TailPolicy tail = TailPolicy::kPad);

  uint64_t total() const noexcept { return total_; }
  uint64_t batch_size() const noexcept { return batch_; }
  uint32_t world_size() const noexcept { return world_; }
  uint32_t rank() const noexcept { return rank_; }
  bool drop_last() const noexcept { return drop_last_; }
  TailPolicy tail() const noexcept { return tail_; }
  /// The position this schedule starts at (the resume point).
  uint64_t start() const noexcept { return start_; }
  /// One past the last real position any rank consumes: total, or start + the steps
  /// kept (drop_last; kTrim's cut tail).
  uint64_t end() const noexcept { return end_; }
  /// Padding positions in the final step (kPad only; < W): samples delivered twice.
  uint64_t padding() const noexcept { return padding_; }
  /// Global steps from start() to end() (the last may be partial without drop_last).
  uint64_t steps() const noexcept { return steps_; }
  /// This rank's batch count (len(loader)): steps(), the same on every rank.
  uint64_t num_batches() const noexcept { return steps_; }
  /// Samples in this rank's batch k (B except for a final partial batch, whose length
  /// is the same on every rank). kInvalidArgument when k >= num_batches().
  uint64_t batch_length(uint64_t k) const;
  /// Position of sample j of batch k, in [0, total): a padding position wraps to the
  /// epoch's start (unchecked beyond assert).
  uint64_t position(uint64_t k, uint64_t j) const noexcept {
    const uint64_t p = start_ + k * step_ + rank_ + j * world_;
    return p < total_ ? p : (p - total_) % total_;
  }
  /// All positions of batch k (batch_length(k) of them).
  std::vector<uint64_t> positions(uint64_t k) const;
  /// Global samples consumed once every rank has finished `steps_done` steps of this
  /// schedule: min(start + steps_done*W*B, end). Save this in OrderState::consumed.
  uint64_t consumed_after(uint64_t steps_done) const noexcept;

 private:
  uint64_t total_, batch_;
  uint32_t world_, rank_;
  bool drop_last_;
  TailPolicy tail_;
  uint64_t start_, end_ = 0, step_ = 0, steps_ = 0, last_len_ = 0, padding_ = 0;
};

/// This process's rank and world size.
struct RankInfo {
  uint32_t rank = 0;
  uint32_t world_size = 1;
};

/// Reads RANK and WORLD_SIZE from the environment (torchrun's names). Neither set:
/// {0, 1}. Throws kInvalidArgument, naming the variable and value, when only one is
/// set, a value is not a plain decimal integer, WORLD_SIZE is 0, or RANK >= WORLD_SIZE.
RankInfo rank_from_env();

/// Where an epoch stands, for resuming. Serialises to one stable line of text:
///   stoker-order v1 kind=shuffled seed=42 epoch=3 consumed=1536 total=1281167
///   chunk=64 window=16 crc=1a2b3c4d
/// (one line; crc is the CRC32C of everything before " crc=", 8 hex digits).
struct OrderState {
  static constexpr uint32_t kVersion = 1;

  uint32_t version = kVersion;
  OrderKind kind = OrderKind::kShuffled;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t consumed = 0;  ///< global samples consumed in this epoch (all ranks)
  uint64_t total = 0;     ///< N of the epoch, to catch a changed dataset
  uint64_t chunk_size = 0;     ///< kChunkLocal's chunk_size, else 0
  uint64_t window_chunks = 0;  ///< window_chunks of the windowed kinds, else 0
  /// A bucketed order (buckets.h): the global batch its groups are made of, else 0.
  /// Serialised as " bucket=G" before the crc, only when not 0.
  uint64_t bucket_batch = 0;

  /// State at the start of `epoch` for these options and N (chunk params normalised:
  /// 0 where the kind ignores them).
  static OrderState start(const OrderOptions& options, uint64_t total, uint64_t epoch = 0);
  /// The options this state was made with.
  OrderOptions options() const;
  /// The start of the next epoch (consumed = 0).
  OrderState next_epoch() const;

  std::string serialize() const;
  /// Parses untrusted text (one trailing newline allowed). Malformed text, a bad CRC,
  /// consumed > total: kDataLoss. A well-formed state of an unknown version:
  /// kInvalidArgument.
  static OrderState parse(std::string_view text);
  /// kInvalidArgument, naming the field, unless this state was made with these
  /// options (kind, seed, chunk params) and N.
  void check_matches(const OrderOptions& options, uint64_t total) const;

  bool operator==(const OrderState&) const = default;
};

}  // namespace stoker
