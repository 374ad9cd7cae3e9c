#include "decode/exif_orientation.h"

#include <turbojpeg.h>

#include <cstring>
#include <memory>
#include <string>

#include "stoker/error.h"

namespace stoker::internal {

namespace {

uint32_t be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }

// A TIFF structure's integers in its declared byte order.
struct Tiff {
  const uint8_t* base;
  size_t size;
  bool little;
  uint32_t u16(size_t at) const {
    const uint8_t* p = base + at;
    return little ? (uint32_t{p[1]} << 8) | p[0] : (uint32_t{p[0]} << 8) | p[1];
  }
  uint32_t u32(size_t at) const {
    const uint8_t* p = base + at;
    return little ? (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0]
                  : (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  }
};

// The Orientation entry of IFD0 in an EXIF payload (after "Exif\0\0"): its value and
// the value's offset in the payload, or 0.
int ifd0_orientation(const Tiff& t, size_t* value_at) {
  if (t.size < 8 || t.u16(2) != 42) return 0;
  const uint64_t ifd = t.u32(4);
  if (ifd + 2 > t.size) return 0;
  const uint32_t entries = t.u16(static_cast<size_t>(ifd));
  for (uint32_t k = 0; k < entries; ++k) {
    const uint64_t e = ifd + 2 + 12ull * k;
    if (e + 12 > t.size) return 0;
    const size_t at = static_cast<size_t>(e);
    if (t.u16(at) != 0x0112) continue;
    // SHORT (3), one value, held in the entry itself.
    if (t.u16(at + 2) != 3 || t.u32(at + 4) != 1) return 0;
    const uint32_t v = t.u16(at + 8);
    if (v < 1 || v > 8) return 0;
    *value_at = at + 8;
    return static_cast<int>(v);
  }
  return 0;
}

struct TjFree {
  void operator()(unsigned char* p) const noexcept { tjFree(p); }
};
struct TjDestroy {
  void operator()(void* h) const noexcept { tjDestroy(h); }
};

// Orientation 2..8 -> the TurboJPEG operation that undoes it.
constexpr int kUpright[9] = {TJXOP_NONE,      TJXOP_NONE,  TJXOP_HFLIP, TJXOP_ROT180,   TJXOP_VFLIP,
                             TJXOP_TRANSPOSE, TJXOP_ROT90, TJXOP_TRANSVERSE, TJXOP_ROT270};

// The orientation, its value's offset in `j` and the TIFF byte order.
int find_orientation(std::span<const uint8_t> j, size_t* value_offset, bool* little) {
  if (j.size() < 4 || j[0] != 0xFF || j[1] != 0xD8) return 0;
  size_t pos = 2;
  while (pos + 4 <= j.size()) {
    if (j[pos] != 0xFF) return 0;
    const uint8_t marker = j[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // no length field
      pos += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 0;  // the scan starts: no EXIF before it
    const size_t len = be16(&j[pos + 2]);
    if (len < 2 || pos + 2 + len > j.size()) return 0;
    const size_t body = pos + 4, body_len = len - 2;
    if (marker == 0xE1 && body_len >= 6 + 8 && std::memcmp(&j[body], "Exif\0\0", 6) == 0) {
      const uint8_t* tiff = &j[body + 6];
      if (!((tiff[0] == 'I' && tiff[1] == 'I') || (tiff[0] == 'M' && tiff[1] == 'M'))) return 0;
      size_t at = 0;
      *little = tiff[0] == 'I';
      const int v = ifd0_orientation(Tiff{tiff, body_len - 6, *little}, &at);
      *value_offset = body + 6 + at;
      return v;
    }
    pos += 2 + len;
  }
  return 0;
}

}  // namespace

int jpeg_exif_orientation(std::span<const uint8_t> jpeg, size_t* value_offset) {
  size_t at = 0;
  bool little = false;
  const int v = find_orientation(jpeg, &at, &little);
  if (v && value_offset) *value_offset = at;
  return v;
}

ExifTranspose jpeg_exif_transpose(std::span<const uint8_t> jpeg) {
  ExifTranspose out;
  out.orientation = jpeg_exif_orientation(jpeg);
  if (out.orientation <= 1) return out;
  std::unique_ptr<void, TjDestroy> handle(tjInitTransform());
  if (!handle) throw_error(ErrorCode::kResourceExhausted, "exif transpose: cannot create a TurboJPEG transform handle");
  // Exact where the image's size allows, else trimmed (the partial MCU at an edge that
  // moves cannot be turned losslessly). Markers are copied (ICC profile, EXIF).
  for (const int options : {TJXOPT_PERFECT, TJXOPT_TRIM}) {
    tjtransform xf{};
    xf.op = kUpright[out.orientation];
    xf.options = options;
    unsigned char* dst = nullptr;
    unsigned long dst_size = 0;
    const int rc = tjTransform(handle.get(), jpeg.data(), jpeg.size(), 1, &dst, &dst_size, &xf, 0);
    std::unique_ptr<unsigned char, TjFree> owned(dst);
    if (rc != 0) {
      if (options == TJXOPT_PERFECT) continue;
      throw_error(ErrorCode::kDataLoss, std::string("exif transpose: ") + tjGetErrorStr2(handle.get()));
    }
    out.jpeg.assign(dst, dst + dst_size);
    out.trimmed = options == TJXOPT_TRIM;
    break;
  }
  // The copied EXIF still says how to turn the pixels, which are now upright.
  size_t at = 0;
  bool little = false;
  if (find_orientation(out.jpeg, &at, &little)) {
    out.jpeg[at] = little ? 1 : 0;
    out.jpeg[at + 1] = little ? 0 : 1;
  }
  return out;
}

}  // namespace stoker::internal
