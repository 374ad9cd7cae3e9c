#include "format/npy.h"

#include <cstring>
#include <limits>
#include <string_view>

#include "stoker/error.h"

namespace stoker::internal {

namespace {

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// NumPy itself refuses headers above 10 KiB unless told otherwise; 1 MiB leaves room
// for huge shapes while bounding what a hostile length field can make us scan.
constexpr uint32_t kMaxHeaderLen = 1u << 20;

[[noreturn]] void corrupt(const std::string& what, const std::string& why) {
  throw Error(ErrorCode::kDataLoss, what + ": not a valid .npy header: " + why);
}

[[noreturn]] void unsupported(const std::string& what, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, what + ": unsupported .npy array: " + why);
}

// A cursor over the header dict: the subset of Python literals NumPy writes.
class DictParser {
 public:
  DictParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool accept(char c) {
    if (!peek(c)) return false;
    ++i_;
    return true;
  }
  std::string string_literal() {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string");
    const char q = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') fail("escapes in strings are not supported");
      out += s_[i_++];
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  bool boolean() {
    skip_ws();
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  uint64_t integer() {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("expected a non-negative integer");
    uint64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const uint64_t d = static_cast<uint64_t>(s_[i_++] - '0');
      if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) fail("integer overflows 64 bits");
      v = v * 10 + d;
    }
    if (i_ < s_.size() && (s_[i_] == 'L' || s_[i_] == 'l')) ++i_;  // Python 2 longs
    return v;
  }
  bool at_end() {
    skip_ws();
    return i_ == s_.size();
  }
  [[noreturn]] void fail(const std::string& why) {
    corrupt(what_, why + " at offset " + std::to_string(i_) + " of the header dict");
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  const std::string& what_;
};

struct DtypeEntry {
  char kind;
  int size;
  NpyDtype dtype;
};
constexpr DtypeEntry kDtypes[] = {
    {'b', 1, NpyDtype::kBool}, {'i', 1, NpyDtype::kI8},  {'u', 1, NpyDtype::kU8},
    {'i', 2, NpyDtype::kI16},  {'u', 2, NpyDtype::kU16}, {'i', 4, NpyDtype::kI32},
    {'u', 4, NpyDtype::kU32},  {'i', 8, NpyDtype::kI64}, {'u', 8, NpyDtype::kU64},
    {'f', 2, NpyDtype::kF16},  {'f', 4, NpyDtype::kF32}, {'f', 8, NpyDtype::kF64},
};

void parse_descr(const std::string& d, NpyHeader& h, const std::string& what) {
  if (d.size() >= 2 && d[1] == 'O') {
    unsupported(what, "object dtype '" + d + "' (pickled Python objects)");
  }
  if (d.size() < 3) unsupported(what, "dtype '" + d + "'");
  const char order = d[0];
  const char kind = d[1];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    unsupported(what, "dtype '" + d + "' has no byte-order mark");
  }
  int size = 0;
  for (size_t i = 2; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9' || size > 1000) unsupported(what, "dtype '" + d + "'");
    size = size * 10 + (d[i] - '0');
  }
  for (const auto& e : kDtypes) {
    if (e.kind == kind && e.size == size) {
      if (order == '>' && size > 1) {
        unsupported(what, "big-endian dtype '" + d + "' (convert with arr.astype('<" +
                              d.substr(1) + "'))");
      }
      h.dtype = e.dtype;
      h.itemsize = size;
      return;
    }
  }
  unsupported(what, "dtype '" + d + "' (supported: bool, int8..64, uint8..64, float16/32/64)");
}

}  // namespace

const char* npy_dtype_name(NpyDtype d) noexcept {
  switch (d) {
    case NpyDtype::kBool: return "bool";
    case NpyDtype::kI8: return "int8";
    case NpyDtype::kU8: return "uint8";
    case NpyDtype::kI16: return "int16";
    case NpyDtype::kU16: return "uint16";
    case NpyDtype::kI32: return "int32";
    case NpyDtype::kU32: return "uint32";
    case NpyDtype::kI64: return "int64";
    case NpyDtype::kU64: return "uint64";
    case NpyDtype::kF16: return "float16";
    case NpyDtype::kF32: return "float32";
    case NpyDtype::kF64: return "float64";
  }
  return "unknown";
}

