#include "decode/image_check.h"

#include "decode/formats.h"
#include "stoker/error.h"

namespace stoker::internal {

std::string check_image_decodes(std::span<const uint8_t> image, uint64_t max_pixels) {
  try {
    decoding_row(image).check_decodes(image, max_pixels);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace stoker::internal
