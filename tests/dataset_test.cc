#include "stoker/dataset.h"

#include <gtest/gtest.h>

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

Schema image_schema() { return Schema{{Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}}}; }

// Writes n records of ~1 KiB over shards of ~4 KiB payload each.
Manifest write_dataset(const std::string& dir, int n, uint64_t shard_size = 8192) {
  DatasetWriterOptions opt;
  opt.shard_size = shard_size;
  DatasetWriter w(dir, image_schema(), opt);
  w.manifest().class_names = {"cat", "dog with space", "100%"};
  w.manifest().meta["source"] = "test";
  for (int i = 0; i < n; ++i) {
    auto payload = testing::random_bytes(900 + i % 200, i);
    std::vector<uint8_t> label(8);
    internal::put_u64(label.data(), static_cast<uint64_t>(i % 3));
    std::vector<std::span<const uint8_t>> f{payload, label};
    w.add(f);
  }
  return w.finish();
}

TEST(Dataset, WriterRollsShardsAndReaderSeesEveryRecord) {
  TempDir dir;
  Manifest m = write_dataset(dir.str(), 50);
  EXPECT_GT(m.shards.size(), 3u);
  auto ds = Dataset::open(dir.str());
  ASSERT_EQ(ds->record_count(), 50u);
  EXPECT_EQ(ds->manifest().class_names[1], "dog with space");
  EXPECT_EQ(ds->manifest().class_names[2], "100%");
  for (uint64_t g = 0; g < 50; ++g) {
    Record r = ds->read(g);
    auto expect = testing::random_bytes(900 + g % 200, static_cast<uint32_t>(g));
    ASSERT_EQ(std::vector<uint8_t>(r.fields[0].begin(), r.fields[0].end()), expect) << g;
    ASSERT_EQ(r.int64_field(1), static_cast<int64_t>(g % 3));
  }
  auto [s, i] = ds->locate(ds->shard_begin(2) + 1);
  EXPECT_EQ(s, 2u);
  EXPECT_EQ(i, 1u);
  EXPECT_THROW(ds->locate(50), Error);
  EXPECT_TRUE(verify_path(dir.str()).ok());
}

TEST(Dataset, RefusesToOverwriteADataset) {
  TempDir dir;
  write_dataset(dir.str(), 3);
  try {
    DatasetWriter w(dir.str(), image_schema());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(Dataset, MissingManifestIsNotFound) {
  TempDir dir;
  try {
    Dataset::open(dir.str());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("not a stoker dataset"), std::string::npos);
  }
}

TEST(Dataset, FlippedByteAnywhereIsCaughtAndNamed) {
  TempDir dir;
  Manifest m = write_dataset(dir.str(), 12, 8192);
  std::vector<std::string> files = {kManifestName};
  for (auto& s : m.shards) files.push_back(s.name);
  for (const std::string& name : files) {
    const std::string path = dir.str(name);
    const auto original = testing::read_file(path);
    // Sample positions across the whole file, both ends included.
    for (size_t pos = 0; pos < original.size(); pos += std::max<size_t>(1, original.size() / 97)) {
      auto bytes = original;
      bytes[pos] ^= 0x10;
      testing::write_file(path, bytes);
      VerifyReport rep = verify_path(dir.str());
      ASSERT_FALSE(rep.ok()) << name << " flip at " << pos;
      EXPECT_NE(rep.problems[0].file.find(name), std::string::npos) << rep.problems[0].to_string();
    }
    testing::write_file(path, original);
  }
  EXPECT_TRUE(verify_path(dir.str()).ok());
}

TEST(Dataset, ReplacedShardIsDetected) {
  TempDir a, b;
  write_dataset(a.str(), 12, 8192);
  // Same layout, different content: a valid shard in its own right.
  DatasetWriterOptions opt;
  opt.shard_size = 8192;
  DatasetWriter w(b.str(), image_schema(), opt);
  for (int i = 0; i < 12; ++i) {
    auto payload = testing::random_bytes(900 + i % 200, 1000 + i);
    std::vector<uint8_t> label(8, 0);
    std::vector<std::span<const uint8_t>> f{payload, label};
    w.add(f);
  }
  w.finish();
  fs::copy_file(b.str("shard-00001.stk"), a.str("shard-00001.stk"), fs::copy_options::overwrite_existing);
  auto ds = Dataset::open(a.str());
  try {
    ds->shard(1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("shard-00001.stk"), std::string::npos);
  }
  VerifyReport rep = verify_path(a.str());
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.problems[0].where, "manifest");
}

TEST(Dataset, VerifyReportsMissingAndStrayShards) {
  TempDir dir;
  Manifest m = write_dataset(dir.str(), 12, 8192);
  fs::rename(dir.str(m.shards[0].name), dir.str("stray.stk"));
  VerifyReport rep = verify_path(dir.str());
  ASSERT_EQ(rep.problems.size(), 2u);
  bool missing = false, stray = false;
  for (auto& p : rep.problems) {
    missing |= p.reason.find("missing") != std::string::npos;
    stray |= p.reason.find("not listed") != std::string::npos;
  }
  EXPECT_TRUE(missing);
  EXPECT_TRUE(stray);
}

TEST(Manifest, RoundTripsAndIsDeterministic) {
  Manifest m;
  m.schema = Schema{{Field{"tokens", FieldKind::kTokens, DType::kUint16, 1024}}};
  m.class_names = {"a b", "\xc3\xa9t\xc3\xa9", ""};
  m.meta["seq_len"] = "1024";
  m.shards = {ShardEntry{"shard-00000.stk", 10, 12345, 0xdeadbeef}, ShardEntry{"shard-00001.stk", 3, 999, 1}};
  std::string text = m.serialize();
  EXPECT_EQ(text, m.serialize());
  Manifest back = Manifest::parse(text, "M");
  EXPECT_EQ(back.schema, m.schema);
  EXPECT_EQ(back.class_names, m.class_names);
  EXPECT_EQ(back.meta, m.meta);
  EXPECT_EQ(back.shards, m.shards);
}

TEST(Manifest, EverySingleByteFlipIsCaught) {
  Manifest m;
  m.schema = image_schema();
  m.class_names = {"x", "y"};
  m.shards = {ShardEntry{"shard-00000.stk", 10, 12345, 0xdeadbeef}};
  const std::string text = m.serialize();
  for (size_t pos = 0; pos < text.size(); ++pos) {
    for (uint8_t bit : {0x01, 0x20}) {
      std::string bad = text;
      bad[pos] = static_cast<char>(bad[pos] ^ bit);
      try {
        Manifest::parse(bad, "M");
        ADD_FAILURE() << "flip at " << pos << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
      }
    }
  }
}

TEST(Manifest, NamesCannotEscapeTheDirectory) {
  for (const char* name : {"../x.stk", "/etc/passwd", ".hidden", "a/b.stk", "MANIFEST", ".."}) {
    EXPECT_FALSE(is_safe_shard_name(name)) << name;
  }
  EXPECT_TRUE(is_safe_shard_name("shard-00000.stk"));
  // A manifest with a valid CRC but an escaping name is still refused.
  std::string text = "stoker-manifest 1\nfield jpeg jpeg\nshard ../evil.stk 1 100 00000000\nrecords 1\n";
  char crc[32];
  std::snprintf(crc, sizeof crc, "crc32c %08x\n", crc32c(text.data(), text.size()));
  text += crc;
  try {
    Manifest::parse(text, "M");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker
