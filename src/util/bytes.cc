#include "util/bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "stoker/error.h"

namespace stoker::internal {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

size_t pread_full(int fd, void* buf, size_t size, uint64_t offset, const std::string& path) {
  size_t done = 0;
  auto* p = static_cast<uint8_t*>(buf);
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw errno_error("read " + path + " at offset " + std::to_string(offset + done), errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

void write_full(int fd, const void* buf, size_t size, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (size) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw errno_error("write " + path, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void fsync_parent_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  UniqueFd dfd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) throw errno_error("open directory " + parent.string(), errno);
  if (::fsync(dfd.get()) != 0 && errno != EINVAL)
    throw errno_error("fsync directory " + parent.string(), errno);
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + path, errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) throw errno_error("stat " + path, errno);
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw_error(ErrorCode::kResourceExhausted,
                path + ": " + std::to_string(st.st_size) + " bytes, more than the limit of " +
                    std::to_string(max_bytes));
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t n = pread_full(fd.get(), data.data(), data.size(), 0, path);
  data.resize(n);
  return data;
}

void write_file_atomic(const std::string& path, const std::string& data, const std::string& tmp_name) {
  write_file_atomic(path, {{reinterpret_cast<const uint8_t*>(data.data()), data.size()}}, tmp_name);
}

void write_file_atomic(const std::string& path, std::initializer_list<std::span<const uint8_t>> parts,
                       const std::string& tmp_name) {
  const std::string tmp = tmp_name.empty() ? path + ".tmp" : tmp_name;
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw errno_error("create " + tmp, errno);
    try {
      for (const auto& part : parts) write_full(fd.get(), part.data(), part.size(), tmp);
      if (::fsync(fd.get()) != 0) throw errno_error("fsync " + tmp, errno);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw errno_error("rename " + tmp + " to " + path, e);
  }
  fsync_parent_dir(path);
}

}  // namespace stoker::internal
