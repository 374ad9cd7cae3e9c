// Per-row document outputs (doc_rows.h).
#include "pipeline/doc_rows.h"

#include <climits>
#include <cstring>

namespace stoker::internal {

namespace {

// The stored entries are unaligned in the decompressed record.
int64_t start_at(std::span<const uint8_t> s, size_t i) {
  int32_t v;
  std::memcpy(&v, s.data() + 4 * i, 4);
  return v;
}

}  // namespace

std::string check_doc_starts(std::span<const uint8_t> starts, uint64_t rows, uint32_t seq_len) {
  if (starts.size() % 4 != 0) return "doc_starts is " + std::to_string(starts.size()) + " bytes, not whole int32s";
  const size_t n = starts.size() / 4;
  if (n == 0) return "doc_starts is empty (it needs the start of the document holding the first token)";
  if (start_at(starts, 0) > 0)
    return "doc_starts begins at " + std::to_string(start_at(starts, 0)) + ", after the record's first token";
  const int64_t end = static_cast<int64_t>(rows * seq_len);
  // Every position in the record is at most end - (the first entry): int32 must hold it.
  if (end - start_at(starts, 0) > INT32_MAX)
    return "doc_starts begins at " + std::to_string(start_at(starts, 0)) + ": positions up to the record's end (" +
           std::to_string(end) + ") pass what int32 holds";
  for (size_t i = 1; i < n; ++i) {
    const int64_t v = start_at(starts, i);
    if (v <= start_at(starts, i - 1))
      return "doc_starts entry " + std::to_string(i) + " (" + std::to_string(v) + ") does not increase";
    if (v > end)
      return "doc_starts entry " + std::to_string(i) + " (" + std::to_string(v) + ") lies past the record's " +
             std::to_string(end) + " tokens";
  }
  return {};
}

void doc_row(std::span<const uint8_t> starts, uint64_t row, uint32_t seq_len, const DocRowOut& out,
             bool from_row_start) {
  const size_t n = starts.size() / 4;
  const int64_t a = static_cast<int64_t>(row * seq_len), N = seq_len;
  // t: the last start at or before the row's first token (entry 0 is <= 0 <= a).
  size_t lo = 0, hi = n;
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    (start_at(starts, mid) <= a ? lo : hi) = mid;
  }
  size_t t = lo;
  int64_t doc_start = from_row_start ? a : start_at(starts, t);
  int32_t doc = 0;
  int64_t i = 0;
  if (out.loss_mask) std::memset(out.loss_mask, 1, static_cast<size_t>(N));
  while (i < N) {
    const int64_t next = t + 1 < n ? start_at(starts, t + 1) - a : INT64_MAX;  // relative to the row
    const int64_t end = next < N ? next : N;
    if (out.position_ids) {
      int32_t p = static_cast<int32_t>(a + i - doc_start);
      for (int64_t x = i; x < end; ++x) out.position_ids[x] = p++;
    }
    if (out.doc_ids)
      for (int64_t x = i; x < end; ++x) out.doc_ids[x] = doc;
    if (out.seqlens) {
      const int32_t len = static_cast<int32_t>(end - i);
      const size_t at = out.seqlens->size();
      out.seqlens->resize(at + 4);
      std::memcpy(out.seqlens->data() + at, &len, 4);
    }
    // The input just before a document's first token ends the one before: its target
    // lies in another document (a start at N: the row's last target).
    if (out.loss_mask && next <= N) out.loss_mask[next - 1] = 0;
    if (next >= N) break;
    i = next;
    doc_start = a + next;
    ++t;
    ++doc;
  }
}

}  // namespace stoker::internal
