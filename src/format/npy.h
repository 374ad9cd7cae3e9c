// The header of a NumPy .npy file (format versions 1.0, 2.0 and 3.0), parsed from
// untrusted bytes so that packers can copy the array's data without NumPy.
//
// Supported: little-endian (or single-byte) bool, integer and float dtypes in C order.
// A big-endian multi-byte dtype, an object/string/structured dtype or
// fortran_order: True is a valid .npy that stoker does not read: kInvalidArgument
// naming what was found. Anything malformed (bad magic, truncated or unparsable header,
// a shape whose byte count overflows) is kDataLoss naming the reason. The header dict is
// parsed as the Python literal NumPy writes (keys in any order, either quote style,
// optional trailing commas, any whitespace), not evaluated.
//
// Threading: pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace stoker::internal {

enum class NpyDtype { kBool, kI8, kU8, kI16, kU16, kI32, kU32, kI64, kU64, kF16, kF32, kF64 };

/// Short NumPy name of a dtype ("float32", "uint8", "bool", ...).
const char* npy_dtype_name(NpyDtype d) noexcept;

struct NpyHeader {
  int version_major = 1, version_minor = 0;
  NpyDtype dtype = NpyDtype::kU8;
  int itemsize = 1;                ///< bytes per element
  std::string descr;               ///< as written, e.g. "<f4"
  std::vector<uint64_t> shape;     ///< empty for a 0-d array (one element)
  uint64_t count = 1;              ///< product of shape
  uint64_t data_bytes = 0;         ///< count * itemsize
  size_t data_offset = 0;          ///< where the data starts (the header's total size)
};

/// Bytes of the whole header (magic, version, length field, dict, padding) given at
/// least its first 12 bytes, so a reader knows how much to read before parsing.
/// kDataLoss for bad magic, an unknown version or fewer than 12 bytes.
size_t npy_header_size(std::span<const uint8_t> prefix, const std::string& what);

/// Parses the header at the start of `bytes` (which may end anywhere after the header).
/// `what` names the file in error messages.
NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace stoker::internal
