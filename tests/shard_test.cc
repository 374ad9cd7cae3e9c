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
  auto fix_header_crc = [](std::vector<uint8_t>& b) {
    internal::put_u32(&b[kHeaderBlock - 4], crc32c(b.data(), kHeaderBlock - 4));
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
      // A header that is intact (checksum fixed up) but from a future version.
      {"future_version", [&](auto& b) { internal::put_u32(&b[8], 99); fix_header_crc(b); }, ErrorCode::kDataLoss, "version 99"},
      // #18: one flipped bit in the version used to read as "version 65537 is not
      // supported"; the checksum is checked first.
      {"flipped_version_bit", [](auto& b) { b[10] ^= 1; }, ErrorCode::kDataLoss, "header: checksum mismatch"},
      {"flipped_size_bit", [](auto& b) { b[14] ^= 0x40; }, ErrorCode::kDataLoss, "header: checksum mismatch"},
      {"flipped_schema_bit", [](auto& b) { b[33] ^= 0x10; }, ErrorCode::kDataLoss, "header: checksum mismatch"},
      {"giant_header", [&](auto& b) { internal::put_u32(&b[12], 0x7FFFF000); fix_header_crc(b); }, ErrorCode::kDataLoss, "header size"},
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

// --- version 2: typed fields ------------------------------------------------------

Schema v2_schema() {
  Schema s;
  s.fields = {Field{"__key__", FieldKind::kText},
              Field{"img", FieldKind::kImage},
              Field{"cls", FieldKind::kInt64},
              Field{"score", FieldKind::kFloat32},
              Field{"weight", FieldKind::kFloat64},
              Field{"emb", FieldKind::kNdarray, DType::kFloat32, 0, {2, 3}},
              Field{"one", FieldKind::kNdarray, DType::kUint8, 0, {}},
              Field{"boxes", FieldKind::kVarArray, DType::kFloat32, 0, {4}},
              Field{"ids", FieldKind::kVarArray, DType::kInt64, 0, {}},
              Field{"caption", FieldKind::kText},
              Field{"raw", FieldKind::kBytes},
              Field{"tok", FieldKind::kTokens, DType::kUint32, 3},
              Field{"mask", FieldKind::kNdarray, DType::kBool, 0, {2, 2}},
              Field{"half", FieldKind::kVarArray, DType::kFloat16, 0, {2, 1}}};
  return s;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

template <typename T>
std::vector<uint8_t> le_array(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());  // the test host is little-endian, like the format
  return b;
}

std::vector<std::vector<uint8_t>> v2_record(int i) {
  const std::vector<std::string> captions = {"", "a cat on a mat", "naïve café — 東京 🚀", std::string(500, 'x')};
  std::vector<std::vector<uint8_t>> r;
  r.push_back(bytes_of("shard-0/sample_" + std::to_string(i)));
  r.push_back(testing::make_jpeg(8 + i % 3, 8, i));
  r.push_back(le64(-i));
  r.push_back(le_array<float>({0.5f * i}));
  r.push_back(le_array<double>({-1.25 * i}));
  r.push_back(le_array<float>({1, 2, 3, 4, 5, static_cast<float>(i)}));
  r.push_back({static_cast<uint8_t>(i)});
  std::vector<float> boxes;
  for (int b = 0; b < 4 * (i % 3); ++b) boxes.push_back(static_cast<float>(b + i));
  r.push_back(le_array<float>(boxes));  // 0, 1 or 2 boxes: zero-length included
  std::vector<int64_t> ids(static_cast<size_t>(i % 4), int64_t{1} << 40);
  r.push_back(le_array<int64_t>(ids));
  r.push_back(bytes_of(captions[static_cast<size_t>(i) % captions.size()]));
  r.push_back(i % 2 ? testing::random_bytes(static_cast<size_t>(i * 7), i) : std::vector<uint8_t>{});
  r.push_back(le_array<uint32_t>({1, 2, 3, 4, 5, 6, 7, static_cast<uint32_t>(i)}));  // 2 rows of 4
  r.push_back({1, 0, 0, 1});
  r.push_back(std::vector<uint8_t>(static_cast<size_t>(4 * (i % 2)), 0x3c));
  return r;
}

class ShardV2 : public ::testing::TestWithParam<Compression> {};

TEST_P(ShardV2, EveryFieldKindRoundTrips) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.compression = GetParam();
  const std::string path = dir.str("v2.stk");
  std::vector<std::vector<std::vector<uint8_t>>> written;
  {
    ShardWriter w(path, v2_schema(), opt);
    for (int i = 0; i < 12; ++i) {
      written.push_back(v2_record(i));
      std::vector<std::span<const uint8_t>> f(written.back().begin(), written.back().end());
      w.add(f);
    }
    w.finish();
  }
  auto r = ShardReader::open(path);
  EXPECT_EQ(r->header().version, 2u);
  EXPECT_EQ(r->schema(), v2_schema());  // shapes and dtypes survive the header
  for (uint64_t i = 0; i < 12; ++i) {
    Record rec = r->read_record(i);
    ASSERT_EQ(rec.fields.size(), written[i].size());
    for (size_t f = 0; f < rec.fields.size(); ++f)
      EXPECT_EQ(std::vector<uint8_t>(rec.fields[f].begin(), rec.fields[f].end()), written[i][f]) << i << " " << f;
    EXPECT_EQ(record_key(r->schema(), rec), "shard-0/sample_" + std::to_string(i));
    EXPECT_EQ(rec.int64_field(2), -static_cast<int64_t>(i));
  }
  EXPECT_EQ(r->read_record(2).text_field(9), "naïve café — 東京 🚀");
  EXPECT_EQ(r->read_record(0).fields[7].size(), 0u);  // zero boxes
  EXPECT_TRUE(verify_path(path).ok());
}

