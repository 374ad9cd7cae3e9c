// The media index in front of a video or audio field's file (shards/FORMAT.md, "Media
// fields"): written by make_media_value, read back by parse_media_value, which trusts
// nothing it reads: sizes, the checksum, the field values and the keyframe order are
// checked before anything is used.
#include <algorithm>
#include <cstring>

#include "decode/media_index.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/media.h"
#include "util/bytes.h"

namespace stoker {
namespace {

constexpr uint8_t kMagic[4] = {'S', 'T', 'K', 'M'};
constexpr uint16_t kVersion = 1;
constexpr size_t kCodecBytes = 16;
constexpr size_t kFixedBytes = 108;  // everything before the keyframe table
constexpr size_t kKeyframeBytes = 24;

[[noreturn]] void bad(const std::string& why) { throw_error(ErrorCode::kDataLoss, "media index: " + why); }

int64_t get_i64(const uint8_t* p) { return static_cast<int64_t>(internal::get_u64(p)); }
int32_t get_i32(const uint8_t* p) { return static_cast<int32_t>(internal::get_u32(p)); }

}  // namespace

std::vector<uint8_t> make_media_value(const MediaInfo& info, std::span<const uint8_t> file) {
  using namespace internal;
  const size_t head = kFixedBytes + info.keyframes.size() * kKeyframeBytes;
  if (head > kMaxMediaIndexBytes)
    throw_error(ErrorCode::kInvalidArgument, "media index of " + std::to_string(info.keyframes.size()) +
                                                 " keyframes is larger than " + std::to_string(kMaxMediaIndexBytes) + " bytes");
  if (info.codec.size() >= kCodecBytes)
    throw_error(ErrorCode::kInvalidArgument, "codec name '" + info.codec + "' is too long for the media index");
  std::vector<uint8_t> out(head + file.size(), 0);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 4);
  put_u32(p + 4, static_cast<uint32_t>(head));
  put_u16(p + 12, kVersion);
  p[14] = static_cast<uint8_t>(info.kind);
  std::memcpy(p + 16, info.codec.data(), info.codec.size());
  put_u32(p + 32, static_cast<uint32_t>(info.stream));
  put_u32(p + 36, static_cast<uint32_t>(info.width));
  put_u32(p + 40, static_cast<uint32_t>(info.height));
  put_u32(p + 44, static_cast<uint32_t>(info.rotation));
  put_u32(p + 48, static_cast<uint32_t>(info.tb_num));
  put_u32(p + 52, static_cast<uint32_t>(info.tb_den));
  put_u64(p + 56, static_cast<uint64_t>(info.start_pts));
  put_u64(p + 64, static_cast<uint64_t>(info.duration));
  put_u64(p + 72, static_cast<uint64_t>(info.frames));
  put_u32(p + 80, static_cast<uint32_t>(info.sample_rate));
  put_u32(p + 84, static_cast<uint32_t>(info.channels));
  put_u64(p + 88, file.size());
  put_u32(p + 96, static_cast<uint32_t>(info.keyframes.size()));
  // 100..107 reserved, zero
  for (size_t k = 0; k < info.keyframes.size(); ++k) {
    uint8_t* e = p + kFixedBytes + k * kKeyframeBytes;
    put_u64(e, static_cast<uint64_t>(info.keyframes[k].pts));
    put_u64(e + 8, static_cast<uint64_t>(info.keyframes[k].pos));
    put_u64(e + 16, static_cast<uint64_t>(info.keyframes[k].frame));
  }
  put_u32(p + 8, crc32c(p + 12, head - 12));
  if (!file.empty()) std::memcpy(p + head, file.data(), file.size());
  return out;
}

