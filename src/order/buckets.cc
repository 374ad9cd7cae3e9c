// Bucket lists and the bucketed epoch order (buckets.h).
#include "stoker/buckets.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "stoker/error.h"
#include "stoker/order.h"

namespace stoker {
namespace {

// Keys of the two shuffles, apart from every key order.cc derives (its tags differ).
constexpr uint64_t kTagRecords = 0x6275636b2d726563ull;  // "buck-rec"
constexpr uint64_t kTagGroups = 0x6275636b2d677270ull;   // "buck-grp"

uint64_t key_of(uint64_t tag, uint64_t seed, uint64_t epoch) { return mix64(mix64(mix64(tag) ^ seed) ^ epoch); }

[[noreturn]] void bad(const std::string& why) { throw_error(ErrorCode::kInvalidArgument, "buckets: " + why); }

std::string size_text(const BucketSize& b) { return std::to_string(b.height) + "x" + std::to_string(b.width); }

}  // namespace

std::vector<BucketSize> resolve_buckets(const BucketOptions& o) {
  if (!o.sizes.empty() && o.pixels > 0) bad("give a list of sizes or a pixel budget, not both");
  std::vector<BucketSize> out;
  if (!o.sizes.empty()) {
    for (const BucketSize& b : o.sizes) {
      if (b.height < 1 || b.height > 8192 || b.width < 1 || b.width > 8192)
        bad("each (height, width) must be 1..8192, got (" + std::to_string(b.height) + ", " +
            std::to_string(b.width) + ")");
      if (std::find(out.begin(), out.end(), b) != out.end()) bad(size_text(b) + " is listed twice");
      out.push_back(b);
    }
  } else if (o.pixels > 0) {
    if (o.step < 1 || o.step > 8192) bad("step must be 1..8192, got " + std::to_string(o.step));
    const uint64_t s = static_cast<uint64_t>(o.step);
    if (o.pixels < s * s)
      bad("pixels (" + std::to_string(o.pixels) + ") must be at least step² (" + std::to_string(s * s) + ")");
    if (!(o.max_ratio >= 1)) bad("max_ratio must be >= 1, got " + std::to_string(o.max_ratio));
    const uint64_t side = static_cast<uint64_t>(std::sqrt(static_cast<double>(o.pixels))) / s * s;
    for (uint64_t w = s; w <= 8192 && w * s <= o.pixels; w += s) {
      const uint64_t h = std::min<uint64_t>(o.pixels / w / s * s, 8192 / s * s);
      if (h < s) break;
      const double ratio = static_cast<double>(std::max(w, h)) / static_cast<double>(std::min(w, h));
      if (ratio > o.max_ratio) continue;
      const BucketSize b{static_cast<int>(h), static_cast<int>(w)};
      if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
    }
    const BucketSize square{static_cast<int>(std::min<uint64_t>(side, 8192)), static_cast<int>(std::min<uint64_t>(side, 8192))};
    if (std::find(out.begin(), out.end(), square) == out.end()) out.push_back(square);
  } else {
    return out;
  }
  // Tallest first: h / w decreasing, compared without division.
  std::stable_sort(out.begin(), out.end(), [](const BucketSize& a, const BucketSize& b) {
    return static_cast<int64_t>(a.height) * b.width > static_cast<int64_t>(b.height) * a.width;
  });
  // Two buckets of one aspect (an explicit list may hold 256x256 and 512x512) stay: the
  // nearest-bucket rule then takes the earlier, so the later is never used; refuse that.
  for (size_t i = 1; i < out.size(); ++i)
    if (static_cast<int64_t>(out[i].height) * out[i - 1].width == static_cast<int64_t>(out[i - 1].height) * out[i].width)
      bad(size_text(out[i - 1]) + " and " + size_text(out[i]) + " have the same aspect ratio");
  return out;
}

uint32_t nearest_bucket(std::span<const BucketSize> buckets, int width, int height) {
  if (buckets.empty()) bad("no buckets to choose from");
  if (width < 1 || height < 1)
    bad("a record of " + std::to_string(width) + "x" + std::to_string(height) + " pixels has no aspect ratio");
  const double r = std::log(static_cast<double>(width) / height);
  uint32_t best = 0;
  double best_d = INFINITY;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const double d = std::fabs(r - std::log(static_cast<double>(buckets[i].width) / buckets[i].height));
    if (d < best_d) {
      best_d = d;
      best = static_cast<uint32_t>(i);
    }
  }
  return best;
}

uint64_t BucketOrder::epoch_size(std::span<const uint64_t> counts, uint64_t group, bool fill) {
  if (group == 0) bad("the global batch must be >= 1");
  uint64_t total = 0;
  for (uint64_t n : counts) total += (fill ? (n + group - 1) / group : n / group) * group;
  return total;
}

BucketOrder::BucketOrder(std::span<const uint32_t> bucket_of, uint32_t bucket_count, uint64_t seed, uint64_t epoch,
                         uint64_t group, bool fill, bool shuffle)
    : group_(group) {
  if (group == 0) bad("the global batch must be >= 1");
  if (bucket_count == 0) bad("no buckets");
  const uint64_t n = bucket_of.size();
  // Each bucket's records in the shuffled order, as one array cut by bucket.
  std::vector<uint64_t> begin(bucket_count + 1, 0);
  for (uint32_t b : bucket_of) {
    if (b >= bucket_count) bad("a record's bucket " + std::to_string(b) + " is out of range");
    ++begin[b + 1];
  }
  for (uint32_t b = 0; b < bucket_count; ++b) begin[b + 1] += begin[b];
  std::vector<uint64_t> members(n);
  {
    std::vector<uint64_t> at(begin.begin(), begin.end() - 1);
    const Permutation perm(std::max<uint64_t>(n, 1), key_of(kTagRecords, seed, epoch));
    for (uint64_t p = 0; p < n; ++p) {
      const uint64_t r = shuffle ? perm(p) : p;
      members[at[bucket_of[r]]++] = r;
    }
  }
  // The groups in bucket order, then their order shuffled.
  std::vector<std::pair<uint32_t, uint64_t>> groups;  // (bucket, first member in it)
  for (uint32_t b = 0; b < bucket_count; ++b) {
    const uint64_t size = begin[b + 1] - begin[b];
    const uint64_t k = fill ? (size + group - 1) / group : size / group;
    for (uint64_t g = 0; g < k; ++g) groups.emplace_back(b, g * group);
  }
  const uint64_t count = groups.size();
  auto seq = std::make_shared<std::vector<uint64_t>>();
  seq->reserve(count * group);
  group_bucket_.reserve(count);
  const Permutation group_perm(std::max<uint64_t>(count, 1), key_of(kTagGroups, seed, epoch));
  for (uint64_t k = 0; k < count; ++k) {
    const auto [b, first] = groups[shuffle ? group_perm(k) : k];
    const uint64_t size = begin[b + 1] - begin[b];
    group_bucket_.push_back(b);
    for (uint64_t j = 0; j < group; ++j) seq->push_back(members[begin[b] + (first + j) % size]);
  }
  sequence_ = std::move(seq);
}

uint64_t BucketOrder::at(uint64_t position) const {
  if (position >= sequence_->size())
    bad("position " + std::to_string(position) + " is out of range (" + std::to_string(sequence_->size()) + ")");
  return (*sequence_)[position];
}

}  // namespace stoker
