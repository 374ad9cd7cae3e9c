// A streaming reader of tar archives (for `stoker pack wds`), on libarchive.
//
// libarchive reads every tar dialect the WebDataset tools write (ustar, GNU long
// names, pax headers) through any compression filter it knows: .tar, .tar.gz, .tgz,
// .tar.zst, .tar.xz, .tar.bz2 — detected from the bytes, not the file name. On top of
// it this reader keeps stoker's rules for untrusted input: member names are validated
// (an absolute name or one with a '..' component is kDataLoss: names are never used as
// paths, but such a tar is hostile or broken), member sizes are bounded before any
// allocation, and only regular files are returned (directories, links, devices are
// skipped and counted).
//
// The archive is consumed front to back; nothing seeks, so the reader never holds more
// than one member. Errors are stoker::Error naming the archive, the member (when known)
// and libarchive's reason: kDataLoss for a malformed or truncated archive,
// kResourceExhausted for an oversized member, kNotFound/kIoError for OS failures.
//
// Threading: a TarReader is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

struct archive;

namespace stoker::internal {

/// One regular file of the archive.
struct TarMember {
  std::string name;           ///< validated: relative, no '..' components, not empty
  uint64_t size = 0;          ///< its full size
  std::vector<uint8_t> data;  ///< its bytes (only the first `prefix` of them when next() was given a limit)
};

struct TarReaderOptions {
  /// Members larger than this are kResourceExhausted (checked before allocating).
  uint64_t max_member_size = 1ull << 30;
};

class TarReader {
 public:
  /// Opens the archive at `path` (any compression libarchive detects). `where` names it
  /// in errors (usually the path). Throws kNotFound / kIoError / kDataLoss.
  TarReader(const std::string& path, std::string where, TarReaderOptions options = {});
  /// Reads an archive held in memory (tests, fuzzing); `bytes` must outlive the reader.
  TarReader(std::span<const uint8_t> bytes, std::string where, TarReaderOptions options = {});
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  /// Moves to the next regular file and fills `out.name` and `out.size` (out.data is
  /// cleared). Returns false at the end of the archive. Throws on a malformed or
  /// truncated archive, an oversized member or a bad name.
  bool next_header(TarMember& out);
  /// Reads the first min(size, limit) bytes of the member next_header() just returned
  /// into `out.data`; what is not read is skipped (cheaply, for an uncompressed file).
  void read_data(TarMember& out, uint64_t limit = std::numeric_limits<uint64_t>::max());
  /// next_header() then read_data(): the next regular file, whole.
  bool next(TarMember& out) { return next_header(out) && (read_data(out), true); }

  /// Bytes consumed from the (compressed) source so far.
  uint64_t offset() const noexcept;
  /// Non-regular members skipped so far (directories, links, ...).
  uint64_t skipped() const noexcept { return skipped_; }

 private:
  void open_common();
  [[noreturn]] void fail(const std::string& member, const std::string& what) const;

  struct archive* a_ = nullptr;
  std::string where_;
  TarReaderOptions options_;
  uint64_t skipped_ = 0;
  bool done_ = false;
};

/// Validates a member name (relative, no '..' component, no NUL, not empty). Throws
/// kDataLoss naming `where`. Exposed for tests.
void check_member_name(const std::string& name, const std::string& where);

}  // namespace stoker::internal
