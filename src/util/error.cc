#include "stoker/error.h"

#include <cstring>

#include "util/enum_names.h"

namespace stoker {

namespace {
constexpr internal::EnumName<ErrorCode> kErrorCodeNames[] = {
    {ErrorCode::kInvalidArgument, "invalid_argument"}, {ErrorCode::kIoError, "io_error"},
    {ErrorCode::kDataLoss, "data_loss"},               {ErrorCode::kResourceExhausted, "resource_exhausted"},
    {ErrorCode::kUnavailable, "unavailable"},          {ErrorCode::kCancelled, "cancelled"},
    {ErrorCode::kNotFound, "not_found"}};
}  // namespace

const char* error_code_name(ErrorCode code) noexcept { return internal::enum_name(kErrorCodeNames, code, "unknown"); }

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
