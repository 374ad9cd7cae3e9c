// stoker's error model: exceptions with a small, stable set of codes.
//
// Every failure that a caller can act on is a stoker::Error carrying an ErrorCode
// (what kind of failure) and a message that names the file, record and reason.
// Errors raised on worker threads travel with the batch they belong to and are
// rethrown on the consumer's thread. A broken internal invariant is a bug and
// asserts instead. Thread-safety: Error objects are immutable values.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stoker {

/// What kind of failure an Error reports. Stable: tests and bindings match on it.
enum class ErrorCode {
  kInvalidArgument,    ///< the caller asked for something malformed (bad option, bad path)
  kIoError,            ///< the OS refused or failed an operation (open, read, write, fsync)
  kDataLoss,           ///< stored bytes are corrupt: checksum mismatch, truncated, bad magic
  kResourceExhausted,  ///< memlock, file descriptors, disk space, a size limit
  kUnavailable,        ///< a facility is missing: io_uring refused, no GPU, no CUDA
  kCancelled,          ///< the operation was stopped by shutdown or interruption
  kNotFound,           ///< a named file, shard or record does not exist
};

/// Short lower-case name of a code ("data_loss", "io_error", ...).
const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// Builds an Error from an errno value, keeping its name and number:
/// "<what>: <strerror> (errno N)". ENOENT maps to kNotFound, ENOSPC/EMFILE/ENFILE/
/// ENOMEM to kResourceExhausted, EIO and everything else to kIoError.
Error errno_error(std::string_view what, int errnum);

[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

}  // namespace stoker
