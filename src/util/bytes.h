// Little-endian encoding helpers and small file utilities shared by the format code.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "util/unique_fd.h"

namespace stoker::internal {

inline void put_u16(uint8_t* p, uint16_t v) { p[0] = v & 0xFF; p[1] = v >> 8; }
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
/// `v` as 8 little-endian bytes (two's complement): an int64 record field.
inline std::array<uint8_t, 8> le64(int64_t v) {
  std::array<uint8_t, 8> b;
  put_u64(b.data(), static_cast<uint64_t>(v));
  return b;
}
inline uint16_t get_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

/// A byte count for people: "512 B", "1.5 KiB", "3.2 GiB" (binary units, one decimal).
std::string format_bytes(double bytes);

/// pread until `size` bytes or EOF; retries EINTR. Returns bytes read; throws
/// errno_error naming `path` and the offset.
size_t pread_full(int fd, void* buf, size_t size, uint64_t offset, const std::string& path);
/// write until done; throws errno_error naming `path`.
void write_full(int fd, const void* buf, size_t size, const std::string& path);
/// fsync the directory holding `path` (so a rename is durable).
void fsync_parent_dir(const std::string& path);
/// Reads a whole (small) file, refusing files larger than `max_bytes` (kResourceExhausted).
std::string read_small_file(const std::string& path, size_t max_bytes);
/// Writes `data` to `path` atomically: `tmp` (default path.tmp), fsync, rename, fsync dir.
/// On failure `tmp` is removed and `path` is unchanged.
void write_file_atomic(const std::string& path, const std::string& data, const std::string& tmp = {});
/// The same with the bytes in parts, written one after another (never joined in memory).
void write_file_atomic(const std::string& path, std::initializer_list<std::span<const uint8_t>> parts,
                       const std::string& tmp = {});

}  // namespace stoker::internal
