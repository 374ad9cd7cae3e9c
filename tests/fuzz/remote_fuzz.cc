// libFuzzer target: the bytes the remote layer takes from outside. The first byte picks
// the parser: a server's error body (summarized into messages), a Content-Range header
// line, an AWS ini file (~/.aws/credentials), a dataset URL. None may crash; a summary
// stays short and never holds an <AWSAccessKeyId> element's text.
#include <cstdint>
#include <string>

#include "remote/remote_internal.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      const std::string s = stoker::internal::summarize_error_body(text);
      if (s.size() > 410) __builtin_trap();
      if (s.find("<AWSAccessKeyId>") != std::string::npos) __builtin_trap();
      break;
    }
    case 1: {
      const int64_t v = stoker::internal::content_range_start(text);
      if (v < -1) __builtin_trap();
      break;
    }
    case 2:
      stoker::internal::parse_ini_section(text, "default");
      stoker::internal::parse_ini_section(text, "profile train");
      break;
    default:
      try {
        stoker::internal::Location loc = stoker::internal::parse_location(text, "fuzz");
        if (loc.kind != stoker::internal::LocationKind::kS3) {
          // The authority part shown may hold an '@' only after a redacted userinfo.
          const size_t host = loc.display.find("://") + 3;
          const std::string authority = loc.display.substr(host, loc.display.find('/', host) - host);
          if (authority.find('@') != std::string::npos && authority.rfind("***@", 0) != 0) __builtin_trap();
        }
      } catch (const stoker::Error&) {
      }
      break;
  }
  return 0;
}
