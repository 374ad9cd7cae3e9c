#include "format/npy.h"

#include <cctype>
#include <cstring>

#include "stoker/error.h"

namespace stoker::internal {

namespace {

struct DescrInfo {
  const char* code;  // without the byte-order character
  NpyDtype dtype;
  int size;
};
constexpr DescrInfo kDescrs[] = {
    {"b1", NpyDtype::kBool, 1}, {"i1", NpyDtype::kI8, 1},  {"u1", NpyDtype::kU8, 1},  {"i2", NpyDtype::kI16, 2},
    {"u2", NpyDtype::kU16, 2},  {"i4", NpyDtype::kI32, 4}, {"u4", NpyDtype::kU32, 4}, {"i8", NpyDtype::kI64, 8},
    {"u8", NpyDtype::kU64, 8},  {"f2", NpyDtype::kF16, 2}, {"f4", NpyDtype::kF32, 4}, {"f8", NpyDtype::kF64, 8},
};

// A cursor over the header dict, which NumPy writes as a Python literal:
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class DictParser {
 public:
  DictParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) bad(std::string("expected '") + c + "'");
  }
  std::string str() {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad("expected a string");
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string v(s_.substr(i_, end - i_));
    i_ = end + 1;
    return v;
  }
  bool boolean() {
    ws();
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> dims;
    expect('(');
    while (!eat(')')) {
      ws();
      uint64_t v = 0;
      size_t digits = 0;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
        if (++digits > 18) bad("shape dimension too large");
        v = v * 10 + static_cast<uint64_t>(s_[i_++] - '0');
      }
      if (digits == 0) bad("expected a shape dimension");
      ws();
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2's long suffix
      dims.push_back(v);
      if (dims.size() > 32) bad("more than 32 dimensions");
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }
  [[noreturn]] void bad(const std::string& why) const {
    throw_error(ErrorCode::kDataLoss, what_ + ": bad .npy header: " + why + " at dict byte " + std::to_string(i_));
  }

 private:
  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

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

NpyHeader parse_npy_header(std::span<const uint8_t> b, const std::string& what) {
  auto corrupt = [&](const std::string& why) { throw_error(ErrorCode::kDataLoss, what + ": " + why); };
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) corrupt("not a .npy file (bad magic)");
  NpyHeader h;
  h.version_major = b[6];
  h.version_minor = b[7];
  size_t len = 0, start = 0;
  if (h.version_major == 1) {
    len = b[8] | (static_cast<size_t>(b[9]) << 8);
    start = 10;
  } else if (h.version_major == 2 || h.version_major == 3) {
    if (b.size() < 12) corrupt("truncated .npy header");
    len = b[8] | (static_cast<size_t>(b[9]) << 8) | (static_cast<size_t>(b[10]) << 16) |
          (static_cast<size_t>(b[11]) << 24);
    start = 12;
  } else {
    corrupt(".npy version " + std::to_string(h.version_major) + " is not supported");
  }
  if (len > b.size() - start) corrupt("truncated .npy header (" + std::to_string(len) + " bytes declared)");
  h.data_offset = start + len;
  DictParser p(std::string_view(reinterpret_cast<const char*>(b.data() + start), len), what);
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  p.expect('{');
  while (!p.eat('}')) {
    const std::string key = p.str();
    p.expect(':');
    if (key == "descr") {
      h.descr = p.str();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.boolean();
      have_order = true;
    } else if (key == "shape") {
      h.shape = p.tuple();
      have_shape = true;
    } else {
      p.bad("unknown key '" + key + "'");
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape) corrupt("bad .npy header: descr, fortran_order or shape missing");
  if (fortran)
    throw_error(ErrorCode::kInvalidArgument, what + ": .npy array is in Fortran order; save it C-contiguous");
  const std::string& d = h.descr;
  bool found = false;
  if (d.size() == 3 && (d[0] == '<' || d[0] == '|' || d[0] == '=')) {
    for (const DescrInfo& info : kDescrs) {
      if (d.compare(1, 2, info.code) == 0 && (info.size == 1 || d[0] != '|')) {
        h.dtype = info.dtype;
        h.itemsize = info.size;
        found = true;
      }
    }
  }
  if (!found)
    throw_error(ErrorCode::kInvalidArgument,
                what + ": .npy dtype '" + d + "' is not supported (little-endian bool, integer or float only)");
  h.count = 1;
  for (uint64_t dim : h.shape) {
    if (dim != 0 && h.count > (uint64_t{1} << 62) / dim) corrupt("bad .npy header: shape overflows");
    h.count *= dim;
  }
  if (h.count > (uint64_t{1} << 62) / static_cast<uint64_t>(h.itemsize)) corrupt("bad .npy header: shape overflows");
  h.data_bytes = h.count * static_cast<uint64_t>(h.itemsize);
  return h;
}

}  // namespace stoker::internal
