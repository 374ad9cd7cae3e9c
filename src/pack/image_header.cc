// image_header_problem (pack.h): the packers' image header check, for writers outside
// the packers.
#include "pack/pack_common.h"
#include "stoker/pack.h"

namespace stoker {

std::string image_header_problem(std::span<const uint8_t> bytes) {
  return internal::check_image_header(bytes, nullptr, nullptr);
}

}  // namespace stoker
