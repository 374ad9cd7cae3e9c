// The fast-crop index (restart_index.h) and the public jpeg_for_fast_crop /
// check_fast_crop_index of include/stoker/image.h.
#include "decode/restart_index.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "decode/jpeg_handle.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "util/bytes.h"

namespace stoker::internal {

namespace {

constexpr char kTag[7] = {'S', 'T', 'K', 'R', 'S', 'T', '\0'};
constexpr size_t kFixedBytes = 22;          // tag .. interval count
constexpr size_t kMaxPayload = 65535 - 2;   // a segment's length field counts itself
// Keeps the index (<= 3 LEB128 bytes an interval below 2 MiB) inside one segment.
constexpr uint64_t kMaxIntervals = (kMaxPayload - kFixedBytes - 4) / 3;

[[noreturn]] void index_error(const std::string& why) {
  throw Error(ErrorCode::kDataLoss, "fast-crop index: " + why);
}

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

// What one walk over the segments between SOI and the first scan saw.
struct HeaderWalk {
  bool reached_scan = false;
  int sof_marker = 0;
  size_t sof_offset = 0;
  int width = 0, height = 0, components = 0;
  int h[4] = {}, v[4] = {};
  int dri = 0;
  size_t index_offset = 0, index_size = 0;  // 0: no index segment
  size_t scan_offset = 0;
  int scan_components = 0;
  size_t after_app0 = 2;  // where an inserted segment goes: after SOI and a leading APP0
};

// Stops at the first SOS, or quietly at anything malformed (reached_scan stays false).
HeaderWalk walk_header(std::span<const uint8_t> j) {
  HeaderWalk w;
  const uint8_t* d = j.data();
  const size_t n = j.size();
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return w;
  size_t pos = 2;
  bool first = true;
  while (pos + 4 <= n) {
    if (d[pos] != 0xFF) return w;
    const int m = d[pos + 1];
    if (m == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (m == 0xD8 || m == 0xD9 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) return w;
    const size_t len = be16(d + pos + 2);
    if (len < 2 || pos + 2 + len > n) return w;
    const uint8_t* s = d + pos + 4;  // segment payload
    const size_t sl = len - 2;
    if (m == 0xE0 && first) w.after_app0 = pos + 2 + len;
    first = false;
    if (m == kRestartIndexMarker && sl >= sizeof(kTag) && std::memcmp(s, kTag, sizeof(kTag)) == 0 &&
        w.index_size == 0) {
      w.index_offset = pos;
      w.index_size = len + 2;
    } else if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (w.sof_marker != 0 || sl < 6) return w;
      w.sof_marker = m;
      w.sof_offset = pos;
      w.height = be16(s + 1);
      w.width = be16(s + 3);
      w.components = s[5];
      if (w.components > 4 || sl < 6 + 3 * static_cast<size_t>(w.components)) {
        w.components = -1;  // not indexable; remembered so the index can be refused
      } else {
        for (int c = 0; c < w.components; ++c) {
          w.h[c] = s[6 + 3 * c + 1] >> 4;
          w.v[c] = s[6 + 3 * c + 1] & 15;
        }
      }
    } else if (m == 0xDD) {
      if (sl < 2) return w;
      w.dri = be16(s);
    } else if (m == 0xDA) {
      if (sl < 1) return w;
      w.scan_components = s[0];
      w.scan_offset = pos + 2 + len;
      w.reached_scan = true;
      return w;
    }
    pos += 2 + len;
  }
  return w;
}

struct Geometry {
  int mcu_w = 0, mcu_h = 0, mcus_per_row = 0, mcu_rows = 0;
};

// libjpeg's MCU for one interleaved scan of these components (a single component is
// scanned block by block whatever its sampling factors).
bool geometry_of(const HeaderWalk& w, Geometry& g) {
  if (w.components < 1 || w.width < 1 || w.height < 1) return false;
  int mh = 0, mv = 0;
  for (int c = 0; c < w.components; ++c) {
    if (w.h[c] < 1 || w.h[c] > 4 || w.v[c] < 1 || w.v[c] > 4) return false;
    mh = std::max(mh, w.h[c]);
    mv = std::max(mv, w.v[c]);
  }
  g.mcu_w = w.components == 1 ? 8 : 8 * mh;
  g.mcu_h = w.components == 1 ? 8 : 8 * mv;
  g.mcus_per_row = (w.width + g.mcu_w - 1) / g.mcu_w;
  g.mcu_rows = (w.height + g.mcu_h - 1) / g.mcu_h;
  return true;
}

void put_leb128(std::vector<uint8_t>& out, uint32_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

struct CompressHolder {
  jpeg_compress_struct c;
  bool created = false;
  unsigned char* buf = nullptr;  // jpeg_mem_dest's malloc'ed output
  unsigned long size = 0;
  CompressHolder() { std::memset(&c, 0, sizeof(c)); }
  ~CompressHolder() {
    if (created) jpeg_destroy_compress(&c);
    std::free(buf);
  }
};

bool marker_is(const jpeg_saved_marker_ptr m, int code, const char* tag, size_t n) {
  return m->marker == code && m->data_length >= n && std::memcmp(m->data, tag, n) == 0;
}

}  // namespace

bool read_restart_layout(std::span<const uint8_t> jpeg, RestartLayout& out) {
  const HeaderWalk w = walk_header(jpeg);
  if (w.index_size == 0) return false;
  const uint8_t* p = jpeg.data() + w.index_offset + 4;
  const size_t pl = w.index_size - 4;
  if (pl < kFixedBytes + 4) index_error("segment of " + std::to_string(pl) + " bytes is too short");
  const uint32_t stored = get_u32(p + pl - 4);
  const uint32_t computed = crc32c(p, pl - 4);
  if (stored != computed) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "CRC32C mismatch (stored %08x, computed %08x)", stored, computed);
    index_error(buf);
  }
  if (p[7] != kRestartIndexVersion) index_error("unsupported version " + std::to_string(p[7]));
  if (!w.reached_scan) index_error("the header ends before the scan it describes");
  if (w.sof_marker != 0xC0 && w.sof_marker != 0xC1) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "the image is not sequential Huffman-coded (SOF marker FF %02X)",
                  w.sof_marker);
    index_error(buf);
  }
  if (w.index_offset > w.sof_offset) index_error("the segment comes after the frame header");
  Geometry g;
  if (!geometry_of(w, g)) index_error("the frame header has an unsupported layout");
  const int interval = get_u16(p + 8);
  const int mpr = get_u16(p + 10), rows = get_u16(p + 12);
  const size_t scan_bytes = get_u32(p + 14);
  const uint64_t intervals = get_u32(p + 18);
  auto mismatch = [](const std::string& what, uint64_t index, uint64_t image) {
    index_error(what + " " + std::to_string(index) + " does not match the image's " +
                std::to_string(image));
  };
  if (mpr != g.mcus_per_row) mismatch("MCUs per row", mpr, g.mcus_per_row);
  if (rows != g.mcu_rows) mismatch("MCU rows", rows, g.mcu_rows);
  if (interval != w.dri) mismatch("restart interval", interval, w.dri);
  if (interval < 1 || mpr % interval != 0) {
    index_error("restart interval " + std::to_string(interval) + " does not divide the " +
                std::to_string(mpr) + " MCUs per row");
  }
  const uint64_t want = static_cast<uint64_t>(mpr) * rows / interval;
  if (intervals != want) mismatch("interval count", intervals, want);
  if (w.scan_components != w.components) {
    index_error("the scan holds " + std::to_string(w.scan_components) + " of " +
                std::to_string(w.components) + " components (one interleaved scan expected)");
  }
  if (w.scan_offset + scan_bytes + 2 > jpeg.size() || jpeg[w.scan_offset + scan_bytes] != 0xFF ||
      jpeg[w.scan_offset + scan_bytes + 1] != 0xD9) {
    index_error("no EOI marker after the " + std::to_string(scan_bytes) +
                " entropy-coded bytes it records");
  }
  size_t q = kFixedBytes;
  const size_t end = pl - 4;
  // Each size takes at least a byte: bounds the allocation below by the segment's size.
  if (intervals > end - q) {
    index_error(std::to_string(intervals) + " intervals cannot fit " + std::to_string(end - q) +
                " bytes of sizes");
  }
  out.starts.resize(intervals + 1);
  uint64_t at = 0;
  for (uint64_t i = 0; i < intervals; ++i) {
    uint32_t v = 0;
    int shift = 0;
    for (;;) {
      if (q >= end) index_error("interval sizes end after " + std::to_string(i) + " of " +
                                std::to_string(intervals));
      const uint8_t b = p[q++];
      v |= static_cast<uint32_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) break;
      shift += 7;
      if (shift > 21) index_error("interval " + std::to_string(i) + ": size does not fit 28 bits");
    }
    const uint32_t min_size = i + 1 < intervals ? 3 : 1;  // data byte (+ RST marker)
    if (v < min_size) index_error("interval " + std::to_string(i) + " has " + std::to_string(v) + " bytes");
    out.starts[i] = static_cast<uint32_t>(at);
    at += v;
    if (at > scan_bytes) {
      index_error("interval sizes add up past the " + std::to_string(scan_bytes) +
                  " entropy-coded bytes");
    }
  }
  if (at != scan_bytes) {
    index_error("interval sizes add up to " + std::to_string(at) + ", not the " +
                std::to_string(scan_bytes) + " entropy-coded bytes");
  }
  if (q != end) index_error(std::to_string(end - q) + " bytes left after the interval sizes");
  out.starts[intervals] = static_cast<uint32_t>(scan_bytes);
  out.width = w.width;
  out.height = w.height;
  out.components = w.components;
  out.mcu_w = g.mcu_w;
  out.mcu_h = g.mcu_h;
  out.mcus_per_row = mpr;
  out.mcu_rows = rows;
  out.interval = interval;
  out.sof_offset = w.sof_offset;
  out.index_offset = w.index_offset;
  out.index_size = w.index_size;
  out.scan_offset = w.scan_offset;
  out.scan_bytes = scan_bytes;
  return true;
}

