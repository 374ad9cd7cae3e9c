// TarReader (libarchive): ustar/GNU/pax members, plain or compressed, come back with
// their names and bytes; malformed archives (bad checksum, truncation, absurd sizes,
// hostile names) are clear errors naming the archive.
#include "pack/tar_reader.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include "stoker/error.h"
#include "util/tar_builder.h"
#include "util/test_util.h"

namespace stoker::internal {
namespace {

using stoker::testing::TarBuilder;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::vector<TarMember> read_all(const std::vector<uint8_t>& tar, TarReaderOptions o = {}, uint64_t* skipped = nullptr) {
  TarReader r(std::span<const uint8_t>(tar), "test.tar", o);
  std::vector<TarMember> out;
  TarMember m;
  while (r.next(m)) out.push_back(m);
  if (skipped) *skipped = r.skipped();
  return out;
}

ErrorCode code_of(const std::vector<uint8_t>& tar, std::string* message = nullptr, TarReaderOptions o = {}) {
  try {
    read_all(tar, o);
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::kCancelled;
}

TEST(TarReader, ReadsUstarMembersWithPrefixInOrder) {
  TarBuilder t;
  const auto a = stoker::testing::random_bytes(1000, 1), b = stoker::testing::random_bytes(512, 2);
  t.file("a.bin", a);
  t.file("b.bin", b, "some/dir");
  t.file("empty", std::vector<uint8_t>{});
  t.end();
  auto m = read_all(t.bytes);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].name, "a.bin");
  EXPECT_EQ(m[0].data, a);
  EXPECT_EQ(m[0].size, 1000u);
  EXPECT_EQ(m[1].name, "some/dir/b.bin");
  EXPECT_EQ(m[1].data, b);
  EXPECT_EQ(m[2].name, "empty");
  EXPECT_TRUE(m[2].data.empty());
}

TEST(TarReader, GnuLongNameAndPaxPathNameTheNextMember) {
  TarBuilder t;
  const std::string long_name = std::string(150, 'x') + "/" + std::string(80, 'y') + ".jpg";
  const std::string pax_name = "deep/" + std::string(200, 'p') + ".cls";
  t.gnu_long_file(long_name, bytes_of("long"));
  t.pax_file(pax_name, bytes_of("pax"));
  t.file("plain.txt", "plain");
  t.end();
  auto m = read_all(t.bytes);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].name, long_name);
  EXPECT_EQ(m[0].data, bytes_of("long"));
  EXPECT_EQ(m[1].name, pax_name);
  EXPECT_EQ(m[1].data, bytes_of("pax"));
  EXPECT_EQ(m[2].name, "plain.txt");  // the extended names applied to one member only
}

TEST(TarReader, PaxSizeOverridesTheHeaderSize) {
  TarBuilder t;
  std::string pax = "12 size=700\n";
  t.header("PaxHeaders/big", pax.size(), 'x');
  t.data(pax);
  t.header("big", 0, '0');  // header says 0, pax says 700
  const auto d = stoker::testing::random_bytes(700, 3);
  t.data(d);
  t.end();
  auto m = read_all(t.bytes);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].data, d);
}

TEST(TarReader, SkipsDirectoriesLinksAndLeadingDotSlash) {
  TarBuilder t;
  t.header("./", 0, '5');
  t.header("./dir/", 0, '5');
  t.header("./dir/link", 0, '2');
  t.file("./dir/f.txt", "hello");
  t.end();
  uint64_t skipped = 0;
  auto m = read_all(t.bytes, {}, &skipped);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].name, "dir/f.txt");
  EXPECT_EQ(skipped, 3u);
}

TEST(TarReader, EndOfStreamOnABlockBoundaryEndsTheArchive) {
  TarBuilder t;
  t.file("a", "x");
  EXPECT_EQ(read_all(t.bytes).size(), 1u);   // no end-of-archive blocks
  EXPECT_TRUE(read_all({}).empty());          // empty stream
}

