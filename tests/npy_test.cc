// Tests of src/format/npy.h: headers as NumPy writes them (versions 1.0, 2.0, 3.0, every
// supported dtype, 0-d to 3-d shapes), the unsupported-but-valid cases named as
// kInvalidArgument, and malformed headers as kDataLoss.
#include "format/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "stoker/error.h"
#include "util/test_util.h"

namespace stoker::internal {
namespace {

using stoker::testing::error_code_of;

// A header laid out as numpy.lib.format writes it: magic, version, little-endian length,
// the dict, spaces, '\n', total a multiple of 64.
std::vector<uint8_t> npy(const std::string& dict, int major = 1) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string d = dict;
  const size_t total = (pre + d.size() + 1 + 63) / 64 * 64;
  d.append(total - pre - d.size() - 1, ' ');
  d += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  const size_t len = d.size();
  b.push_back(len & 0xFF);
  b.push_back((len >> 8) & 0xFF);
  if (major != 1) {
    b.push_back((len >> 16) & 0xFF);
    b.push_back((len >> 24) & 0xFF);
  }
  b.insert(b.end(), d.begin(), d.end());
  return b;
}

TEST(Npy, ParsesWhatNumpyWrote) {
  // np.save(f, np.zeros((3, 4), '<f4')), byte for byte (header part).
  using namespace std::string_literals;  // ""s keeps the NUL bytes
  const std::string raw =
      "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"s +
      std::string(58, ' ') + "\n";
  std::vector<uint8_t> b(raw.begin(), raw.end());
  ASSERT_EQ(b.size(), 128u);
  b.resize(128 + 48);  // the data follows
  const NpyHeader h = parse_npy_header(b, "x.npy");
  EXPECT_EQ(h.version_major, 1);
  EXPECT_EQ(h.dtype, NpyDtype::kF32);
  EXPECT_EQ(h.itemsize, 4);
  EXPECT_EQ(h.descr, "<f4");
  EXPECT_EQ(h.shape, (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(h.count, 12u);
  EXPECT_EQ(h.data_bytes, 48u);
  EXPECT_EQ(h.data_offset, 128u);
  EXPECT_EQ(npy_header_size(std::span(b).first(12), "x.npy"), 128u);
}

TEST(Npy, EveryDtypeShapeAndVersion) {
  struct Case {
    const char* descr;
    NpyDtype dtype;
    int size;
  };
  const Case cases[] = {{"|b1", NpyDtype::kBool, 1}, {"|u1", NpyDtype::kU8, 1},
                        {"|i1", NpyDtype::kI8, 1},   {"<u2", NpyDtype::kU16, 2},
                        {"<i2", NpyDtype::kI16, 2},  {"<i4", NpyDtype::kI32, 4},
                        {"<u4", NpyDtype::kU32, 4},  {"<i8", NpyDtype::kI64, 8},
                        {"<u8", NpyDtype::kU64, 8},  {"<f2", NpyDtype::kF16, 2},
                        {"<f4", NpyDtype::kF32, 4},  {"<f8", NpyDtype::kF64, 8},
                        {"=f4", NpyDtype::kF32, 4},  {">u1", NpyDtype::kU8, 1}};
  for (const Case& c : cases) {
    for (int major : {1, 2, 3}) {
      const auto b = npy(std::string("{'descr': '") + c.descr +
                             "', 'fortran_order': False, 'shape': (7, 2, 5), }",
                         major);
      const NpyHeader h = parse_npy_header(b, "a.npy");
      EXPECT_EQ(h.dtype, c.dtype) << c.descr;
      EXPECT_EQ(h.itemsize, c.size) << c.descr;
      EXPECT_EQ(h.count, 70u);
      EXPECT_EQ(h.data_bytes, 70u * c.size);
      EXPECT_EQ(h.data_offset, b.size());
      EXPECT_EQ(h.data_offset % 64, 0u);
      EXPECT_EQ(h.version_major, major);
    }
  }
  EXPECT_STREQ(npy_dtype_name(NpyDtype::kF16), "float16");
  // 0-d, 1-d, an empty dimension, other key order, double quotes, Python 2 longs.
  EXPECT_TRUE(parse_npy_header(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }"), "s")
                  .shape.empty());
  EXPECT_EQ(parse_npy_header(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }"), "s")
                .count, 1u);
  EXPECT_EQ(parse_npy_header(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }"), "s")
                .shape, (std::vector<uint64_t>{5}));
  EXPECT_EQ(parse_npy_header(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }"), "s")
                .data_bytes, 0u);
  const NpyHeader h = parse_npy_header(
      npy("{\"shape\":(2L,3L),\"fortran_order\":False,\"descr\":\"<i4\"}"), "s");
  EXPECT_EQ(h.shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(h.dtype, NpyDtype::kI32);
}

TEST(Npy, UnsupportedArraysAreInvalidArgumentNamingWhy) {
  struct Case {
    std::string dict;
    const char* says;
  };
  const Case cases[] = {
      {"{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }", "big-endian"},
      {"{'descr': '>i2', 'fortran_order': False, 'shape': (2, 2), }", "big-endian"},
      {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", "object"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", "fortran_order"},
      {"{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }", "'<U5'"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", "'<c8'"},
      {"{'descr': '<f3', 'fortran_order': False, 'shape': (2,), }", "'<f3'"},
      {"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }", "structured"},
  };
  for (const Case& c : cases) {
    std::string msg;
    EXPECT_EQ(error_code_of([&] { parse_npy_header(npy(c.dict), "bad.npy"); }, &msg),
              ErrorCode::kInvalidArgument)
        << c.dict;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad.npy"), std::string::npos) << msg;
  }
}

TEST(Npy, MalformedHeadersAreDataLossNamingWhy) {
  const auto good = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
  struct Case {
    std::vector<uint8_t> bytes;
    const char* says;
  };
  auto with = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    return b;
  };
  std::vector<Case> cases = {
      {{}, "magic"},
      {{0x93, 'N', 'U', 'M'}, "magic"},
      {with(1, 'X'), "magic"},
      {with(6, 4), "version 4"},
      {std::vector<uint8_t>(good.begin(), good.begin() + 40), "truncated"},
      {std::vector<uint8_t>(good.begin(), good.begin() + 11), "truncated"},
      {npy("{'descr': '<f4', 'shape': (3, 4), }"), "fortran_order"},
      {npy("{'descr': '<f4', 'fortran_order': False}"), "'shape'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -4), }"), "integer"},
      {npy("{'descr': '<f4', 'fortran_order': Nope, 'shape': (3,), }"), "True or False"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}"), "unknown key"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,) } x"), "trailing"},
      {npy("{'descr' '<f4', 'fortran_order': False, 'shape': (3,) }"), "expected ':'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,) }"),
       "overflows"},
      {npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296) }"),
       "overflows"},
      {npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967295, 4294967297) }"),
       "overflows"},
  };
  // A v2 header claiming a 16 MiB dict.
  std::vector<uint8_t> huge = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0, 1};
  cases.push_back({huge, "limit"});
  for (const Case& c : cases) {
    std::string msg;
    EXPECT_EQ(error_code_of([&] { parse_npy_header(c.bytes, "bad.npy"); }, &msg), ErrorCode::kDataLoss)
        << c.says;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
    EXPECT_NE(msg.find("bad.npy"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace stoker::internal
