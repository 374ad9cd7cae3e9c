#include "pack/pack_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cerrno>

#include "pack/ordered_pool.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/platform.h"

namespace stoker::internal {

int resolve_threads(int requested) noexcept {
  return requested > 0 ? requested : static_cast<int>(usable_cpus());
}

std::vector<uint8_t> read_whole_file(const std::string& path, uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw errno_error("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) throw_error(ErrorCode::kInvalidArgument, path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw_error(ErrorCode::kResourceExhausted, path + ": file of " + std::to_string(size) +
                                                   " bytes exceeds the limit of " + std::to_string(max_bytes));
  std::vector<uint8_t> data(static_cast<size_t>(size));
  size_t got = pread_full(fd.get(), data.data(), data.size(), 0, path);
  if (got != data.size())
    throw_error(ErrorCode::kIoError, path + ": file shrank while being read (" + std::to_string(got) + " of " +
                                         std::to_string(size) + " bytes)");
  return data;
}

void write_whole_file(const std::string& path, std::span<const uint8_t> data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) throw errno_error("create " + path, errno);
  write_full(fd.get(), data.data(), data.size(), path);
}

namespace {

struct TjDecompressor {
  tjhandle h = tjInitDecompress();
  ~TjDecompressor() {
    if (h) tjDestroy(h);
  }
};

}  // namespace

std::string check_jpeg_header(std::span<const uint8_t> b, JpegHeader* info) {
  if (b.size() < 4 || b[0] != 0xFF || b[1] != 0xD8 || b[2] != 0xFF) return "not a JPEG (no SOI marker)";
  // Walk the marker segments to the first start-of-frame: it says baseline or
  // progressive, and a broken segment chain means a broken file.
  size_t pos = 2;
  bool progressive = false, found_sof = false;
  while (!found_sof) {
    if (pos >= b.size() || b[pos] != 0xFF) return "corrupt JPEG marker structure at byte " + std::to_string(pos);
    while (pos < b.size() && b[pos] == 0xFF) ++pos;
    if (pos >= b.size()) return "truncated JPEG header";
    const uint8_t m = b[pos++];
    if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0x01) {
      if (m == 0xD9) return "JPEG ends before its frame header";
      continue;
    }
    if (pos + 2 > b.size()) return "truncated JPEG header";
    const size_t len = (static_cast<size_t>(b[pos]) << 8) | b[pos + 1];
    if (len < 2 || pos + len > b.size()) return "truncated JPEG header segment at byte " + std::to_string(pos);
    if (m == 0xDA) return "JPEG scan starts before its frame header";
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      found_sof = true;
      progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE;
    }
    pos += len;
  }
  thread_local TjDecompressor tj;
  if (!tj.h) return "cannot create a TurboJPEG handle";
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(tj.h, b.data(), static_cast<unsigned long>(b.size()), &w, &h, &subsamp, &cs) != 0)
    return std::string("bad JPEG header: ") + tjGetErrorStr2(tj.h);
  if (w <= 0 || h <= 0) return "JPEG with empty dimensions";
  if (info) {
    info->width = w;
    info->height = h;
    info->progressive = progressive;
  }
  return {};
}

void fill_summary(PackSummary& s, const Manifest& m, const DatasetWriter& w) {
  s.records = w.records();
  s.shards = m.shards.size();
  s.bytes = m.total_bytes();
  s.raw_bytes = w.raw_bytes();
  s.stored_bytes = w.stored_bytes();
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace stoker::internal
