#include "stoker/error.h"

#include <cstring>

namespace stoker {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kIoError: return "io_error";
    case ErrorCode::kDataLoss: return "data_loss";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kNotFound: return "not_found";
  }
  return "unknown";
}

Error errno_error(std::string_view what, int errnum) {
  ErrorCode code = ErrorCode::kIoError;
  switch (errnum) {
    case ENOENT: code = ErrorCode::kNotFound; break;
    case ENOSPC: case EDQUOT: case EMFILE: case ENFILE: case ENOMEM:
      code = ErrorCode::kResourceExhausted; break;
    case EINVAL: code = ErrorCode::kInvalidArgument; break;
    case ECANCELED: code = ErrorCode::kCancelled; break;
    default: break;
  }
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(errnum);
  msg += " (errno ";
  msg += std::to_string(errnum);
  msg += ")";
  return Error(code, msg);
}

}  // namespace stoker
