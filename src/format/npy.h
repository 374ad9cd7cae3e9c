// The header of a NumPy .npy file (versions 1.0, 2.0, 3.0), parsed from untrusted bytes
// so that packers can copy an array's data without NumPy.
//
// Minimal parser for `stoker pack wds`; the API has the shape of the fuller parser
// that is being written alongside (parse_npy_header(bytes, what) -> dtype, shape,
// data_offset), so either can serve the packer. Supported: little-endian (or one-byte)
// bool, integer and float dtypes in C order. A big-endian dtype, an object, string or
// structured dtype, or fortran_order True is kInvalidArgument naming what was found;
// anything malformed (bad magic, truncated header, unparsable dict, a shape whose byte
// count overflows) is kDataLoss naming the reason.
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

/// NumPy's name of a dtype ("float32", "uint8", "bool", ...).
const char* npy_dtype_name(NpyDtype d) noexcept;

struct NpyHeader {
  int version_major = 1, version_minor = 0;
  NpyDtype dtype = NpyDtype::kU8;
  int itemsize = 1;             ///< bytes per element
  std::string descr;            ///< as written, e.g. "<f4"
  std::vector<uint64_t> shape;  ///< empty for a 0-d array (one element)
  uint64_t count = 1;           ///< product of shape
  uint64_t data_bytes = 0;      ///< count * itemsize
  size_t data_offset = 0;       ///< where the data starts (the header's total size)
};

/// Parses the header at the start of `bytes` (which may end anywhere after the
/// header). `what` names the file in error messages.
NpyHeader parse_npy_header(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace stoker::internal
