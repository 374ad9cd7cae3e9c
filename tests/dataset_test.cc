#include "stoker/dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

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

TEST(Manifest, RoundTripsAndIsDeterministic) {
  Manifest m;
  m.schema = Schema{{Field{"tokens", FieldKind::kTokens, DType::kUint16, 1024}}};
  m.class_names = {"a b", "\xc3\xa9t\xc3\xa9", ""};
  m.meta["seq_len"] = "1024";
  m.shards = {ShardEntry{"shard-00000.stk", 10, 12345, 0xdeadbeef}, ShardEntry{"shard-00001.stk", 3, 999, 1}};
  std::string text = m.serialize();
  EXPECT_EQ(text, m.serialize());
  Manifest back = Manifest::parse(text, "M");
  EXPECT_EQ(back.version, m.version);
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

// A truncated JPEG packed without pack's check has a right checksum: verify passes it,
// verify with decode names it (record, __key__, field and the decoder's reason), and
// only it.
TEST(Dataset, VerifyDecodeNamesAnImageTheLoaderWouldFailOn) {
  TempDir dir;
  {
    DatasetWriter w(dir.str(), Schema{{Field{kKeyField, FieldKind::kText}, Field{"jpeg", FieldKind::kImage}}});
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> jpeg = testing::make_jpeg(64, 48, static_cast<uint32_t>(i));
      if (i == 2) jpeg.resize(jpeg.size() / 2);
      const std::string key = "photo-" + std::to_string(i);
      std::vector<std::span<const uint8_t>> f{{reinterpret_cast<const uint8_t*>(key.data()), key.size()}, jpeg};
      w.add(f);
    }
    w.finish();
  }
  EXPECT_TRUE(verify_path(dir.str()).ok());
  VerifyOptions decode;
  decode.threads = 1;
  decode.decode = true;
  const VerifyReport rep = verify_path(dir.str(), decode);
  EXPECT_EQ(rep.records, 4u);
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0].where, "record 2 (__key__ 'photo-2')");
  EXPECT_NE(rep.problems[0].reason.find("field 'jpeg': JPEG"), std::string::npos) << rep.problems[0].reason;
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

// --- version 2 and version 1 ------------------------------------------------------

