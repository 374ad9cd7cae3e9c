// Tests of src/pipeline/doc_rows.h: every output of doc_row() against a reference written
// from the header's definitions, for rows of every length around the 4- and 16-input
// blocks, at aligned and unaligned addresses, with and without streaming stores (these
// run the SIMD path of the platform: SSE2 on x86-64, NEON/STNP on aarch64).
#include "pipeline/doc_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "util/stream_copy.h"

namespace stoker::internal {
namespace {

struct RowOutputs {
  std::vector<int32_t> positions, doc_ids, seqlens;
  std::vector<uint8_t> mask;
};

// From the definitions in doc_rows.h, one input at a time.
RowOutputs reference(const std::vector<int32_t>& starts, uint64_t row, uint32_t N, bool from_row_start) {
  RowOutputs r;
  const int64_t a0 = static_cast<int64_t>(row * N);
  auto doc_of = [&](int64_t a) {  // index of the last start <= a
    size_t t = 0;
    while (t + 1 < starts.size() && starts[t + 1] <= a) ++t;
    return t;
  };
  const size_t t0 = doc_of(a0);
  int32_t piece = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = a0 + i;
    const size_t t = doc_of(a);
    const int64_t from = (from_row_start && t == t0) ? a0 : starts[t];
    r.positions.push_back(static_cast<int32_t>(a - from));
    r.doc_ids.push_back(static_cast<int32_t>(t - t0));
    bool ends = false;
    for (int32_t s : starts) ends = ends || s == a + 1;
    r.mask.push_back(ends ? 0 : 1);
    if (i == 0 || t != doc_of(a - 1)) {
      r.seqlens.push_back(0);
      piece = static_cast<int32_t>(r.seqlens.size()) - 1;
    }
    ++r.seqlens[piece];
  }
  return r;
}

// Starts of a record of `rows` rows of N: the first in [-20, 0], then gaps of 1 to 1.5 N
// (so rows hold zero to many document starts).
std::vector<int32_t> random_starts(std::mt19937& rng, uint64_t rows, uint32_t N) {
  std::vector<int32_t> s{-static_cast<int32_t>(rng() % 21)};
  const int64_t end = static_cast<int64_t>(rows * N);
  for (;;) {
    const int64_t next = s.back() + 1 + static_cast<int64_t>(rng() % (N + N / 2 + 1));
    if (next > end) break;
    s.push_back(static_cast<int32_t>(next));
  }
  return s;
}

TEST(DocRows, EveryOutputMatchesTheDefinitionAtEveryLengthAlignmentAndStoreKind) {
  std::mt19937 rng(5);
  for (uint32_t N : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 64u, 100u, 257u}) {
    for (int trial = 0; trial < 6; ++trial) {
      const uint64_t rows = 1 + rng() % 4;
      const auto starts = random_starts(rng, rows, N);
      std::vector<uint8_t> bytes(starts.size() * 4);
      std::memcpy(bytes.data(), starts.data(), bytes.size());
      ASSERT_EQ(check_doc_starts(bytes, rows, N), "");
      for (uint64_t row = 0; row < rows; ++row) {
        for (bool from_row_start : {false, true}) {
          const RowOutputs want = reference(starts, row, N, from_row_start);
          for (bool stream : {false, true}) {
            for (size_t shift : {0, 1, 4}) {  // shift 0: 16-byte aligned outputs
              alignas(16) static int32_t pos[1024], ids[1024];
              alignas(16) static uint8_t mask[1024];
              std::memset(pos, 0xAB, sizeof pos);
              std::memset(ids, 0xAB, sizeof ids);
              std::memset(mask, 0xAB, sizeof mask);
              std::vector<uint8_t> seqlens;
              DocRowOut out{.position_ids = pos + shift, .loss_mask = mask + shift,
                            .doc_ids = ids + shift, .seqlens = &seqlens, .stream = stream};
              doc_row(bytes, row, N, out, from_row_start);
              stream_copy_fence();
              const std::string at = "N " + std::to_string(N) + " row " + std::to_string(row) +
                                     " from_row_start " + std::to_string(from_row_start) + " stream " +
                                     std::to_string(stream) + " shift " + std::to_string(shift);
              ASSERT_EQ(std::vector<int32_t>(pos + shift, pos + shift + N), want.positions) << at;
              ASSERT_EQ(std::vector<int32_t>(ids + shift, ids + shift + N), want.doc_ids) << at;
              ASSERT_EQ(std::vector<uint8_t>(mask + shift, mask + shift + N), want.mask) << at;
              std::vector<int32_t> lens(seqlens.size() / 4);
              std::memcpy(lens.data(), seqlens.data(), seqlens.size());
              ASSERT_EQ(lens, want.seqlens) << at;
              // Nothing written past the row.
              ASSERT_EQ(mask[shift + N], 0xAB) << at;
              int32_t guard;
              std::memset(&guard, 0xAB, 4);
              ASSERT_EQ(pos[shift + N], guard) << at;
              ASSERT_EQ(ids[shift + N], guard) << at;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace stoker::internal