INSTANTIATE_TEST_SUITE_P(Compressions, ShardV2, ::testing::Values(Compression::kNone, Compression::kZstd),
                         [](const auto& info) { return info.param == Compression::kZstd ? "zstd" : "plain"; });

TEST(ShardV2Schema, DescriptorsAndSizesAreChecked) {
  const Schema s = v2_schema();
  EXPECT_EQ(s.min_version(), 2u);
  EXPECT_EQ(all_kinds_schema().min_version(), 1u);
  EXPECT_EQ(s.to_string().find("emb:ndarray/float32/2x3") != std::string::npos, true) << s.to_string();
  EXPECT_NE(s.to_string().find("boxes:vararray/float32/*x4"), std::string::npos) << s.to_string();
  EXPECT_EQ(s.fields[5].fixed_size(), 24u);
  EXPECT_EQ(s.fields[7].unit_size(), 16u);
  EXPECT_EQ(s.fields[7].check_size(0), "");
  EXPECT_NE(s.fields[7].check_size(17).find("not a whole number of rows of 16 bytes"), std::string::npos);
  EXPECT_NE(s.fields[3].check_size(8).find("float32 field 'score' has 8 bytes, not 4"), std::string::npos);
  EXPECT_NE(s.fields[11].check_size(0).find("empty"), std::string::npos);

  struct Bad {
    Field f;
    const char* needle;
  };
  const std::vector<Bad> bad = {
      {Field{"a", FieldKind::kNdarray}, "needs a dtype"},
      {Field{"a", FieldKind::kVarArray, DType::kFloat32, 0, {0}}, "zero dimension"},
      {Field{"a", FieldKind::kNdarray, DType::kFloat32, 0, {1, 1, 1, 1, 1, 1, 1, 1, 1}}, "dimensions"},
      {Field{"a", FieldKind::kNdarray, DType::kFloat64, 0, {65536, 65536}}, "4 GiB"},
      {Field{"a", FieldKind::kText, DType::kUint8}, "has a dtype"},
      {Field{"a", FieldKind::kBytes, DType::kNone, 0, {3}}, "has a shape"},
      {Field{"a", FieldKind::kTokens, DType::kFloat32, 4}, "tokens are"},
      {Field{"a", FieldKind::kFloat32, DType::kNone, 5}, "seq_len"},
      {Field{"__key__", FieldKind::kBytes}, "must be text"},
      {Field{"a", static_cast<FieldKind>(11)}, "unknown kind"},
  };
  for (const Bad& b : bad) {
    try {
      Schema{{b.f}}.validate();
      ADD_FAILURE() << b.needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(b.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.f.name), std::string::npos) << e.what();
    }
  }
}

