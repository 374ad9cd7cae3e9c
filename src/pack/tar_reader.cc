#include "pack/tar_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "stoker/error.h"
#include "util/parse.h"

namespace stoker::internal {

namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxTarNumber = 1ull << 63;

// ustar header field offsets.
constexpr size_t kNameOff = 0, kNameLen = 100;
constexpr size_t kSizeOff = 124, kSizeLen = 12;
constexpr size_t kChksumOff = 148, kChksumLen = 8;
constexpr size_t kTypeOff = 156;
constexpr size_t kMagicOff = 257;
constexpr size_t kPrefixOff = 345, kPrefixLen = 155;

std::string field_string(const uint8_t* p, size_t max) {
  size_t n = 0;
  while (n < max && p[n] != 0) ++n;
  return std::string(reinterpret_cast<const char*>(p), n);
}

uint64_t padded(uint64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

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
    if (out.size() > 300) {
      out += "...";
      break;
    }
  }
  return out + "'";
}

}  // namespace

size_t MemorySource::read(void* buf, size_t size) {
  size_t n = std::min(size, bytes_.size() - pos_);
  if (n) std::memcpy(buf, bytes_.data() + pos_, n);
  pos_ += n;
  return n;
}

FileSource::FileSource(const std::string& path) : path_(path) {
  fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_) throw errno_error("open " + path, errno);
  struct stat st;
  if (::fstat(fd_.get(), &st) != 0) throw errno_error("stat " + path, errno);
  if (S_ISDIR(st.st_mode)) throw_error(ErrorCode::kInvalidArgument, path + " is a directory, not a tar file");
  size_ = static_cast<uint64_t>(st.st_size);
  regular_ = S_ISREG(st.st_mode);
  ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
}

size_t FileSource::read(void* buf, size_t size) {
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, size);
    if (n >= 0) {
      pos_ += static_cast<uint64_t>(n);
      return static_cast<size_t>(n);
    }
    if (errno != EINTR) throw errno_error("read " + path_, errno);
  }
}

int64_t FileSource::remaining() const {
  if (!regular_) return -1;
  return pos_ >= size_ ? 0 : static_cast<int64_t>(size_ - pos_);
}

uint64_t parse_tar_number(const uint8_t* field, size_t size, const std::string& what) {
  if (size == 0) return 0;
  if (field[0] & 0x80) {  // GNU base-256, big-endian; 0xFF marks a negative number
    if (field[0] != 0x80) throw_error(ErrorCode::kDataLoss, what + ": negative base-256 number");
    uint64_t v = 0;
    for (size_t i = 1; i < size; ++i) {
      if (v >> 55) throw_error(ErrorCode::kDataLoss, what + ": base-256 number overflows");
      v = (v << 8) | field[i];
    }
    if (v >= kMaxTarNumber) throw_error(ErrorCode::kDataLoss, what + ": base-256 number overflows");
    return v;
  }
  size_t i = 0;
  while (i < size && field[i] == ' ') ++i;
  uint64_t v = 0;
  bool digits = false;
  for (; i < size && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) throw_error(ErrorCode::kDataLoss, what + ": octal number overflows");
    v = (v << 3) | static_cast<uint64_t>(field[i] - '0');
    digits = true;
  }
  for (; i < size; ++i)
    if (field[i] != 0 && field[i] != ' ')
      throw_error(ErrorCode::kDataLoss, what + ": bad character in octal number");
  (void)digits;
  if (v >= kMaxTarNumber) throw_error(ErrorCode::kDataLoss, what + ": octal number overflows");
  return v;
}

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

TarReader::TarReader(ByteSource& source, std::string where, TarReaderOptions options)
    : source_(source), where_(std::move(where)), options_(options) {}

void TarReader::fail(const std::string& what) const {
  throw_error(ErrorCode::kDataLoss, where_ + ": " + what);
}

void TarReader::read_exact(void* buf, size_t size, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < size) {
    size_t n = source_.read(p + got, size - got);
    if (n == 0)
      fail("truncated " + what + " at byte " + std::to_string(offset_ + got) + " (wanted " +
           std::to_string(size) + " bytes, got " + std::to_string(got) + ")");
    got += n;
  }
  offset_ += size;
}

void TarReader::skip(uint64_t size, const std::string& what) {
  uint8_t scratch[16384];
  while (size) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof scratch));
    read_exact(scratch, n, what);
    size -= n;
  }
}

void TarReader::check_available(uint64_t size, const std::string& what) {
  const int64_t left = source_.remaining();
  if (left >= 0 && size > static_cast<uint64_t>(left))
    fail("truncated " + what + ": it claims " + std::to_string(size) + " bytes but only " + std::to_string(left) +
         " remain");
}

bool TarReader::read_block(uint8_t* block) {
  size_t got = 0;
  while (got < kBlock) {
    size_t n = source_.read(block + got, kBlock - got);
    if (n == 0) {
      if (got == 0) return false;
      fail("truncated header at byte " + std::to_string(offset_ + got));
    }
    got += n;
  }
  offset_ += kBlock;
  return true;
}