TEST(TarReader, BadHeaderChecksumIsDataLoss) {
  TarBuilder t;
  t.file("a", "x");
  t.file("b", "y");
  t.end();
  t.bytes[1024] ^= 0x01;  // flip a bit of member b's name
  std::string msg;
  EXPECT_EQ(code_of(t.bytes, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("test.tar"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed tar header"), std::string::npos) << msg;
}

TEST(TarReader, NotATarIsDataLoss) {
  EXPECT_EQ(code_of(stoker::testing::random_bytes(4096, 9)), ErrorCode::kDataLoss);
}

TEST(TarReader, TruncatedMemberIsDataLoss) {
  TarBuilder t;
  t.file("a", stoker::testing::random_bytes(3000, 4));
  auto cut = t.bytes;
  cut.resize(512 + 2000);
  std::string msg;
  EXPECT_EQ(code_of(cut, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  // Cut inside the padding after the data, and inside a header.
  cut = t.bytes;
  cut.resize(512 + 3000 + 10);
  EXPECT_EQ(code_of(cut), ErrorCode::kDataLoss);
  cut.resize(300);
  EXPECT_EQ(code_of(cut), ErrorCode::kDataLoss);
}

TEST(TarReader, ExtendedHeaderWithoutItsMemberIsDataLoss) {
  TarBuilder t;
  std::string pax = "14 path=abcd\n";
  t.header("PaxHeaders/x", pax.size(), 'x');
  t.data(pax);
  EXPECT_EQ(code_of(t.bytes), ErrorCode::kDataLoss);
  t.end();
  EXPECT_EQ(code_of(t.bytes), ErrorCode::kDataLoss);
}

TEST(TarReader, HugeSizeFieldIsRejectedBeforeAllocating) {
  // Base-256 size with 2^63 or more: overflow.
  TarBuilder t;
  t.header("huge", 0);
  t.bytes[124] = 0x80;
  for (int i = 125; i < 136; ++i) t.bytes[i] = 0xFF;
  TarBuilder::set_checksum(t.bytes.data());
  t.end();
  std::string msg;
  EXPECT_EQ(code_of(t.bytes, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;

  // A valid but enormous octal size (4 GiB) is over the member limit: no allocation.
  TarBuilder t2;
  t2.header("big", 4ull << 30);
  EXPECT_EQ(code_of(t2.bytes, &msg), ErrorCode::kResourceExhausted);
  EXPECT_NE(msg.find("'big'"), std::string::npos) << msg;

  // Under the limit but more than the stream holds: truncated, found before allocating.
  TarBuilder t4;
  t4.header("short", 900ull << 20);
  t4.data(std::string(100, 'x'));
  EXPECT_EQ(code_of(t4.bytes, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

}

TEST(TarReader, GarbageInNumericFieldIsDataLoss) {
  TarBuilder t;
  t.header("a", 0);
  std::memcpy(t.bytes.data() + 124, "12x4567\0", 8);
  TarBuilder::set_checksum(t.bytes.data());
  EXPECT_EQ(code_of(t.bytes), ErrorCode::kDataLoss);
}

TEST(TarReader, HostileNamesAreRejected) {
  struct Case {
    const char* what;
    std::vector<uint8_t> tar;
  };
  std::vector<Case> cases;
  {
    TarBuilder t;
    t.file("../evil.jpg", "x");
    cases.push_back({"dot-dot", t.bytes});
  }
  {
    TarBuilder t;
    t.file("a/../../evil.jpg", "x");
    cases.push_back({"inner dot-dot", t.bytes});
  }
  {
    TarBuilder t;
    t.file("/etc/passwd", "x");
    cases.push_back({"absolute", t.bytes});
  }
  {
    TarBuilder t;
    t.file("evil.jpg", std::vector<uint8_t>{'x'}, "..");
    cases.push_back({"dot-dot prefix", t.bytes});
  }
  {
    TarBuilder t;
    t.gnu_long_file("x/../../" + std::string(120, 'a'), bytes_of("x"));
    cases.push_back({"long name", t.bytes});
  }
  {
    TarBuilder t;
    t.pax_file("/abs/pax", bytes_of("x"));
    cases.push_back({"pax path", t.bytes});
  }
  for (auto& c : cases) {
    std::string msg;
    EXPECT_EQ(code_of(c.tar, &msg), ErrorCode::kDataLoss) << c.what;
    EXPECT_TRUE(msg.find("'..'") != std::string::npos || msg.find("absolute") != std::string::npos)
        << c.what << ": " << msg;
  }
  // ".." inside a component is fine.
  TarBuilder ok;
  ok.file("a..b/c..", "x");
  EXPECT_EQ(read_all(ok.bytes).at(0).name, "a..b/c..");
}

TEST(TarReader, CompressedArchivesAreReadTransparently) {
  // #18: `pack wds a.tar.zst` used to fail with "negative base-256 number".
  TarBuilder t;
  const auto a = stoker::testing::random_bytes(5000, 3);
  t.file("k/0001.jpg", a);
  t.file("k/0001.cls", "7");
  t.end();
  std::vector<uint8_t> z(ZSTD_compressBound(t.bytes.size()));
  z.resize(ZSTD_compress(z.data(), z.size(), t.bytes.data(), t.bytes.size(), 3));
  auto m = read_all(z);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].name, "k/0001.jpg");
  EXPECT_EQ(m[0].data, a);
  EXPECT_EQ(m[1].data, bytes_of("7"));
  // A cut compressed stream is a clear error, not a short read.
  z.resize(z.size() / 2);
  std::string msg;
  EXPECT_EQ(code_of(z, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("test.tar"), std::string::npos) << msg;
}

TEST(TarReader, HeaderFirstThenAPrefixOfTheData) {
  TarBuilder t;
  const auto a = stoker::testing::random_bytes(3000, 5), b = stoker::testing::random_bytes(700, 6);
  t.file("a", a);
  t.file("b", b);
  t.end();
  TarReader r(std::span<const uint8_t>(t.bytes), "test.tar");
  TarMember m;
  ASSERT_TRUE(r.next_header(m));
  EXPECT_EQ(m.name, "a");
  EXPECT_EQ(m.size, 3000u);
  r.read_data(m, 100);  // only the head; the rest is skipped
  EXPECT_EQ(m.data, std::vector<uint8_t>(a.begin(), a.begin() + 100));
  ASSERT_TRUE(r.next_header(m));  // data not read at all: skipped
  EXPECT_EQ(m.name, "b");
  EXPECT_TRUE(m.data.empty());
  EXPECT_FALSE(r.next_header(m));
  EXPECT_GT(r.offset(), 0u);
}

TEST(TarReader, MissingFileIsNotFound) {
  try {
    TarReader r("/nonexistent/x.tar", "/nonexistent/x.tar");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.tar"), std::string::npos);
  }
}

}  // namespace
}  // namespace stoker::internal
