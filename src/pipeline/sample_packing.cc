// Packed samples' plan (sample_packing.h).
#include "pipeline/sample_packing.h"

#include <algorithm>
#include <map>

#include "stoker/error.h"
#include "stoker/order.h"

namespace stoker::internal {

namespace {
// Keys the samples' shuffle apart from every epoch order drawn from the same seed.
constexpr uint64_t kPackingKey = 0x7061636b696e6721ull;  // "packing!"
}  // namespace

uint32_t PackPlan::used(uint64_t r) const noexcept {
  uint32_t n = 0;
  for (uint64_t p = row_begin[r]; p < row_begin[r + 1]; ++p) n += pieces[p].len;
  return n;
}

double PackPlan::efficiency() const noexcept {
  const double positions = static_cast<double>(rows()) * seq_len;
  return positions > 0 ? static_cast<double>(tokens) / positions : 1.0;
}

PackPlan plan_packing(std::span<const uint32_t> lengths, const PackingRules& rules,
                      const std::function<std::string(uint64_t)>& name) {
  if (rules.seq_len == 0 || rules.window == 0)
    throw_error(ErrorCode::kInvalidArgument, "packing needs seq_len >= 1 and a window of >= 1 samples");
  PackPlan plan;
  plan.seq_len = rules.seq_len;
  const uint32_t N = rules.seq_len;
  const uint64_t n = lengths.size();
  if (n == 0) return plan;
  const Permutation shuffle(n, mix64(rules.seed ^ kPackingKey));

  struct Item {
    uint64_t sample;
    uint32_t start, len, end;
  };
  std::vector<Item> items;
  std::vector<std::vector<PackedPiece>> rows;  // the window's best-fit rows
  std::vector<std::vector<PackedPiece>> whole;  // per row: a split sample's whole rows before it
  std::multimap<uint32_t, size_t> room;         // room left -> row, rows still open
  auto emit_row = [&plan](const std::vector<PackedPiece>& row) {
    plan.pieces.insert(plan.pieces.end(), row.begin(), row.end());
    plan.row_begin.push_back(plan.pieces.size());
  };
  auto place = [&](const Item& it, size_t r, uint32_t left) {
    rows[r].push_back(PackedPiece{it.sample, it.start, it.len, N - left, it.end});
    plan.tokens += it.len;
    if (left > it.len) room.emplace(left - it.len, r);
  };
  auto open_row = [&] {
    rows.emplace_back();
    whole.emplace_back();
    return rows.size() - 1;
  };
  for (uint64_t w0 = 0; w0 < n; w0 += rules.window) {
    items.clear();
    rows.clear();
    whole.clear();
    room.clear();
    const uint64_t w1 = std::min(n, w0 + rules.window);
    for (uint64_t q = w0; q < w1; ++q) {
      const uint64_t s = shuffle(q);
      const uint32_t L = lengths[s];
      if (L == 0) {
        plan.empty_samples++;
        continue;
      }
      plan.samples++;
      if (L <= N) {
        items.push_back({s, 0, L, L});
        continue;
      }
      switch (rules.long_samples) {
        case LongSamples::kError:
          throw_error(ErrorCode::kInvalidArgument,
                      name(s) + ": a sample of " + std::to_string(L) + " tokens is longer than a row (seq_len " +
                          std::to_string(N) + "); pass long_samples='truncate' or 'split', or a larger seq_len");
        case LongSamples::kTruncate:
          plan.truncated_tokens += L - N;
          items.push_back({s, 0, N, N});
          break;
        case LongSamples::kSplit: {
          // Whole rows, then the remainder opening a row of its own, all one group.
          plan.split_samples++;
          const size_t r = open_row();
          uint32_t start = 0;
          for (; L - start >= N; start += N) {
            whole[r].push_back(PackedPiece{s, start, N, 0, L});
            plan.tokens += N;
          }
          if (start < L) place({s, start, L - start, L}, r, N);
          break;
        }
      }
    }
    // Longest first; ties keep the shuffle's order, so the plan depends on nothing else.
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.len > b.len; });
    for (const Item& it : items) {
      auto fit = room.lower_bound(it.len);
      if (fit == room.end()) {
        place(it, open_row(), N);
      } else {
        const size_t r = fit->second;
        const uint32_t left = fit->first;
        room.erase(fit);
        place(it, r, left);
      }
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      for (const PackedPiece& p : whole[r]) emit_row({p});
      if (!rows[r].empty()) emit_row(rows[r]);
      plan.group_rows.push_back(whole[r].size() + (rows[r].empty() ? 0 : 1));
    }
  }
  return plan;
}

TokenBatchPlan plan_token_batches(std::span<const uint32_t> lengths, uint64_t max_tokens, const PackingRules& rules,
                                  const std::function<std::string(uint64_t)>& name) {
  if (max_tokens == 0 || rules.window == 0)
    throw_error(ErrorCode::kInvalidArgument, "max_tokens batches need max_tokens >= 1 and a window of >= 1 samples");
  if (rules.long_samples == LongSamples::kSplit)
    throw_error(ErrorCode::kInvalidArgument, "max_tokens: long_samples 'split' cuts samples over packed rows; a "
                                             "padded batch holds whole samples ('error' or 'truncate')");
  TokenBatchPlan plan;
  plan.max_tokens = max_tokens;
  const uint64_t n = lengths.size();
  if (n == 0) return plan;
  // The rows' shuffle: the same samples share a window in either mode.
  const Permutation shuffle(n, mix64(rules.seed ^ kPackingKey));
  const uint32_t cap = static_cast<uint32_t>(std::min<uint64_t>(max_tokens, UINT32_MAX));
  // A window of kWindowBatches batches or more: sorting fewer samples leaves the lengths
  // within a batch far apart (more padding) when a batch holds many of them.
  double total = 0;
  uint64_t nonempty = 0;
  for (uint32_t L : lengths) {
    total += std::min(L, cap);
    nonempty += L > 0;
  }
  const double per_batch = total > 0 ? static_cast<double>(max_tokens) * static_cast<double>(nonempty) / total : 1;
  const uint64_t window = std::max<uint64_t>(rules.window, static_cast<uint64_t>(kWindowBatches * per_batch));
  std::vector<std::pair<uint32_t, uint64_t>> items;  // (delivered length, sample)
  for (uint64_t w0 = 0; w0 < n; w0 += window) {
    items.clear();
    for (uint64_t q = w0; q < std::min(n, w0 + window); ++q) {
      const uint64_t s = shuffle(q);
      const uint32_t L = lengths[s];
      if (L == 0) {
        plan.empty_samples++;
        continue;
      }
      if (L > max_tokens && rules.long_samples == LongSamples::kError)
        throw_error(ErrorCode::kInvalidArgument,
                    name(s) + ": a sample of " + std::to_string(L) + " tokens is longer than max_tokens (" +
                        std::to_string(max_tokens) + "); pass long_samples='truncate' or a larger max_tokens");
      if (L > cap) plan.truncated_tokens += L - cap;
      items.emplace_back(std::min(L, cap), s);
    }
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < items.size();) {
      const uint64_t L = items[i].first;
      const size_t take = std::min<uint64_t>(items.size() - i, max_tokens / L);
      for (size_t x = i; x < i + take; ++x) {
        plan.samples.push_back(items[x].second);
        plan.lengths.push_back(items[x].first);
        plan.tokens += items[x].first;
      }
      plan.positions += take * L;
      plan.begin.push_back(plan.samples.size());
      i += take;
    }
  }
  return plan;
}

}  // namespace stoker::internal
