#include "decode/formats.h"

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "decode/jpeg_decode.h"
#include "decode/png_decode.h"
#include "decode/webp_decode.h"
#include "stoker/error.h"
#include "stoker/image.h"

namespace stoker::internal {

namespace {

// Lookup order: a JPEG's SOI is checked first, as its decoder claims the shortest magic.
constexpr std::array<const ImageFormatRow*, 3> kBuiltIn = {&kJpegFormat, &kPngFormat, &kWebpFormat};

// Registered rows live in a fixed array so that a lookup never sees storage move: a
// registration fills the next slot under the mutex, then publishes it by a release
// store of the count, which lookups read with acquire.
struct Registry {
  std::mutex mu;
  std::array<ImageFormatRow, kMaxImageFormats - kBuiltIn.size()> rows{};
  std::atomic<size_t> count{0};
};

Registry& registry() {
  static Registry r;
  return r;
}

bool row_has_extension(const ImageFormatRow& row, const std::string& ext) {
  for (const char* e : row.extensions)
    if (ext == e) return true;
  return false;
}

}  // namespace

namespace detail {

size_t image_format_count() noexcept { return kBuiltIn.size() + registry().count.load(std::memory_order_acquire); }

const ImageFormatRow& image_format_at(size_t i) noexcept {
  return i < kBuiltIn.size() ? *kBuiltIn[i] : registry().rows[i - kBuiltIn.size()];
}

}  // namespace detail

ImageFormat register_image_format(const ImageFormatRow& row) {
  if (row.name == nullptr || row.display == nullptr || row.sniff == nullptr || row.probe == nullptr ||
      row.check_header == nullptr || row.check_decodes == nullptr || row.make_decoder == nullptr ||
      row.extensions.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "register_image_format: a row needs names, extensions, sniff, probe, both checks and "
                "make_decoder");
  }
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  const size_t n = reg.count.load(std::memory_order_relaxed);
  if (n == reg.rows.size()) {
    throw Error(ErrorCode::kResourceExhausted,
                "register_image_format: the table holds " + std::to_string(kMaxImageFormats) + " formats");
  }
  for_each_image_format([&](const ImageFormatRow& other) {
    for (const char* e : row.extensions) {
      if (row_has_extension(other, e)) {
        throw Error(ErrorCode::kInvalidArgument, std::string("register_image_format: extension '") + e +
                                                     "' is already " + other.name + "'s");
      }
    }
  });
  ImageFormatRow& slot = reg.rows[n];
  slot = row;
  slot.id = static_cast<ImageFormat>(kBuiltIn.size() + 1 + n);
  reg.count.store(n + 1, std::memory_order_release);
  return slot.id;
}

const ImageFormatRow* image_format_row(ImageFormat f) noexcept {
  const size_t n = detail::image_format_count();
  for (size_t i = 0; i < n; ++i) {
    const ImageFormatRow& row = detail::image_format_at(i);
    if (row.id == f) return &row;
  }
  return nullptr;
}

const ImageFormatRow* sniff_image_format(std::span<const uint8_t> bytes) noexcept {
  const size_t n = detail::image_format_count();
  for (size_t i = 0; i < n; ++i) {
    const ImageFormatRow& row = detail::image_format_at(i);
    if (row.sniff(bytes)) return &row;
  }
  return nullptr;
}

const ImageFormatRow& decoding_row(std::span<const uint8_t> b) {
  const size_t n = detail::image_format_count();
  for (size_t i = 0; i < n; ++i) {
    const ImageFormatRow& row = detail::image_format_at(i);
    if (row.claims != nullptr && row.claims(b)) return row;
  }
  if (const ImageFormatRow* row = sniff_image_format(b)) return *row;
  std::string head;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    static const char* hex = "0123456789abcdef";
    head += hex[b[i] >> 4];
    head += hex[b[i] & 15];
    head += ' ';
  }
  if (!head.empty()) head.pop_back();
  throw Error(ErrorCode::kDataLoss, "not a " + image_format_list() + " image (" + std::to_string(b.size()) +
                                        " bytes, starting " + (head.empty() ? std::string("<empty>") : head) + ")");
}

const ImageFormatRow* image_format_by_extension(const std::string& extension) noexcept {
  const size_t n = detail::image_format_count();
  for (size_t i = 0; i < n; ++i) {
    const ImageFormatRow& row = detail::image_format_at(i);
    if (row_has_extension(row, extension)) return &row;
  }
  return nullptr;
}

std::string image_format_list() {
  const size_t n = detail::image_format_count();
  std::string list;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) list += i + 1 == n ? " or " : ", ";
    list += detail::image_format_at(i).display;
  }
  return list;
}

void check_out_size(const char* what, size_t out_size, size_t need) {
  if (out_size < need) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": output holds " + std::to_string(out_size) +
                                                 " bytes, needs " + std::to_string(need));
  }
}

void check_pixels(const char* what, uint64_t width, uint64_t height, uint64_t max_pixels) {
  const uint64_t px = width * height;
  if (px > max_pixels) {
    throw Error(ErrorCode::kResourceExhausted,
                std::string(what) + " is " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                    std::to_string(px) + " pixels, above the limit of " + std::to_string(max_pixels));
  }
}

}  // namespace stoker::internal

namespace stoker {

ImageFormat image_format_of(std::span<const uint8_t> bytes) noexcept {
  const internal::ImageFormatRow* row = internal::sniff_image_format(bytes);
  return row != nullptr ? row->id : ImageFormat::kUnknown;
}

const char* image_format_name(ImageFormat f) noexcept {
  const internal::ImageFormatRow* row = internal::image_format_row(f);
  return row != nullptr ? row->name : "unknown";
}

}  // namespace stoker
