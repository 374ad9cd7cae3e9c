// UniqueFd: the one RAII owner of a file descriptor used across stoker.
#pragma once

namespace stoker::internal {

/// An owned file descriptor: closes on destruction, move-only, -1 is the null state.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { int f = fd_; fd_ = -1; return f; }
  void reset(int fd = -1) noexcept;  // defined in util/bytes.cc

 private:
  int fd_ = -1;
};

}  // namespace stoker::internal
