// A streaming reader of tar archives (for `stoker pack wds`).
//
// Reads ustar and GNU tar as written by GNU tar, bsdtar and Python's tarfile: plain
// ustar headers (name + prefix), GNU long names (typeflag 'L') and pax extended
// headers (typeflag 'x': `path` and `size` keys). Every header checksum is checked,
// every size is bounded before any allocation, and member names are validated: an
// absolute name or one with a '..' component is kDataLoss (names are never used as
// file system paths, but such a tar is hostile or broken). Only regular files are
// returned; directories, links, devices and the like are skipped.
//
// The archive is consumed front to back from a ByteSource, so a pipe works; nothing
// seeks. Errors are stoker::Error (kDataLoss for malformed archives, kIoError for
// read failures), naming the archive, the member and the byte offset.
//
// Threading: a TarReader and its ByteSource are used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/bytes.h"

namespace stoker::internal {

/// A forward-only byte stream.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Reads up to `size` bytes; returns 0 only at end of stream. Throws on error.
  virtual size_t read(void* buf, size_t size) = 0;
  /// Bytes left, when known (files, memory); -1 for pipes. Lets the reader reject a
  /// size field larger than what is left before allocating for it.
  virtual int64_t remaining() const { return -1; }
};

/// Bytes in memory (the fuzz target and tests). Does not own them.
class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t read(void* buf, size_t size) override;
  int64_t remaining() const override { return static_cast<int64_t>(bytes_.size() - pos_); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

/// A file opened read-only; read(2) in order, EINTR retried.
class FileSource final : public ByteSource {
 public:
  /// Throws errno_error (kNotFound, kIoError) naming `path`.
  explicit FileSource(const std::string& path);
  size_t read(void* buf, size_t size) override;
  /// Regular files: st_size minus bytes read so far; -1 for pipes and devices.
  int64_t remaining() const override;
  uint64_t size() const noexcept { return size_; }  ///< at open time (st_size)

 private:
  std::string path_;
  UniqueFd fd_;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
  bool regular_ = false;
};

/// One regular file of the archive.
struct TarMember {
  std::string name;           ///< validated: relative, no '..' components, not empty
  uint64_t header_offset = 0; ///< offset of its (first) header block in the archive
  std::vector<uint8_t> data;  ///< its bytes
};

struct TarReaderOptions {
  /// Members larger than this are kResourceExhausted (checked before allocating).
  uint64_t max_member_size = 1ull << 30;
  /// Largest GNU long name / pax header accepted (kDataLoss beyond).
  uint64_t max_meta_size = 1ull << 20;
};

class TarReader {
 public:
  /// `where` names the archive in errors (usually its path). `source` must outlive
  /// the reader.
  TarReader(ByteSource& source, std::string where, TarReaderOptions options = {});

  /// Reads the next regular file into `out`. Returns false at the end of the archive
  /// (two zero blocks, or end of stream on a header boundary). Throws kDataLoss on a
  /// bad checksum, a truncated member, a bad size field or a bad name.
  bool next(TarMember& out);

  /// Bytes consumed from the source so far.
  uint64_t offset() const noexcept { return offset_; }
  /// Non-regular members skipped so far (directories, links, ...).
  uint64_t skipped() const noexcept { return skipped_; }

 private:
  bool read_block(uint8_t* block);             // false at clean EOF before any byte
  void read_exact(void* buf, size_t size, const std::string& what);
  void skip(uint64_t size, const std::string& what);
  void check_available(uint64_t size, const std::string& what);
  [[noreturn]] void fail(const std::string& what) const;

  ByteSource& source_;
  std::string where_;
  TarReaderOptions options_;
  uint64_t offset_ = 0;
  uint64_t skipped_ = 0;
  bool done_ = false;
};

/// Validates a member name (relative, no '..' component, no NUL). Throws kDataLoss
/// naming `where`. Exposed for tests.
void check_member_name(const std::string& name, const std::string& where);

/// Parses a numeric tar header field: octal (NUL/space terminated) or GNU base-256.
/// Throws kDataLoss naming `what` on garbage or overflow past 2^63. Exposed for tests.
uint64_t parse_tar_number(const uint8_t* field, size_t size, const std::string& what);

}  // namespace stoker::internal
