#include "decode/restart_splice.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace stoker::internal {

SpliceRect splice_restart_intervals(std::span<const uint8_t> jpeg, const RestartLayout& l,
                                    int x0, int x1, int y0, int y1, std::vector<uint8_t>& out) {
  assert(0 <= x0 && x0 < x1 && x1 <= l.width && 0 <= y0 && y0 < y1 && y1 <= l.height);
  const int k = l.interval;
  const int mc0 = std::max(0, x0 / l.mcu_w - 1);
  const int mc1 = std::min(l.mcus_per_row, (x1 + l.mcu_w - 1) / l.mcu_w + 1);
  const int c0 = mc0 / k * k;
  const int c1 = std::min(l.mcus_per_row, (mc1 + k - 1) / k * k);
  const int r0 = std::max(0, y0 / l.mcu_h - 1);
  const int r1 = std::min(l.mcu_rows, (y1 + l.mcu_h - 1) / l.mcu_h + 1);
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