bool TarReader::next(TarMember& out) {
  if (done_) return false;
  std::optional<std::string> long_name, pax_path;
  bool has_pax_size = false;  // (not std::optional: GCC 12 warns falsely about it)
  uint64_t pax_size = 0;
  uint8_t h[kBlock];
  for (;;) {
    const uint64_t header_offset = offset_;
    if (!read_block(h)) {
      if (long_name || pax_path || has_pax_size)
        fail("archive ends after an extended header, before its member");
      done_ = true;
      return false;
    }
    const std::string at = "header at byte " + std::to_string(header_offset);
    if (all_zero(h, kBlock)) {  // end-of-archive marker
      if (long_name || pax_path || has_pax_size) fail("end of archive right after an extended header");
      done_ = true;
      return false;
    }
    // The checksum covers the header with its own field read as spaces; historic tars
    // summed signed chars, so both sums are accepted.
    uint64_t usum = 0;
    int64_t ssum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      const bool in_field = i >= kChksumOff && i < kChksumOff + kChksumLen;
      const uint8_t b = in_field ? ' ' : h[i];
      usum += b;
      ssum += static_cast<int8_t>(b);
    }
    const uint64_t want = parse_tar_number(h + kChksumOff, kChksumLen, where_ + ": checksum field of " + at);
    if (want != usum && static_cast<int64_t>(want) != ssum)
      fail("bad header checksum in " + at + " (stored " + std::to_string(want) + ", computed " +
           std::to_string(usum) + "): not a tar file or corrupt");

    const char type = static_cast<char>(h[kTypeOff]);
    uint64_t size = parse_tar_number(h + kSizeOff, kSizeLen, where_ + ": size field of " + at);
    if (has_pax_size && type != 'x' && type != 'g' && type != 'L' && type != 'K') size = pax_size;

    if (type == 'L' || type == 'x' || type == 'g' || type == 'K') {
      if (size > options_.max_meta_size)
        fail("extended header of " + std::to_string(size) + " bytes in " + at + " exceeds the limit of " +
             std::to_string(options_.max_meta_size));
      check_available(size, "extended header data in " + at);
      std::string meta(static_cast<size_t>(size), '\0');
      read_exact(meta.data(), meta.size(), "extended header data in " + at);
      skip(padded(size) - size, "padding in " + at);
      if (type == 'L') {
        while (!meta.empty() && meta.back() == '\0') meta.pop_back();
        long_name = std::move(meta);
      } else if (type == 'x') {
        // Records: "<len> <key>=<value>\n", len counting the whole record.
        size_t pos = 0;
        while (pos < meta.size()) {
          size_t sp = meta.find(' ', pos);
          if (sp == std::string::npos || sp == pos || sp - pos > 20) fail("bad pax record length in " + at);
          const auto parsed_len = parse_decimal<uint64_t>(std::string_view(meta).substr(pos, sp - pos));
          if (!parsed_len) fail("bad pax record length in " + at);
          const uint64_t len = *parsed_len;
          if (len < sp - pos + 3 || len > meta.size() - pos || meta[pos + len - 1] != '\n')
            fail("bad pax record in " + at);
          std::string rec = meta.substr(sp + 1, pos + len - 1 - (sp + 1));
          size_t eq = rec.find('=');
          if (eq == std::string::npos || eq == 0) fail("pax record without key in " + at);
          std::string key = rec.substr(0, eq), value = rec.substr(eq + 1);
          if (key == "path") {
            pax_path = value;
          } else if (key == "size") {
            const auto v = value.size() > 19 ? std::nullopt : parse_decimal<uint64_t>(value);
            if (!v) fail("bad pax size in " + at);
            pax_size = *v;
            has_pax_size = true;
          }
          pos += len;
        }
      }
      continue;
    }

    std::string name;
    if (pax_path) {
      name = *pax_path;
    } else if (long_name) {
      name = *long_name;
    } else {
      name = field_string(h + kNameOff, kNameLen);
      const bool posix = std::memcmp(h + kMagicOff, "ustar\0", 6) == 0;
      if (posix) {
        std::string prefix = field_string(h + kPrefixOff, kPrefixLen);
        if (!prefix.empty()) name = prefix + "/" + name;
      }
    }
    while (name.size() >= 2 && name[0] == '.' && name[1] == '/') name.erase(0, 2);
    const bool regular = type == '0' || type == '\0' || type == '7';
    // Old tars mark directories as regular files whose name ends in '/'.
    const bool dir_like = !name.empty() && name.back() == '/';
    if (regular || !name.empty()) check_member_name(name, where_ + " " + at);

    if (regular && !dir_like) {
      if (size > options_.max_member_size)
        throw_error(ErrorCode::kResourceExhausted,
                    where_ + ": member " + quoted(name) + " (" + at + ") has " + std::to_string(size) +
                        " bytes, more than the limit of " + std::to_string(options_.max_member_size));
      check_available(size, "member " + quoted(name) + " (" + at + ")");
      out.name = std::move(name);
      out.header_offset = header_offset;
      out.data.resize(static_cast<size_t>(size));
      read_exact(out.data.data(), out.data.size(), "member " + quoted(out.name) + " (" + at + ")");
      skip(padded(size) - size, "padding of member " + quoted(out.name));
      return true;
    }
    // Not a regular file. Links, directories, devices and FIFOs carry no data (tar
    // implementations ignore their size field); unknown types are skipped by size.
    ++skipped_;
    const bool no_data = type == '1' || type == '2' || type == '3' || type == '4' || type == '5' || type == '6';
    if (!no_data && !(regular && dir_like)) skip(padded(size), "data of skipped member " + quoted(name));
    long_name.reset();
    pax_path.reset();
    has_pax_size = false;
  }
}

}  // namespace stoker::internal
