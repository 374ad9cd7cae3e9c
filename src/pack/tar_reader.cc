#include "pack/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "stoker/error.h"

namespace stoker::internal {

namespace {

// libarchive's read block for files: large enough that a compressed tar is fed to the
// decompressor in few calls.
constexpr size_t kReadBlock = 256 << 10;

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

void check_member_name(const std::string& name, const std::string& where) {
  if (name.empty()) throw_error(ErrorCode::kDataLoss, where + ": member with an empty name");
  if (name.find('\0') != std::string::npos)
    throw_error(ErrorCode::kDataLoss, where + ": member name " + quoted(name) + " contains a NUL byte");
  if (name[0] == '/')
    throw_error(ErrorCode::kDataLoss, where + ": member name " + quoted(name) + " is an absolute path");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0)
      throw_error(ErrorCode::kDataLoss, where + ": member name " + quoted(name) + " has a '..' component");
    start = end + 1;
  }
}

void TarReader::open_common() {
  a_ = archive_read_new();
  if (!a_) throw_error(ErrorCode::kResourceExhausted, where_ + ": cannot allocate a libarchive reader");
  archive_read_support_filter_all(a_);
  archive_read_support_format_tar(a_);
  // An empty file is an empty archive (as GNU tar treats it), not a format error.
  archive_read_support_format_empty(a_);
}

TarReader::TarReader(const std::string& path, std::string where, TarReaderOptions options)
    : where_(std::move(where)), options_(options) {
  // Open the file ourselves first: libarchive's message for a missing file does not
  // carry errno's class, and callers tell kNotFound from the rest.
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fclose(f);
  } else {
    throw errno_error("open " + path, errno);
  }
  open_common();
  if (archive_read_open_filename(a_, path.c_str(), kReadBlock) != ARCHIVE_OK) {
    std::string why = archive_error_string(a_) ? archive_error_string(a_) : "cannot open";
    archive_read_free(a_);
    a_ = nullptr;
    throw_error(ErrorCode::kDataLoss, where_ + ": not a readable tar archive: " + why);
  }
}

TarReader::TarReader(std::span<const uint8_t> bytes, std::string where, TarReaderOptions options)
    : where_(std::move(where)), options_(options) {
  open_common();
  if (archive_read_open_memory(a_, bytes.data(), bytes.size()) != ARCHIVE_OK) {
    std::string why = archive_error_string(a_) ? archive_error_string(a_) : "cannot open";
    archive_read_free(a_);
    a_ = nullptr;
    throw_error(ErrorCode::kDataLoss, where_ + ": not a readable tar archive: " + why);
  }
}

TarReader::~TarReader() {
  if (a_) archive_read_free(a_);
}

void TarReader::fail(const std::string& member, const std::string& what) const {
  std::string msg = where_;
  if (!member.empty()) msg += ": member " + quoted(member);
  msg += ": " + what;
  if (const char* e = archive_error_string(a_); e && *e) msg += std::string(" (") + e + ")";
  msg += " at byte " + std::to_string(offset());
  throw_error(ErrorCode::kDataLoss, msg);
}

uint64_t TarReader::offset() const noexcept {
  const la_int64_t n = a_ ? archive_filter_bytes(a_, -1) : 0;
  return n > 0 ? static_cast<uint64_t>(n) : 0;
}

bool TarReader::next_header(TarMember& out) {
  out.data.clear();
  if (done_) return false;
  for (;;) {
    struct archive_entry* e = nullptr;
    const int r = archive_read_next_header(a_, &e);
    if (r == ARCHIVE_EOF) {
      done_ = true;
      return false;
    }
    // ARCHIVE_WARN is a header libarchive could read with a caveat (e.g. a charset
    // conversion): the entry is usable. Anything worse is a broken archive.
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      done_ = true;
      fail("", "malformed tar header: the archive is truncated or damaged here");
    }
    const char* p = archive_entry_pathname(e);
    std::string name = p ? p : "";
    if (archive_entry_filetype(e) != AE_IFREG) {
      ++skipped_;
      continue;
    }
    while (name.rfind("./", 0) == 0) name.erase(0, 2);
    check_member_name(name, where_);
    if (!archive_entry_size_is_set(e)) fail(name, "member without a size");
    const la_int64_t size = archive_entry_size(e);
    if (size < 0) fail(name, "negative member size");
    if (static_cast<uint64_t>(size) > options_.max_member_size)
      throw_error(ErrorCode::kResourceExhausted, where_ + ": member " + quoted(name) + " of " + std::to_string(size) +
                                                     " bytes exceeds the limit of " +
                                                     std::to_string(options_.max_member_size));
    out.name = std::move(name);
    out.size = static_cast<uint64_t>(size);
    return true;
  }
}

void TarReader::read_data(TarMember& out, uint64_t limit) {
  const uint64_t want = std::min<uint64_t>(out.size, limit);
  // The buffer grows with the bytes that actually arrive (doubling from 1 MiB), so a
  // size field larger than the archive cannot make a giant allocation.
  out.data.clear();
  uint64_t got = 0;
  while (got < want) {
    if (got == out.data.size())
      out.data.resize(static_cast<size_t>(std::min<uint64_t>(want, std::max<uint64_t>(got * 2, 1 << 20))));
    const la_ssize_t n = archive_read_data(a_, out.data.data() + got, static_cast<size_t>(out.data.size() - got));
    if (n < 0) {
      done_ = true;
      fail(out.name, "cannot read member data (truncated or corrupt archive)");
    }
    if (n == 0) {
      done_ = true;
      fail(out.name, "truncated member: " + std::to_string(got) + " of " + std::to_string(want) + " bytes");
    }
    got += static_cast<uint64_t>(n);
  }
  out.data.resize(static_cast<size_t>(got));
  // The rest of a partly read member is skipped by the next archive_read_next_header.
}

}  // namespace stoker::internal
