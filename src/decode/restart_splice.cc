#include "decode/restart_splice.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace stoker::internal {

SpliceRect splice_restart_intervals(std::span<const uint8_t> jpeg, const RestartLayout& l,
                                    int x0, int x1, int y0, int y1, int denom,
                                    std::vector<uint8_t>& out) {
  assert(0 <= x0 && x0 < x1 && x1 <= l.width && 0 <= y0 && y0 < y1 && y1 <= l.height);
  const int k = l.interval;
  // The MCUs holding [lo, hi), widened by one where an edge is closer to it than one
  // decoded chroma sample: the upsampler's context. libjpeg decodes a chroma block to at
  // least as many samples as a luma block (DCT size 8 / denom), so one covers at most
  // denom * (MCU size / 8) full-resolution pixels.
  auto span_of = [denom](int lo, int hi, int mcu, int count) {
    const int context = denom * mcu / 8;
    int m0 = lo / mcu, m1 = (hi + mcu - 1) / mcu;
    if (m0 > 0 && lo - m0 * mcu < context) --m0;
    if (m1 < count && m1 * mcu - hi < context) ++m1;
    return std::pair<int, int>(m0, m1);
  };
  auto [mc0, mc1] = span_of(x0, x1, l.mcu_w, l.mcus_per_row);
  // libjpeg picks plain (replicating) upsampling for a component at most 2 samples wide
  // (jdsample.c), so a one-MCU-wide splice of a wider image would not decode the same:
  // at least two MCU columns.
  if (mc1 - mc0 < 2 && l.mcus_per_row >= 2) {
    if (mc1 < l.mcus_per_row) ++mc1;
    else --mc0;
  }
  const auto [r0, r1] = span_of(y0, y1, l.mcu_h, l.mcu_rows);
  const int c0 = mc0 / k * k;
  const int c1 = std::min(l.mcus_per_row, (mc1 + k - 1) / k * k);
  SpliceRect rect;
  rect.x = c0 * l.mcu_w;
  rect.y = r0 * l.mcu_h;
  rect.width = std::min(l.width, c1 * l.mcu_w) - rect.x;
  rect.height = std::min(l.height, r1 * l.mcu_h) - rect.y;
  out.clear();
  if (c0 == 0 && c1 == l.mcus_per_row && r0 == 0 && r1 == l.mcu_rows) {
    rect.whole = true;
    return rect;
  }

  const uint8_t* d = jpeg.data();
  const uint8_t* scan = d + l.scan_offset;
  const int per_row = l.intervals_per_row();
  const int j0 = c0 / k, j1 = c1 / k;
  size_t bytes = l.scan_offset - l.index_size + 2;
  for (int r = r0; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * per_row;
    bytes += l.starts[i + j1] - l.starts[i + j0];
  }
  out.reserve(bytes);

  // Header without the index segment (it sits before SOF: the writer puts it there).
  assert(l.index_offset < l.sof_offset);
  out.insert(out.end(), d, d + l.index_offset);
  out.insert(out.end(), d + l.index_offset + l.index_size, scan);
  uint8_t* sof = out.data() + (l.sof_offset - l.index_size);
  sof[5] = static_cast<uint8_t>(rect.height >> 8);
  sof[6] = static_cast<uint8_t>(rect.height & 0xFF);
  sof[7] = static_cast<uint8_t>(rect.width >> 8);
  sof[8] = static_cast<uint8_t>(rect.width & 0xFF);

  const size_t n = l.intervals();
  unsigned emitted = 0;
  for (int r = r0; r < r1; ++r) {
    for (int j = j0; j < j1; ++j) {
      const size_t i = static_cast<size_t>(r) * per_row + j;
      check_restart_marker(jpeg, l, i);
      size_t end = l.starts[i + 1];
      if (i + 1 < n) {
        check_restart_marker(jpeg, l, i + 1);
        end -= 2;  // its RST marker: ours follows, numbered in splice order
      }
      if (emitted > 0) {
        out.push_back(0xFF);
        out.push_back(static_cast<uint8_t>(0xD0 + ((emitted - 1) & 7)));
      }
      out.insert(out.end(), scan + l.starts[i], scan + end);
      ++emitted;
    }
  }
  out.push_back(0xFF);
  out.push_back(0xD9);
  return rect;
}

}  // namespace stoker::internal