TEST(Manifest, Version2FieldLinesCarryDtypeAndShape) {
  Manifest m;
  m.schema = Schema{{Field{"__key__", FieldKind::kText}, Field{"jpg", FieldKind::kImage},
                     Field{"emb", FieldKind::kNdarray, DType::kFloat32, 0, {512}},
                     Field{"boxes", FieldKind::kVarArray, DType::kFloat32, 0, {4}},
                     Field{"ids", FieldKind::kVarArray, DType::kInt64, 0, {}},
                     Field{"score", FieldKind::kFloat64}}};
  m.shards = {ShardEntry{"shard-00000.stk", 1, 5000, 7}};
  const std::string text = m.serialize();
  EXPECT_EQ(text.rfind("stoker-manifest 2\n", 0), 0u) << text;
  EXPECT_NE(text.find("field emb ndarray float32 512\n"), std::string::npos) << text;
  EXPECT_NE(text.find("field boxes vararray float32 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("field ids vararray int64\n"), std::string::npos) << text;
  EXPECT_NE(text.find("field jpg image\n"), std::string::npos) << text;
  Manifest back = Manifest::parse(text, "M");
  EXPECT_EQ(back.version, 2u);
  EXPECT_EQ(back.schema, m.schema);
  // A v1 manifest cannot declare v2 kinds.
  std::string v1 = "stoker-manifest 1\nfield emb ndarray float32 4\nrecords 0\n";
  char crc[32];
  std::snprintf(crc, sizeof crc, "crc32c %08x\n", crc32c(v1.data(), v1.size()));
  EXPECT_THROW(Manifest::parse(v1 + crc, "M"), Error);
  // A v1 manifest serialises as v1 (image is "jpeg" there).
  Manifest old;
  old.version = 1;
  old.schema = image_schema();
  EXPECT_EQ(old.serialize().rfind("stoker-manifest 1\nfield jpeg jpeg\n", 0), 0u);
}

// Datasets packed by the version-1 code (tests/data/v1, written by `stoker pack` at
// the commit before format version 2) open and read exactly as before.
TEST(Dataset, Version1DatasetsStillOpen) {
  const std::string root = std::string(STOKER_SOURCE_DIR) + "/tests/data/v1";
  auto images = Dataset::open(root + "/images");
  EXPECT_EQ(images->manifest().version, 1u);
  EXPECT_EQ(images->schema().to_string(), "jpeg:image label:int64");
  EXPECT_EQ(images->schema().key_field(), -1);
  ASSERT_EQ(images->record_count(), 3u);
  EXPECT_EQ(images->manifest().class_names, (std::vector<std::string>{"cat", "dog"}));
  const char* files[] = {"cat/0.jpg", "cat/1.jpg", "dog/2.jpg"};
  for (uint64_t i = 0; i < 3; ++i) {
    Record r = images->read(i);
    auto want = testing::read_file(root + "/imagefolder_src/" + files[i]);
    EXPECT_EQ(std::vector<uint8_t>(r.fields[0].begin(), r.fields[0].end()), want) << i;
    EXPECT_EQ(r.int64_field(1), i < 2 ? 0 : 1);
    EXPECT_EQ(record_key(images->schema(), r), "");
  }
  EXPECT_TRUE(verify_path(root + "/images").ok());

  auto tokens = Dataset::open(root + "/tokens");
  EXPECT_EQ(tokens->manifest().version, 1u);
  const Field& f = tokens->schema().fields[0];
  EXPECT_EQ(f.kind, FieldKind::kTokens);
  EXPECT_EQ(f.seq_len, 8u);
  auto stream = testing::read_file(root + "/tok.bin");
  uint64_t row = 0;
  for (uint64_t i = 0; i < tokens->record_count(); ++i) {
    Record r = tokens->read(i);
    const size_t row_bytes = 9 * 2;
    for (size_t off = 0; off < r.fields[0].size(); off += row_bytes, ++row)
      ASSERT_EQ(std::memcmp(r.fields[0].data() + off, stream.data() + row * 8 * 2, row_bytes), 0) << row;
  }
  EXPECT_EQ(row, 12u);  // floor((100 - 1) / 8)
  EXPECT_TRUE(verify_path(root + "/tokens").ok());
}

TEST(Dataset, Version2DatasetRoundTripsWithKeys) {
  TempDir dir;
  Schema s{{Field{"__key__", FieldKind::kText}, Field{"v", FieldKind::kVarArray, DType::kUint16, 0, {}}}};
  {
    DatasetWriterOptions o;
    o.shard_size = 4096 + 256;
    DatasetWriter w(dir.str(), s, o);
    for (int i = 0; i < 40; ++i) {
      std::string key = "dir/ключ-" + std::to_string(i);
      std::vector<uint8_t> k(key.begin(), key.end()), v(static_cast<size_t>(2 * (i % 5)), static_cast<uint8_t>(i));
      std::vector<std::span<const uint8_t>> f{k, v};
      w.add(f);
    }
    w.finish();
  }
  auto ds = Dataset::open(dir.str());
  EXPECT_EQ(ds->manifest().version, 2u);
  EXPECT_GT(ds->shard_count(), 1u);
  for (uint64_t i = 0; i < 40; ++i) {
    Record r = ds->read(i);
    EXPECT_EQ(record_key(ds->schema(), r), "dir/ключ-" + std::to_string(i));
    EXPECT_EQ(r.fields[1].size(), 2 * (i % 5));
  }
  EXPECT_TRUE(verify_path(dir.str()).ok());
}

// #18: the wrong thing given as a dataset says what it looks like and how to pack it.
TEST(Dataset, OpeningTheWrongThingSaysWhatItIsAndHowToPackIt) {
  TempDir dir;
  // An ImageFolder (2 class dirs with images).
  for (const char* c : {"cat", "dog"}) {
    fs::create_directories(dir.str(std::string("imgs/") + c));
    testing::write_file(dir.str(std::string("imgs/") + c + "/a.jpg"), testing::make_jpeg(8, 8, 1));
  }
  testing::write_file(dir.str("train.bin"), std::vector<uint8_t>(4096, 1));
  std::vector<uint8_t> tar(1024, 0);
  std::memcpy(&tar[257], "ustar", 5);
  testing::write_file(dir.str("data.tar"), tar);
  testing::write_file(dir.str("odd.tar.gz"), std::vector<uint8_t>{0x1f, 0x8b, 8, 0});
  fs::create_directories(dir.str("plain"));
  testing::write_file(dir.str("plain/notes.txt"), std::vector<uint8_t>{'h', 'i'});
  fs::create_directories(dir.str("tars"));
  testing::write_file(dir.str("tars/shard-000.tar"), tar);
  fs::create_directories(dir.str("half"));
  testing::write_file(dir.str("half/shard-00000.stk.tmp"), std::vector<uint8_t>(10));
  struct Case {
    std::string path;
    ErrorCode code;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {dir.str("imgs"), ErrorCode::kNotFound,
       {"looks like an ImageFolder (2 class dirs with images)", "stoker pack imagefolder " + dir.str("imgs") + " OUT"}},
      {dir.str("train.bin"), ErrorCode::kInvalidArgument,
       {"is a file (4096 bytes)", "token file", "stoker pack tokens " + dir.str("train.bin") + " OUT"}},
      {dir.str("data.tar"), ErrorCode::kInvalidArgument, {"WebDataset tar", "stoker pack wds " + dir.str("data.tar") + " OUT"}},
      {dir.str("odd.tar.gz"), ErrorCode::kInvalidArgument, {"WebDataset tar", "stoker pack wds"}},
      {dir.str("tars"), ErrorCode::kNotFound, {"1 tar file(s)", "stoker pack wds " + dir.str("tars") + "/*.tar OUT"}},
      {dir.str("plain"), ErrorCode::kNotFound, {"not a stoker dataset", "plain directory"}},
      {dir.str("half"), ErrorCode::kNotFound, {"packing did not finish"}},
      {dir.str("missing"), ErrorCode::kNotFound, {dir.str("missing") + " does not exist"}},
  };
  for (const Case& c : cases) {
    try {
      Dataset::open(c.path);
      ADD_FAILURE() << c.path;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), c.code) << e.what();
      for (const auto& n : c.needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace stoker
