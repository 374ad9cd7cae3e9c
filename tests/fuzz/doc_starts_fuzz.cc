// libFuzzer target: arbitrary bytes as a token record's `doc_starts` (pipeline/doc_rows.h).
// The first 8 bytes pick the record's rows and seq_len; the rest are the stored entries.
// check_doc_starts must never crash; for entries it accepts, every row's outputs must be
// made within bounds and be consistent: positions count up by one within a piece and
// restart at 0 at each later piece, loss_mask is 0 exactly before each piece's start or
// where the next row starts one, and the pieces sum to seq_len; written streamed into
// aligned rows, the outputs are the same.
#include <cstdint>
#include <cstring>
#include <vector>

#include "pipeline/doc_rows.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint32_t rows, n;
  std::memcpy(&rows, data, 4);
  std::memcpy(&n, data + 4, 4);
  rows = rows % 8 + 1;
  n = n % 300 + 1;
  const std::span<const uint8_t> starts(data + 8, size - 8);
  if (!stoker::internal::check_doc_starts(starts, rows, n).empty()) return 0;
  std::vector<int32_t> pos(n), ids(n);
  std::vector<uint8_t> mask(n), lens;
  // The streamed form (the loader's, into 16-byte aligned slot rows) must write the same.
  std::vector<int32_t> spos(n + 4), sids(n + 4);
  std::vector<uint8_t> smask(n + 16);
  auto aligned = [](auto* p) { return reinterpret_cast<decltype(p)>((reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t{15}); };
  for (uint32_t r = 0; r < rows; ++r) {
    lens.clear();
    stoker::internal::doc_row(starts, r, n, {pos.data(), mask.data(), ids.data(), &lens});
    stoker::internal::DocRowOut st{aligned(spos.data()), aligned(smask.data()), aligned(sids.data()), nullptr, true};
    stoker::internal::doc_row(starts, r, n, st);
    if (std::memcmp(st.position_ids, pos.data(), n * 4) || std::memcmp(st.loss_mask, mask.data(), n) ||
        std::memcmp(st.doc_ids, ids.data(), n * 4))
      __builtin_trap();
    if (lens.empty() || lens.size() % 4) __builtin_trap();
    int64_t sum = 0;
    for (size_t i = 0; i < lens.size(); i += 4) {
      int32_t len;
      std::memcpy(&len, lens.data() + i, 4);
      if (len < 1) __builtin_trap();
      sum += len;
    }
    if (sum != n) __builtin_trap();
    if (static_cast<size_t>(ids[n - 1]) + 1 != lens.size() / 4 || ids[0] != 0 || pos[0] < 0) __builtin_trap();
    for (uint32_t i = 1; i < n; ++i) {
      const bool new_doc = ids[i] != ids[i - 1];
      if (new_doc ? (ids[i] != ids[i - 1] + 1 || pos[i] != 0 || mask[i - 1] != 0)
                  : (pos[i] != pos[i - 1] + 1 || mask[i - 1] != 1))
        __builtin_trap();
    }
  }
  return 0;
}