void check_restart_marker(std::span<const uint8_t> jpeg, const RestartLayout& l, size_t i) {
  if (i == 0) return;
  // read_restart_layout made every start >= 3 past the previous one, inside the scan.
  const uint8_t* m = jpeg.data() + l.scan_offset + l.starts[i] - 2;
  const int want = 0xD0 + static_cast<int>((i - 1) & 7);
  if (m[0] != 0xFF || m[1] != want) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "does not match the data: interval %zu should follow marker RST%d (FF %02X), "
                  "found %02X %02X",
                  i, want - 0xD0, want, m[0], m[1]);
    index_error(buf);
  }
}

int choose_restart_interval(int mcus_per_row, int mcu_rows, int target, int min_interval) {
  int below = 0, above = 0;
  for (int d = std::max(1, min_interval); d <= mcus_per_row; ++d) {
    if (mcus_per_row % d != 0) continue;
    if (static_cast<uint64_t>(mcus_per_row) * mcu_rows / d > kMaxIntervals) continue;
    if (d <= target) below = d;
    else if (above == 0) above = d;
  }
  return below != 0 ? below : above;
}

std::vector<uint8_t> transcode_sequential(std::span<const uint8_t> jpeg, int target_interval,
                                          int min_interval, uint64_t max_pixels,
                                          int* interval_out, double restart_budget) {
  require_soi(jpeg.data(), jpeg.size());
  JpegDecompressor dec;
  CompressHolder out;
  jpeg_decompress_struct* s = dec.get();
  jpeg_compress_struct* d = &out.c;
  d->err = s->err;  // one error manager, one jump target
  int interval = 0;
  bool too_big = false;
  jpeg_guarded(dec.err(), "JPEG transcode", [&] {
    jpeg_create_compress(d);
    out.created = true;
    jpeg_mem_src(s, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
    jpeg_save_markers(s, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; ++m) jpeg_save_markers(s, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(s, TRUE);
    too_big = static_cast<uint64_t>(s->image_width) * s->image_height > max_pixels;
  });
  if (too_big) {
    throw Error(ErrorCode::kResourceExhausted,
                "JPEG is " + std::to_string(s->image_width) + "x" + std::to_string(s->image_height) +
                    " pixels, above the limit of " + std::to_string(max_pixels));
  }
  if (target_interval > 0 && s->num_components <= 4) {
    const int mw = s->num_components == 1 ? 8 : 8 * s->max_h_samp_factor;
    const int mh = s->num_components == 1 ? 8 : 8 * s->max_v_samp_factor;
    const int mcus_per_row = static_cast<int>((s->image_width + mw - 1) / mw);
    const int mcu_rows = static_cast<int>((s->image_height + mh - 1) / mh);
    if (restart_budget > 0) {
      // Fewer intervals where the image has few bytes per MCU (a low bit rate), where
      // each interval's fixed cost weighs more.
      const double affordable = std::max(1.0, restart_budget / kBytesPerRestartInterval);
      const double mcus = static_cast<double>(mcus_per_row) * mcu_rows;
      const int needed = static_cast<int>(std::min<double>(mcus_per_row, std::ceil(mcus / affordable)));
      min_interval = std::max(min_interval, needed);
      target_interval = std::max(target_interval, min_interval);
    }
    interval = choose_restart_interval(mcus_per_row, mcu_rows, target_interval, min_interval);
  }
  jpeg_guarded(dec.err(), "JPEG transcode", [&] {
    jvirt_barray_ptr* coefs = jpeg_read_coefficients(s);
    jpeg_copy_critical_parameters(s, d);
    d->optimize_coding = TRUE;
    d->arith_code = FALSE;
    d->restart_interval = static_cast<unsigned int>(interval);
    jpeg_mem_dest(d, &out.buf, &out.size);
    jpeg_write_coefficients(d, coefs);
    for (jpeg_saved_marker_ptr m = s->marker_list; m != nullptr; m = m->next) {
      if (d->write_JFIF_header && marker_is(m, JPEG_APP0, "JFIF", 5)) continue;
      if (d->write_Adobe_marker && marker_is(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
      // A source that already carries an index gets a fresh one (or none).
      if (marker_is(m, kRestartIndexMarker, kTag, sizeof(kTag))) continue;
      jpeg_write_marker(d, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(d);
    jpeg_finish_decompress(s);
  });
  dec.abort();
  if (interval_out != nullptr) *interval_out = interval;
  return std::vector<uint8_t>(out.buf, out.buf + out.size);
}

std::vector<uint8_t> insert_restart_index(std::span<const uint8_t> jpeg, int interval) {
  const HeaderWalk w = walk_header(jpeg);
  Geometry g;
  if (!w.reached_scan || !geometry_of(w, g) || w.dri != interval || w.scan_components != w.components) {
    throw Error(ErrorCode::kDataLoss, "fast-crop transcode: unexpected encoder output layout");
  }
  // Interval boundaries: in entropy-coded data an FF byte is either stuffed (FF 00) or a
  // marker, so RSTn markers are found exactly.
  std::vector<uint8_t> payload(kFixedBytes);
  const uint8_t* d = jpeg.data();
  const size_t n = jpeg.size();
  size_t pos = w.scan_offset, start = w.scan_offset;
  uint64_t count = 0;
  size_t scan_end = 0;
  while (scan_end == 0) {
    const void* ff = pos < n ? std::memchr(d + pos, 0xFF, n - pos) : nullptr;
    if (ff == nullptr || static_cast<const uint8_t*>(ff) + 1 >= d + n) {
      throw Error(ErrorCode::kDataLoss, "fast-crop transcode: scan without EOI");
    }
    pos = static_cast<size_t>(static_cast<const uint8_t*>(ff) - d);
    const int m = d[pos + 1];
    if (m >= 0xD0 && m <= 0xD7) {
      put_leb128(payload, static_cast<uint32_t>(pos + 2 - start));
      start = pos + 2;
      ++count;
      pos += 2;
    } else if (m == 0xD9) {
      put_leb128(payload, static_cast<uint32_t>(pos - start));
      ++count;
      scan_end = pos;
    } else {
      pos += 2;  // FF 00 (stuffing) or FF FF fill
    }
  }
  const uint64_t want = static_cast<uint64_t>(g.mcus_per_row) * g.mcu_rows / interval;
  if (count != want) {
    throw Error(ErrorCode::kDataLoss, "fast-crop transcode: " + std::to_string(count) +
                                          " restart intervals, expected " + std::to_string(want));
  }
  if (payload.size() + 4 > kMaxPayload) return {};
  std::memcpy(payload.data(), kTag, sizeof(kTag));
  payload[7] = kRestartIndexVersion;
  put_u16(payload.data() + 8, static_cast<uint16_t>(interval));
  put_u16(payload.data() + 10, static_cast<uint16_t>(g.mcus_per_row));
  put_u16(payload.data() + 12, static_cast<uint16_t>(g.mcu_rows));
  put_u32(payload.data() + 14, static_cast<uint32_t>(scan_end - w.scan_offset));
  put_u32(payload.data() + 18, static_cast<uint32_t>(count));
  const uint32_t crc = crc32c(payload.data(), payload.size());
  payload.resize(payload.size() + 4);
  put_u32(payload.data() + payload.size() - 4, crc);

  std::vector<uint8_t> result;
  result.reserve(n + payload.size() + 4);
  result.insert(result.end(), d, d + w.after_app0);
  const size_t len = payload.size() + 2;
  const uint8_t seg[4] = {0xFF, static_cast<uint8_t>(kRestartIndexMarker),
                          static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len & 0xFF)};
  result.insert(result.end(), seg, seg + 4);
  result.insert(result.end(), payload.begin(), payload.end());
  result.insert(result.end(), d + w.after_app0, d + n);
  return result;
}

}  // namespace stoker::internal

namespace stoker {

namespace internal {

std::vector<uint8_t> fast_crop_within_budget(std::span<const uint8_t> jpeg, const FastCropOptions& options,
                                             double max_growth) {
  if (options.target_interval < 1) {
    throw Error(ErrorCode::kInvalidArgument, "jpeg_for_fast_crop: target_interval must be >= 1");
  }
  // With a budget the interval is predicted from the bytes per MCU, and doubled once (a
  // second transcode) when the result still grows more than the budget. Growth that is
  // not the intervals' (a progressive input made sequential) is not chased further: it
  // costs a transcode each time and coarser intervals cannot remove it.
  const double budget = max_growth > 0 ? max_growth * static_cast<double>(jpeg.size()) : 0;
  int min_interval = 1;
  std::vector<uint8_t> best;
  for (int tries = 0;; ++tries) {
    int interval = 0;
    std::vector<uint8_t> coded =
        transcode_sequential(jpeg, options.target_interval, min_interval, options.max_pixels, &interval, budget);
    if (interval == 0) return best.empty() ? coded : best;  // no (coarser) interval fits
    std::vector<uint8_t> indexed = insert_restart_index(coded, interval);
    if (indexed.empty()) {  // an interval above 2 MiB: coarser intervals, smaller index
      min_interval = interval + 1;
      continue;
    }
    const bool over = budget > 0 && static_cast<double>(indexed.size()) > static_cast<double>(jpeg.size()) + budget;
    best = std::move(indexed);
    if (!over || tries >= 1) return best;
    min_interval = 2 * interval;
  }
}

}  // namespace internal

std::vector<uint8_t> jpeg_for_fast_crop(std::span<const uint8_t> jpeg, const FastCropOptions& options) {
  return internal::fast_crop_within_budget(jpeg, options, 0);
}

FastCropInfo check_fast_crop_index(std::span<const uint8_t> jpeg) {
  internal::RestartLayout l;
  FastCropInfo info;
  if (!internal::read_restart_layout(jpeg, l)) return info;
  for (size_t i = 1; i < l.intervals(); ++i) internal::check_restart_marker(jpeg, l, i);
  info.indexed = true;
  info.interval = l.interval;
  info.mcus_per_row = l.mcus_per_row;
  info.mcu_rows = l.mcu_rows;
  info.intervals = l.intervals();
  return info;
}

}  // namespace stoker