TEST(ShardV2Schema, WriterRefusesPayloadsThatDoNotFitTheirKind) {
  TempDir dir;
  ShardWriter w(dir.str("w.stk"), v2_schema());
  struct Case {
    size_t field;
    std::vector<uint8_t> value;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {3, std::vector<uint8_t>(3), "float32 field 'score' has 3 bytes, not 4"},
      {4, std::vector<uint8_t>(4), "float64 field 'weight' has 4 bytes, not 8"},
      {5, std::vector<uint8_t>(20), "ndarray field 'emb' has 20 bytes, not 24"},
      {7, std::vector<uint8_t>(15), "vararray field 'boxes' has 15 bytes"},
      {9, {0x61, 0xC3, 0x28}, "text field 'caption' is not valid UTF-8 (byte 1)"},
      {9, {0xED, 0xA0, 0x80}, "not valid UTF-8"},  // a surrogate
      {0, {0xFF}, "text field '__key__' is not valid UTF-8"},
  };
  for (const Case& c : cases) {
    auto rec = v2_record(1);
    rec[c.field] = c.value;
    std::vector<std::span<const uint8_t>> f(rec.begin(), rec.end());
    try {
      w.add(f);
      ADD_FAILURE() << c.needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    }
  }
  // A v2-only schema cannot be written as version 1.
  ShardWriterOptions v1;
  v1.version = 1;
  EXPECT_THROW(ShardWriter(dir.str("v1.stk"), v2_schema(), v1), Error);
}

// The reader checks every index entry's field sizes against the kinds, even when the
// index checksum is intact (a writer bug, or a crafted file).
TEST(ShardV2Schema, ReaderChecksIndexFieldSizesAgainstKinds) {
  TempDir dir;
  const std::string path = dir.str("r.stk");
  {
    ShardWriter w(path, v2_schema());
    auto rec = v2_record(1);
    std::vector<std::span<const uint8_t>> f(rec.begin(), rec.end());
    w.add(f);
    w.finish();
  }
  const auto good = testing::read_file(path);
  // Moves one byte from field `from` to field `to` in record 0's entry, keeping the
  // sum, then fixes the index and trailer checksums.
  auto shift = [&](size_t from, size_t to) {
    auto b = good;
    uint8_t* t = b.data() + b.size() - kTrailerSize;
    const uint64_t index_offset = internal::get_u64(t + 8), index_size = internal::get_u64(t + 16);
    uint8_t* e = b.data() + index_offset + 24;
    internal::put_u32(e + 4 * from, internal::get_u32(e + 4 * from) - 1);
    internal::put_u32(e + 4 * to, internal::get_u32(e + 4 * to) + 1);
    internal::put_u32(t + 36, crc32c(b.data() + index_offset, index_size));
    internal::put_u32(t + 60, crc32c(t, 60));
    testing::write_file(path, b);
  };
  struct Case {
    size_t from, to;
    const char* needle;
  };
  for (const Case& c : {Case{1, 3, "float32 field 'score' has 5 bytes"}, Case{1, 7, "vararray field 'boxes' has 17 bytes"},
                        Case{1, 5, "ndarray field 'emb' has 25 bytes"}, Case{1, 11, "tokens field 'tok'"}}) {
    shift(c.from, c.to);
    try {
      ShardReader::open(path);
      ADD_FAILURE() << c.needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("record 0"), std::string::npos) << e.what();
    }
  }
}

TEST(ShardV2Schema, Version1WriterPathStillWritesVersion1) {
  TempDir dir;
  ShardWriterOptions opt;
  opt.version = 1;
  const std::string path = dir.str("old.stk");
  write_all_kinds(path, opt, 3, 1);
  auto bytes = testing::read_file(path);
  EXPECT_EQ(internal::get_u32(&bytes[8]), 1u);
  EXPECT_EQ(internal::get_u32(&bytes[bytes.size() - kTrailerSize + 44]), 1u);
  auto r = ShardReader::open(path);
  EXPECT_EQ(r->header().version, 1u);
  EXPECT_EQ(r->schema(), all_kinds_schema());
  EXPECT_EQ(record_key(r->schema(), r->read_record(0)), "");  // v1 has no keys
}

