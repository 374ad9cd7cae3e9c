#include "stoker/shard.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/verify.h"
#include "util/bytes.h"
#include "util/test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

Schema image_schema() {
  return Schema{{Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}}};
}
Schema all_kinds_schema() {
  return Schema{{Field{"blob", FieldKind::kBytes}, Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64},
                 Field{"tokens", FieldKind::kTokens, DType::kUint16, 4}}};
}

std::vector<uint8_t> le64(int64_t v) {
  std::vector<uint8_t> b(8);
  internal::put_u64(b.data(), static_cast<uint64_t>(v));
  return b;
}

struct Written {
  std::vector<std::vector<std::vector<uint8_t>>> records;
};

Written write_all_kinds(const std::string& path, ShardWriterOptions opt, int n, uint32_t seed) {
  Written w;
  ShardWriter writer(path, all_kinds_schema(), opt);
  for (int i = 0; i < n; ++i) {
    std::vector<std::vector<uint8_t>> rec;
    rec.push_back(testing::random_bytes(static_cast<size_t>((i * 37) % 300), seed + i));  // includes empty
    rec.push_back(testing::make_jpeg(16 + i % 5, 12, seed + i));
    rec.push_back(le64(i * 1000 - 7));
    std::vector<uint8_t> tok(5 * 2 * (1 + i % 3));  // rows of seq_len+1 = 5 uint16
    for (size_t k = 0; k < tok.size(); ++k) tok[k] = static_cast<uint8_t>((k / 3) % 7);  // compressible
    rec.push_back(tok);
    std::vector<std::span<const uint8_t>> spans(rec.begin(), rec.end());
    writer.add(spans);
    w.records.push_back(std::move(rec));
  }
  writer.finish();
  return w;
}

struct Mode {
  const char* name;
  Compression compression;
  uint32_t align;
};

class ShardRoundTrip : public ::testing::TestWithParam<Mode> {};

TEST_P(ShardRoundTrip, EveryFieldTypeRoundTrips) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.compression = GetParam().compression;
  opt.align = GetParam().align;
  const std::string path = dir.str("a.stk");
  Written w = write_all_kinds(path, opt, 40, 11);
  auto r = ShardReader::open(path);
  ASSERT_EQ(r->record_count(), 40u);
  EXPECT_EQ(r->schema(), all_kinds_schema());
  EXPECT_EQ(r->header().align, GetParam().align);
  bool any_compressed = false;
  for (uint64_t i = 0; i < 40; ++i) {
    Record rec = r->read_record(i);
    ASSERT_EQ(rec.fields.size(), 4u);
    for (size_t f = 0; f < 4; ++f)
      ASSERT_EQ(std::vector<uint8_t>(rec.fields[f].begin(), rec.fields[f].end()), w.records[i][f]) << i << " " << f;
    EXPECT_EQ(rec.int64_field(2), static_cast<int64_t>(i) * 1000 - 7);
    if (GetParam().align > 1) {
      EXPECT_EQ(r->location(i).offset % GetParam().align, 0u);
    }
    any_compressed |= (r->location(i).flags & kRecordZstd) != 0;
  }
  EXPECT_EQ(any_compressed, GetParam().compression == Compression::kZstd);
  EXPECT_TRUE(verify_path(path).ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, ShardRoundTrip,
                         ::testing::Values(Mode{"plain", Compression::kNone, 1}, Mode{"zstd", Compression::kZstd, 1},
                                           Mode{"plain_aligned", Compression::kNone, 4096},
                                           Mode{"zstd_aligned", Compression::kZstd, 4096}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Shard, IndexIsFoundFromTheTrailer) {
  TempDir dir;
  const std::string path = dir.str("a.stk");
  write_all_kinds(path, {}, 5, 1);
  auto bytes = testing::read_file(path);
  // The last 64 bytes are the trailer; its index offset + size ends exactly there.
  const uint8_t* t = bytes.data() + bytes.size() - kTrailerSize;
  EXPECT_EQ(std::memcmp(t, "STKTRAIL", 8), 0);
  uint64_t index_offset = internal::get_u64(t + 8), index_size = internal::get_u64(t + 16);
  EXPECT_EQ(index_offset + index_size + kTrailerSize, bytes.size());
  auto r = ShardReader::open(path);
  EXPECT_EQ(r->data_end(), index_offset);
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  ShardWriter w(dir.str("e.stk"), image_schema());
  auto s = w.finish();
  EXPECT_EQ(s.records, 0u);
  auto r = ShardReader::open(dir.str("e.stk"));
  EXPECT_EQ(r->record_count(), 0u);
  EXPECT_TRUE(verify_path(dir.str("e.stk")).ok());
}

TEST(Shard, UnfinishedWriterLeavesNoShard) {
  TempDir dir;
  {
    ShardWriter w(dir.str("x.stk"), image_schema());
    auto jpeg = testing::make_jpeg(8, 8, 1);
    auto label = le64(1);
    std::vector<std::span<const uint8_t>> f{jpeg, label};
    w.add(f);
    EXPECT_TRUE(fs::exists(dir.str("x.stk.tmp")));
    EXPECT_FALSE(fs::exists(dir.str("x.stk")));
  }
  EXPECT_FALSE(fs::exists(dir.str("x.stk.tmp")));
  EXPECT_FALSE(fs::exists(dir.str("x.stk")));
}

TEST(Shard, TemporaryFileFromAKilledWriterIsNotAShard) {
  // A writer killed before finish() leaves only "<name>.tmp" holding a header and
  // records but no trailer: the reader must refuse it.
  TempDir dir;
  const std::string path = dir.str("k.stk");
  write_all_kinds(path, {}, 3, 2);
  auto bytes = testing::read_file(path);
  for (size_t cut : {size_t{0}, size_t{100}, size_t{4096}, bytes.size() / 2, bytes.size() - 1}) {
    testing::write_file(path + ".cut", std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut));
    try {
      ShardReader::open(path + ".cut");
      FAIL() << "opened a shard cut at " << cut;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
      EXPECT_NE(std::string(e.what()).find(path + ".cut"), std::string::npos);
    }
  }
}