namespace internal {

uint32_t media_index_bytes(std::span<const uint8_t> value) {
  if (value.size() < 8) return 8;
  if (std::memcmp(value.data(), kMagic, 4) != 0) bad("bad magic (not a media field value)");
  const uint32_t head = get_u32(value.data() + 4);
  if (head < kFixedBytes || head > kMaxMediaIndexBytes) bad("index size " + std::to_string(head) + " is out of range");
  return head;
}

MediaInfo parse_media_index(std::span<const uint8_t> value) {
  if (value.size() < kFixedBytes) bad("the value has " + std::to_string(value.size()) + " bytes, fewer than an index");
  const uint32_t head = media_index_bytes(value);
  if (head > value.size()) bad("index size " + std::to_string(head) + " is out of range");
  const uint8_t* p = value.data();
  if (get_u32(p + 8) != crc32c(p + 12, head - 12)) bad("checksum mismatch");
  if (get_u16(p + 12) != kVersion) bad("version " + std::to_string(get_u16(p + 12)) + " is not 1");
  const uint8_t kind = p[14];
  if (kind != static_cast<uint8_t>(MediaKind::kVideo) && kind != static_cast<uint8_t>(MediaKind::kAudio))
    bad("unknown media kind " + std::to_string(kind));
  const uint32_t nk = get_u32(p + 96);
  if (static_cast<uint64_t>(nk) * kKeyframeBytes != head - kFixedBytes)
    bad(std::to_string(nk) + " keyframes do not fill an index of " + std::to_string(head) + " bytes");
  MediaInfo m;
  m.kind = static_cast<MediaKind>(kind);
  const char* codec = reinterpret_cast<const char*>(p + 16);
  m.codec.assign(codec, strnlen(codec, kCodecBytes - 1));
  m.stream = get_i32(p + 32);
  m.width = get_i32(p + 36);
  m.height = get_i32(p + 40);
  m.rotation = get_i32(p + 44);
  m.tb_num = get_i32(p + 48);
  m.tb_den = get_i32(p + 52);
  m.start_pts = get_i64(p + 56);
  m.duration = get_i64(p + 64);
  m.frames = get_i64(p + 72);
  m.sample_rate = get_i32(p + 80);
  m.channels = get_i32(p + 84);
  if (m.tb_num <= 0 || m.tb_den <= 0) bad("time base must be positive");
  if (m.duration < 0 || m.frames < 0) bad("negative duration or frame count");
  // Bounds that keep start + duration and frame arithmetic far from overflow.
  constexpr int64_t kLimit = int64_t{1} << 60;
  if (m.start_pts <= -kLimit || m.start_pts >= kLimit || m.duration >= kLimit || m.frames >= kLimit)
    bad("timestamps out of range");
  if (m.kind == MediaKind::kVideo) {
    if (m.width < 1 || m.height < 1 || m.width > 65536 || m.height > 65536) bad("frame size out of range");
    if (m.rotation != 0 && m.rotation != 90 && m.rotation != 180 && m.rotation != 270)
      bad("rotation " + std::to_string(m.rotation) + " is not 0, 90, 180 or 270");
    if (nk == 0 || m.frames < 1) bad("a video index needs a frame and a keyframe");
  } else if (m.sample_rate < 1 || m.channels < 1 || m.channels > 64) {
    bad("audio sample rate or channel count out of range");
  }
  m.keyframes.resize(nk);
  for (uint32_t k = 0; k < nk; ++k) {
    const uint8_t* e = p + kFixedBytes + static_cast<size_t>(k) * kKeyframeBytes;
    MediaKeyframe& kf = m.keyframes[k];
    kf.pts = get_i64(e);
    kf.pos = get_i64(e + 8);
    kf.frame = get_i64(e + 16);
    // start_pts + duration stays within the bounds above; kf.pts - start_pts may not.
    if (kf.pts < m.start_pts || kf.pts > m.start_pts + m.duration) bad("keyframe " + std::to_string(k) + " lies outside the stream");
    if (kf.frame < 0 || kf.frame >= std::max<int64_t>(m.frames, 1)) bad("keyframe " + std::to_string(k) + " names a frame out of range");
    if (k > 0 && (kf.pts <= m.keyframes[k - 1].pts || kf.frame < m.keyframes[k - 1].frame))
      bad("keyframes out of order at " + std::to_string(k));
  }
  return m;
}

}  // namespace internal

std::span<const uint8_t> parse_media_value(std::span<const uint8_t> value, MediaInfo& info) {
  MediaInfo m = internal::parse_media_index(value);
  const uint32_t head = internal::get_u32(value.data() + 4);
  const uint64_t file = internal::get_u64(value.data() + 88);
  if (file != value.size() - head)
    bad("the file has " + std::to_string(value.size() - head) + " bytes, the index says " + std::to_string(file));
  info = std::move(m);
  return value.subspan(head);
}

}  // namespace stoker