TEST(ShardV2Schema, ImageFormatsAreSniffedByMagic) {
  auto jpeg = testing::make_jpeg(8, 8, 1);
  const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0};
  const uint8_t webp[] = {'R', 'I', 'F', 'F', 1, 2, 3, 4, 'W', 'E', 'B', 'P', 'V', 'P'};
  const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_EQ(image_format_of(jpeg), ImageFormat::kJpeg);
  EXPECT_EQ(image_format_of(png), ImageFormat::kPng);
  EXPECT_EQ(image_format_of(webp), ImageFormat::kWebp);
  EXPECT_EQ(image_format_of(gif), ImageFormat::kUnknown);
  EXPECT_EQ(image_format_of({}), ImageFormat::kUnknown);
}

// 64 fields of 8-dimensional arrays with 64-byte names need a two-block header.
TEST(ShardV2Schema, LargeSchemasSpanSeveralHeaderBlocks) {
  TempDir dir;
  Schema s;
  for (int i = 0; i < 64; ++i) {
    std::string name = "f" + std::to_string(i);
    name.resize(64, 'x');
    s.fields.push_back(Field{name, FieldKind::kNdarray, DType::kUint8, 0, {1, 1, 1, 1, 1, 1, 1, 2}});
  }
  const std::string path = dir.str("big.stk");
  {
    ShardWriter w(path, s);
    std::vector<std::vector<uint8_t>> rec(64, std::vector<uint8_t>{1, 2});
    std::vector<std::span<const uint8_t>> f(rec.begin(), rec.end());
    w.add(f);
    w.finish();
  }
  auto r = ShardReader::open(path);
  EXPECT_EQ(r->header().header_size, 8192u);
  EXPECT_EQ(r->schema(), s);
  EXPECT_EQ(r->read_record(0).fields[63].size(), 2u);
  auto b = testing::read_file(path);
  b[5000] ^= 0x04;  // inside the second block
  testing::write_file(path, b);
  try {
    ShardReader::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("header: checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST(ShardV2Schema, DTypesFieldKindsAndImageFormatsRoundTripByName) {
  const std::pair<DType, size_t> sizes[] = {
      {DType::kUint16, 2}, {DType::kUint32, 4}, {DType::kInt32, 4},   {DType::kInt64, 8},
      {DType::kUint8, 1},  {DType::kInt8, 1},   {DType::kInt16, 2},   {DType::kFloat16, 2},
      {DType::kFloat32, 4}, {DType::kFloat64, 8}, {DType::kBool, 1}};
  ASSERT_EQ(std::size(sizes), size_t{kMaxDType});
  for (const auto& [t, size] : sizes) {
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t) << dtype_name(t);
    EXPECT_EQ(dtype_size(t), size) << dtype_name(t);
  }
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_STREQ(dtype_name(DType::kNone), "none");
  EXPECT_EQ(dtype_size(DType::kNone), 0u);
  std::string msg;
  EXPECT_EQ(testing::error_code_of([] { dtype_from_name("float"); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("uint16, uint32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got 'float'"), std::string::npos) << msg;

  for (uint8_t k = 0; k <= kMaxFieldKind; ++k) {
    const auto kind = static_cast<FieldKind>(k);
    EXPECT_EQ(field_kind_from_name(field_kind_name(kind)), kind) << field_kind_name(kind);
  }
  EXPECT_STREQ(field_kind_name(FieldKind::kImage), "image");
  EXPECT_EQ(field_kind_from_name("jpeg"), FieldKind::kImage);  // the v1 manifest's name
  EXPECT_STREQ(field_kind_name(static_cast<FieldKind>(kMaxFieldKind + 1)), "unknown");
  EXPECT_EQ(testing::error_code_of([] { field_kind_from_name("blob"); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("got 'blob'"), std::string::npos) << msg;

  EXPECT_STREQ(image_format_name(ImageFormat::kPng), "png");
  EXPECT_STREQ(image_format_name(ImageFormat::kUnknown), "unknown");
}

}  // namespace
}  // namespace stoker