TEST(Shard, WriterRejectsFieldsThatDoNotMatchTheSchema) {
  TempDir dir;
  ShardWriter w(dir.str("s.stk"), all_kinds_schema());
  std::vector<uint8_t> a(3), seven(7), eight(8), badtok(9), tok(10);
  std::vector<std::span<const uint8_t>> wrong_count{a, a};
  std::vector<std::span<const uint8_t>> bad_label{a, a, seven, tok};
  std::vector<std::span<const uint8_t>> bad_tokens{a, a, eight, badtok};
  for (auto* f : {&wrong_count, &bad_label, &bad_tokens}) {
    try {
      w.add(*f);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

TEST(Shard, PackingIsDeterministic) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.compression = Compression::kZstd;
  write_all_kinds(dir.str("a.stk"), opt, 25, 5);
  write_all_kinds(dir.str("b.stk"), opt, 25, 5);
  EXPECT_EQ(testing::read_file(dir.str("a.stk")), testing::read_file(dir.str("b.stk")));
}

// Builds a small shard with aligned records (so there is padding to flip too).
std::vector<uint8_t> small_aligned_shard(const std::string& path) {
  ShardWriterOptions opt;
  opt.align = 4096;
  ShardWriter w(path, image_schema(), opt);
  for (int i = 0; i < 2; ++i) {
    auto j = testing::random_bytes(60 + i * 40, i);
    auto l = le64(i);
    std::vector<std::span<const uint8_t>> f{j, l};
    w.add(f);
  }
  w.finish();
  return testing::read_file(path);
}

TEST(Shard, EverySingleByteFlipIsDetectedAndNamed) {
  TempDir dir;
  const std::string path = dir.str("flip.stk");
  const auto original = small_aligned_shard(path);
  ASSERT_TRUE(verify_path(path).ok());
  const auto r = ShardReader::open(path);
  std::vector<std::pair<uint64_t, uint64_t>> records;
  for (uint64_t i = 0; i < r->record_count(); ++i)
    records.emplace_back(r->location(i).offset, r->location(i).offset + r->location(i).stored_size);
  const uint64_t header_end = r->header().header_size, index_begin = r->data_end();
  size_t undetected = 0;
  for (size_t pos = 0; pos < original.size(); ++pos) {
    auto bytes = original;
    bytes[pos] ^= 0x01;
    testing::write_file(path, bytes);
    VerifyReport rep = verify_path(path);
    if (rep.ok()) {
      ++undetected;
      ADD_FAILURE() << "flip at " << pos << " not detected";
      continue;
    }
    const std::string where = rep.problems[0].where;
    // The named part must be where the byte is.
    std::string expect;
    if (pos < header_end) expect = "header";
    else if (pos >= original.size() - kTrailerSize) expect = "trailer";
    else if (pos >= index_begin) expect = "index";
    else {
      for (size_t i = 0; i < records.size(); ++i) {
        if (pos >= records[i].first && pos < records[i].second) expect = "record " + std::to_string(i);
        else if (pos < records[i].first && (i == 0 || pos >= records[i - 1].second))
          expect = "padding before record " + std::to_string(i);
      }
    }
    // A flipped trailer field can also be reported by the header/index check it feeds.
    if (expect != "trailer") {
      ASSERT_EQ(where, expect) << "flip at " << pos << ": " << rep.problems[0].to_string();
    }
  }
  EXPECT_EQ(undetected, 0u);
  testing::write_file(path, original);
}

TEST(Shard, MalformedFilesGiveClearErrors) {
  TempDir dir;
  const std::string path = dir.str("m.stk");
  write_all_kinds(path, {}, 4, 9);
  const auto good = testing::read_file(path);
  struct Case {
    const char* name;
    std::function<void(std::vector<uint8_t>&)> mutate;
    ErrorCode code;
    const char* needle;
  };
  auto rewrite_trailer = [](std::vector<uint8_t>& b, size_t field_off, uint64_t value, bool is64) {
    uint8_t* t = b.data() + b.size() - kTrailerSize;
    if (is64) internal::put_u64(t + field_off, value);
    else internal::put_u32(t + field_off, static_cast<uint32_t>(value));
    internal::put_u32(t + 60, crc32c(t, 60));  // keep the trailer self-consistent
  };
  std::vector<Case> cases = {
      {"empty", [](auto& b) { b.clear(); }, ErrorCode::kDataLoss, "truncated"},
      {"truncated", [](auto& b) { b.resize(b.size() - 10); }, ErrorCode::kDataLoss, "trailer"},
      {"wrong_magic", [](auto& b) { b[0] = 'X'; }, ErrorCode::kDataLoss, "wrong magic"},
      {"future_version", [](auto& b) { internal::put_u32(&b[8], 99); }, ErrorCode::kDataLoss, "version 99"},
      {"giant_header", [](auto& b) { internal::put_u32(&b[12], 0x7FFFF000); }, ErrorCode::kDataLoss, "header size"},
      {"huge_record_count", [&](auto& b) { rewrite_trailer(b, 24, 1ull << 60, true); }, ErrorCode::kDataLoss, "record count"},
      {"index_past_end", [&](auto& b) { rewrite_trailer(b, 8, b.size() * 2, true); }, ErrorCode::kDataLoss, "does not fit"},
      {"file_size_mismatch", [&](auto& b) { rewrite_trailer(b, 48, b.size() + 1, true); }, ErrorCode::kDataLoss, "truncated or appended"},
  };
  for (auto& c : cases) {
    auto b = good;
    c.mutate(b);
    testing::write_file(path, b);
    try {
      ShardReader::open(path);
      ADD_FAILURE() << c.name << ": opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), c.code) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << c.name;
    }
  }
}

TEST(Shard, RecordPointingPastTheEndIsRejected) {
  TempDir dir;
  const std::string path = dir.str("p.stk");
  write_all_kinds(path, {}, 3, 4);
  auto b = testing::read_file(path);
  uint8_t* t = b.data() + b.size() - kTrailerSize;
  uint64_t index_offset = internal::get_u64(t + 8);
  // Record 2's stored size made huge, with index and trailer CRCs recomputed so only the
  // bounds check can catch it.
  const size_t es = 24 + 4 * 4;
  uint8_t* e = b.data() + index_offset + 2 * es;
  internal::put_u32(e + 8, 0xFFFFFF00u);
  uint64_t index_size = internal::get_u64(t + 16);
  internal::put_u32(t + 36, crc32c(b.data() + index_offset, index_size));
  internal::put_u32(t + 60, crc32c(t, 60));
  testing::write_file(path, b);
  try {
    ShardReader::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("record 2"), std::string::npos) << e.what();
  }
}

TEST(Shard, HugeRawSizeIsRefusedBeforeAllocating) {
  TempDir dir;
  const std::string path = dir.str("h.stk");
  write_all_kinds(path, {}, 2, 4);
  ShardReaderOptions opt;
  opt.max_record_bytes = 100;  // records here are larger than 100 bytes
  try {
    ShardReader::open(path, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  }
}

TEST(Shard, CorruptRecordIsDataLossNamingShardAndRecord) {
  TempDir dir;
  const std::string path = dir.str("c.stk");
  write_all_kinds(path, {}, 3, 4);
  auto r0 = ShardReader::open(path);
  auto b = testing::read_file(path);
  b[r0->location(1).offset + 1] ^= 0x40;
  testing::write_file(path, b);
  auto r = ShardReader::open(path);  // index intact: opens
  EXPECT_NO_THROW(r->read_record(0));
  try {
    r->read_record(1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find(path + ": record 1: checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST(Shard, UnpackIntoCallerBufferChecksZstdAndCrc) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.compression = Compression::kZstd;
  const std::string path = dir.str("z.stk");
  Written w = write_all_kinds(path, opt, 6, 3);
  auto r = ShardReader::open(path);
  for (uint64_t i = 0; i < 6; ++i) {
    auto stored = r->read_stored(i);
    std::vector<uint8_t> out(r->location(i).raw_size);
    auto fields = unpack_record_into(r->schema(), r->location(i), stored, out, "z record");
    EXPECT_EQ(std::vector<uint8_t>(fields[3].begin(), fields[3].end()), w.records[i][3]);
    if (r->location(i).flags & kRecordZstd) {
      // A truncated frame with a matching CRC (as a buggy writer could produce): the
      // zstd layer must refuse it. (zstd frames carry no checksum of their own, which
      // is why every record has a CRC32C.)
      auto bad = std::vector<uint8_t>(stored.begin(), stored.end() - 3);
      RecordLocation loc = r->location(i);
      loc.stored_size = static_cast<uint32_t>(bad.size());
      loc.crc = crc32c(bad.data(), bad.size());
      EXPECT_THROW(
          {
            try {
              unpack_record_into(r->schema(), loc, bad, out, "z record");
            } catch (const Error& e) {
              EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
              throw;
            }
          },
          Error);
    }
  }
}

}  // namespace
}  // namespace stoker