size_t npy_header_size(std::span<const uint8_t> b, const std::string& what) {
  if (b.size() < 10 || std::memcmp(b.data(), kMagic, 6) != 0) {
    corrupt(what, b.size() < 6 ? "shorter than the magic" : "bad magic (expected \\x93NUMPY)");
  }
  const int major = b[6];
  if (major == 1) return 10 + (static_cast<size_t>(b[8]) | static_cast<size_t>(b[9]) << 8);
  if (major != 2 && major != 3) {
    corrupt(what, "unknown format version " + std::to_string(major) + "." + std::to_string(b[7]));
  }
  if (b.size() < 12) corrupt(what, "truncated before the header length");
  const uint32_t len = static_cast<uint32_t>(b[8]) | static_cast<uint32_t>(b[9]) << 8 |
                       static_cast<uint32_t>(b[10]) << 16 | static_cast<uint32_t>(b[11]) << 24;
  if (len > kMaxHeaderLen) {
    corrupt(what, "header length " + std::to_string(len) + " is above the limit of " +
                      std::to_string(kMaxHeaderLen));
  }
  return 12 + static_cast<size_t>(len);
}

NpyHeader parse_npy_header(std::span<const uint8_t> b, const std::string& what) {
  NpyHeader h;
  h.data_offset = npy_header_size(b, what);
  h.version_major = b[6];
  h.version_minor = b[7];
  if (b.size() < h.data_offset) {
    corrupt(what, "truncated: the header needs " + std::to_string(h.data_offset) +
                      " bytes, the input has " + std::to_string(b.size()));
  }
  const size_t dict_at = h.version_major == 1 ? 10 : 12;
  std::string_view dict(reinterpret_cast<const char*>(b.data()) + dict_at,
                        h.data_offset - dict_at);
  // The dict is padded with spaces and ends with '\n'.
  while (!dict.empty() && (dict.back() == ' ' || dict.back() == '\n' || dict.back() == '\0')) {
    dict.remove_suffix(1);
  }
  DictParser p(dict, what);
  bool have_descr = false, have_order = false, have_shape = false;
  p.expect('{');
  while (!p.accept('}')) {
    const std::string key = p.string_literal();
    p.expect(':');
    if (key == "descr") {
      if (p.peek('[')) unsupported(what, "structured dtype (a list of fields)");
      h.descr = p.string_literal();
      parse_descr(h.descr, h, what);
      have_descr = true;
    } else if (key == "fortran_order") {
      if (p.boolean()) {
        unsupported(what, "fortran_order: True (save a C-ordered array: np.ascontiguousarray)");
      }
      have_order = true;
    } else if (key == "shape") {
      p.expect('(');
      while (!p.accept(')')) {
        h.shape.push_back(p.integer());
        if (!p.accept(',')) {
          p.expect(')');
          break;
        }
      }
      have_shape = true;
    } else {
      p.fail("unknown key '" + key + "'");
    }
    if (!p.accept(',')) {
      p.expect('}');
      break;
    }
  }
  if (!p.at_end()) p.fail("trailing characters after the dict");
  if (!have_descr || !have_order || !have_shape) {
    corrupt(what, std::string("the header dict lacks ") +
                      (!have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'"));
  }
  h.count = 1;
  for (uint64_t d : h.shape) {
    if (d != 0 && h.count > std::numeric_limits<uint64_t>::max() / d) {
      corrupt(what, "the shape's element count overflows 64 bits");
    }
    h.count *= d;
  }
  if (h.count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(h.itemsize)) {
    corrupt(what, "the array's byte count overflows 64 bits");
  }
  h.data_bytes = h.count * static_cast<uint64_t>(h.itemsize);
  return h;
}

}  // namespace stoker::internal
