// The packers (imagefolder, tokens, wds), extract and the sample generators, on data
// the tests make themselves: labels, class names, order, byte-identical round trips,
// --skip-bad accounting, error codes naming the file, and determinism across runs and
// thread counts.
#include "stoker/pack.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/verify.h"
#include "util/tar_builder.h"
#include "util/test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::error_code_of;
using testing::make_jpeg;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::vector<uint8_t> span_vec(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

// Every file under `dir` (relative path -> bytes).
std::map<std::string, std::vector<uint8_t>> tree(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file(e.path().string());
  return out;
}

// ---- imagefolder ------------------------------------------------------------------

struct Expected {
  std::vector<uint8_t> jpeg;
  int64_t label;
  std::string key;  // path relative to the source: the record's __key__
};

// Classes given out of order (and a nested directory) so sorting is exercised.
std::vector<Expected> make_tree(const std::string& src) {
  struct F {
    const char* cls;
    const char* rel;
    int w, h;
  };
  const F files[] = {{"zebra", "b.jpg", 40, 30}, {"zebra", "a.jpg", 33, 17}, {"Apple", "x.jpeg", 64, 48},
                     {"mango", "sub/c.jpg", 21, 50}, {"mango", "a.JPG", 16, 16}, {"mango", "b.jpeg", 50, 20}};
  std::map<std::string, std::map<std::string, std::vector<uint8_t>>> by_class;
  uint32_t seed = 1;
  for (const F& f : files) {
    auto jpeg = make_jpeg(f.w, f.h, seed++);
    fs::create_directories(fs::path(src) / f.cls / fs::path(f.rel).parent_path());
    write_file(src + "/" + f.cls + "/" + f.rel, jpeg);
    by_class[f.cls][f.rel] = jpeg;
  }
  write_file(src + "/README.txt", {'h', 'i'});  // top-level files are ignored
  // Byte-wise order: "Apple" < "mango" < "zebra"; "a.JPG" < "b.jpeg" < "sub/c.jpg".
  std::vector<Expected> out;
  int64_t label = 0;
  for (auto& [cls, files_of] : by_class) {
    for (auto& [rel, bytes] : files_of) out.push_back({bytes, label, cls + "/" + rel});
    ++label;
  }
  return out;
}

TEST(PackImageFolder, LabelsClassNamesAndOrder) {
  TempDir tmp;
  auto want = make_tree(tmp.str("src"));
  ImageFolderPackOptions o;
  o.threads = 2;
  PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_EQ(s.records, want.size());
  EXPECT_EQ(s.shards, 1u);
  EXPECT_TRUE(s.skipped.empty());
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->schema().to_string(), "__key__:text image:image label:int64");
  EXPECT_EQ(ds->manifest().version, 2u);
  EXPECT_EQ(ds->manifest().class_names, (std::vector<std::string>{"Apple", "mango", "zebra"}));
  ASSERT_EQ(ds->record_count(), want.size());
  uint64_t jpeg_bytes = 0, key_bytes = 0;
  for (uint64_t i = 0; i < want.size(); ++i) {
    Record r = ds->read(i);
    EXPECT_EQ(record_key(ds->schema(), r), want[i].key) << "record " << i;
    EXPECT_EQ(span_vec(r.fields[1]), want[i].jpeg) << "record " << i;
    EXPECT_EQ(r.int64_field(2), want[i].label) << "record " << i;
    jpeg_bytes += want[i].jpeg.size();
    key_bytes += want[i].key.size();
  }
  EXPECT_EQ(s.input_bytes, jpeg_bytes);
  EXPECT_EQ(s.raw_bytes, jpeg_bytes + key_bytes + 8 * want.size());
  EXPECT_EQ(s.bytes, fs::file_size(ds->shard_path(0)));
}

// Extract writes each record under its __key__: the extracted tree is the source tree.
TEST(PackImageFolder, ExtractGivesTheSourceTreeBack) {
  TempDir tmp;
  auto want = make_tree(tmp.str("src"));
  ImageFolderPackOptions o;
  o.shard_size = 4096;  // several shards
  pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  PackSummary x = extract_dataset(tmp.str("out"), tmp.str("extracted"));
  EXPECT_EQ(x.records, want.size());
  EXPECT_GT(x.shards, 1u);
  auto got = tree(tmp.str("extracted"));
  auto src = tree(tmp.str("src"));
  src.erase("README.txt");  // top-level files are not packed
  EXPECT_EQ(got, src);
}

// v1 image datasets (no keys) still extract as before: class/<index>.jpg.
TEST(PackImageFolder, Version1DatasetExtractsAsBefore) {
  TempDir tmp;
  const std::string root = std::string(STOKER_SOURCE_DIR) + "/tests/data/v1";
  extract_dataset(root + "/images", tmp.str("x"));
  auto got = tree(tmp.str("x"));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got["cat/00000000.jpg"], read_file(root + "/imagefolder_src/cat/0.jpg"));
  EXPECT_EQ(got["cat/00000001.jpg"], read_file(root + "/imagefolder_src/cat/1.jpg"));
  EXPECT_EQ(got["dog/00000002.jpg"], read_file(root + "/imagefolder_src/dog/2.jpg"));
}

TEST(PackImageFolder, SkipBadCountsAndListsBadFiles) {
  TempDir tmp;
  auto want = make_tree(tmp.str("src"));
  write_file(tmp.str("src/mango/notes.txt"), {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  write_file(tmp.str("src/zebra/empty.jpg"), {});
  auto cut = make_jpeg(32, 32, 99);
  cut.resize(40);  // header cut off mid-segment
  write_file(tmp.str("src/Apple/cut.jpg"), cut);
  ImageFolderPackOptions o;
  o.skip_bad = true;
  write_file(tmp.str("src/mango/notes.jpg"), {'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_EQ(s.records, want.size());
  ASSERT_EQ(s.skipped.size(), 3u);
  // Listed in pack order, each naming its file; notes.txt is no image by its name.
  EXPECT_NE(s.skipped[0].find("Apple/cut.jpg"), std::string::npos) << s.skipped[0];
  EXPECT_NE(s.skipped[1].find("mango/notes.jpg"), std::string::npos) << s.skipped[1];
  EXPECT_NE(s.skipped[2].find("zebra/empty.jpg"), std::string::npos) << s.skipped[2];
  auto ds = Dataset::open(tmp.str("out"));
  for (uint64_t i = 0; i < want.size(); ++i) EXPECT_EQ(span_vec(ds->read(i).fields[1]), want[i].jpeg);
}

TEST(PackImageFolder, BadFileWithoutSkipBadIsDataLossNamingIt) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  write_file(tmp.str("src/mango/notes.png"), {'h', 'e', 'l', 'l', 'o'});
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find(tmp.str("src/mango/notes.png")), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.str("out/MANIFEST")));  // no dataset left behind
}

TEST(PackImageFolder, UnreadableFileIsReportedOrSkipped) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permissions do not stop reads";
  TempDir tmp;
  make_tree(tmp.str("src"));
  write_file(tmp.str("src/zebra/locked.jpg"), make_jpeg(8, 8, 5));
  ::chmod(tmp.str("src/zebra/locked.jpg").c_str(), 0);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out")); }, &msg), ErrorCode::kIoError);
  EXPECT_NE(msg.find("locked.jpg"), std::string::npos) << msg;
  ImageFolderPackOptions o;
  o.skip_bad = true;
  EXPECT_EQ(pack_imagefolder(tmp.str("src"), tmp.str("out"), o).skipped.size(), 1u);
}

TEST(PackImageFolder, ByteIdenticalAcrossRunsAndThreadCounts) {
  TempDir tmp;
  const std::string src = tmp.str("src");
  for (int c = 0; c < 4; ++c)
    fs::create_directories(src + "/c" + std::to_string(c));
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 12; ++i)
      write_file(src + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg",
                 make_jpeg(24 + i * 3, 20 + c * 5, static_cast<uint32_t>(c * 100 + i)));
  std::vector<std::map<std::string, std::vector<uint8_t>>> results;
  for (int threads : {1, 2, 2, 3}) {
    ImageFolderPackOptions o;
    o.threads = threads;
    o.shard_size = 16 << 10;
    const std::string out = tmp.str("out" + std::to_string(results.size()));
    PackSummary s = pack_imagefolder(src, out, o);
    EXPECT_GT(s.shards, 2u);
    results.push_back(tree(out));
  }
  for (size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(results[i] == results[0]) << "run " << i << " differs";
  EXPECT_TRUE(results[0].count("MANIFEST"));
}

TEST(PackImageFolder, Align4096PutsEveryRecordOnABlock) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  ImageFolderPackOptions o;
  o.align = 4096;
  pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  auto ds = Dataset::open(tmp.str("out"));
  auto shard = ds->shard(0);
  EXPECT_EQ(shard->header().align, 4096u);
  for (uint64_t i = 0; i < shard->record_count(); ++i) EXPECT_EQ(shard->location(i).offset % 4096, 0u) << i;
}

TEST(PackImageFolder, RefusesToOverwriteADatasetUnlessAsked) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  pack_imagefolder(tmp.str("src"), tmp.str("out"));
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out")); }), ErrorCode::kInvalidArgument);
  ImageFolderPackOptions o;
  o.overwrite = true;
  EXPECT_EQ(pack_imagefolder(tmp.str("src"), tmp.str("out"), o).records, 6u);
}

TEST(PackImageFolder, MissingOrEmptySourceIsAnError) {
  TempDir tmp;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("nope"), tmp.str("out")); }), ErrorCode::kNotFound);
  fs::create_directories(tmp.str("flat"));
  write_file(tmp.str("flat/a.jpg"), make_jpeg(8, 8, 1));
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("flat"), tmp.str("out")); }), ErrorCode::kInvalidArgument);
}

// Decodes a JPEG to RGB with TurboJPEG.
std::vector<uint8_t> decode_rgb(const std::vector<uint8_t>& jpeg) {
  tjhandle h = tjInitDecompress();
  int w = 0, hh = 0, ss = 0, cs = 0;
  EXPECT_EQ(tjDecompressHeader3(h, jpeg.data(), jpeg.size(), &w, &hh, &ss, &cs), 0);
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * hh * 3);
  EXPECT_EQ(tjDecompress2(h, jpeg.data(), jpeg.size(), rgb.data(), w, 0, hh, TJPF_RGB, 0), 0);
  tjDestroy(h);
  return rgb;
}

TEST(PackImageFolder, BaselineRewritesProgressiveJpegsLosslessly) {
  TempDir tmp;
  auto prog = make_jpeg(90, 70, 3, 85, 2, /*progressive=*/true);
  auto base = make_jpeg(40, 30, 4);
  fs::create_directories(tmp.str("src/a"));
  write_file(tmp.str("src/a/0.jpg"), prog);
  write_file(tmp.str("src/a/1.jpg"), base);
  internal::JpegHeader info;
  ASSERT_EQ(internal::check_jpeg_header(prog, &info), "");
  ASSERT_TRUE(info.progressive);
  ImageFolderPackOptions o;
  o.baseline = true;
  PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_EQ(s.rewritten, 1u);
  auto ds = Dataset::open(tmp.str("out"));
  auto stored = span_vec(ds->read(0).fields[1]);
  ASSERT_EQ(internal::check_jpeg_header(stored, &info), "");
  EXPECT_FALSE(info.progressive);
  EXPECT_EQ(decode_rgb(stored), decode_rgb(prog));          // lossless
  EXPECT_EQ(span_vec(ds->read(1).fields[1]), base);          // baseline files untouched
  // Without the option the progressive file is stored as it was.
  pack_imagefolder(tmp.str("src"), tmp.str("out2"));
  EXPECT_EQ(span_vec(Dataset::open(tmp.str("out2"))->read(0).fields[1]), prog);
}

// JPEG, PNG and WebP are told apart by their bytes, not their names.
TEST(PackImageFolder, TakesPngAndWebpSniffedByMagic) {
  TempDir tmp;
  const std::string data = std::string(STOKER_SOURCE_DIR) + "/tests/data/images/";
  const auto png = read_file(data + "tiny.png"), webp = read_file(data + "tiny.webp");
  const auto jpeg = make_jpeg(12, 9, 7);
  fs::create_directories(tmp.str("src/a"));
  fs::create_directories(tmp.str("src/b"));
  write_file(tmp.str("src/a/0.png"), png);
  write_file(tmp.str("src/a/1.jpg"), webp);  // misnamed: a WebP
  write_file(tmp.str("src/b/2.webp"), webp);
  write_file(tmp.str("src/b/3.TIF"), jpeg);  // misnamed: a JPEG
  write_file(tmp.str("src/b/5"), jpeg);      // no extension: not an image by its name, as in ImageFolder
  PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("out"));
  EXPECT_EQ(s.records, 4u);
  EXPECT_TRUE(s.skipped.empty());
  auto ds = Dataset::open(tmp.str("out"));
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> want = {
      {"a/0.png", png}, {"a/1.jpg", webp}, {"b/2.webp", webp}, {"b/3.TIF", jpeg}};
  for (uint64_t i = 0; i < 4; ++i) {
    Record r = ds->read(i);
    EXPECT_EQ(record_key(ds->schema(), r), want[i].first);
    EXPECT_EQ(span_vec(r.fields[1]), want[i].second) << i;
  }
  EXPECT_EQ(image_format_of(ds->read(0).fields[1]), ImageFormat::kPng);
  EXPECT_EQ(image_format_of(ds->read(1).fields[1]), ImageFormat::kWebp);
  // A GIF is not taken, whatever its name.
  write_file(tmp.str("src/b/4.png"), {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0});
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out2")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("b/4.png"), std::string::npos) << msg;
  EXPECT_NE(msg.find("JPEG, PNG or WebP"), std::string::npos) << msg;
}

// #18: `pack imagefolder imgs imgs` wrote into its own source.
TEST(PackImageFolder, OutputInsideTheSourceIsRefused) {
  TempDir tmp;
  make_tree(tmp.str("imgs"));
  for (const std::string& out : {tmp.str("imgs"), tmp.str("imgs/"), tmp.str("imgs/ds"), tmp.str("imgs/zebra/../ds")}) {
    std::string msg;
    EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("imgs"), out); }, &msg), ErrorCode::kInvalidArgument) << out;
    EXPECT_NE(msg.find("would write into what it reads"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(tmp.str("imgs/MANIFEST")));
  EXPECT_FALSE(fs::exists(tmp.str("imgs/ds")));
  // Through a symlink too.
  fs::create_directory_symlink(tmp.str("imgs"), tmp.str("link"));
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("link"), tmp.str("imgs/x")); }), ErrorCode::kInvalidArgument);
  // Next to it is fine.
  EXPECT_EQ(pack_imagefolder(tmp.str("imgs"), tmp.str("ds")).records, 6u);
}

// #18: `extract ds ds` wrote into the dataset.
TEST(Extract, OutputInsideTheDatasetIsRefused) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  pack_imagefolder(tmp.str("src"), tmp.str("ds"));
  const auto before = tree(tmp.str("ds"));
  for (const std::string& out : {tmp.str("ds"), tmp.str("ds/x")}) {
    std::string msg;
    EXPECT_EQ(error_code_of([&] { extract_dataset(tmp.str("ds"), out); }, &msg), ErrorCode::kInvalidArgument) << out;
    EXPECT_NE(msg.find("would write into what it reads"), std::string::npos) << msg;
  }
  EXPECT_EQ(tree(tmp.str("ds")), before);
}

// Cancellation (the CLI's Ctrl-C) stops a pack between records and removes every
// file it wrote: no .tmp, no finished shard, no manifest.
TEST(PackImageFolder, CancelRemovesThePartialOutput) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  std::atomic<bool> cancel{true};
  ImageFolderPackOptions o;
  o.cancel = &cancel;
  o.shard_size = 4096;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out"), o); }, &msg), ErrorCode::kCancelled);
  EXPECT_NE(msg.find("interrupted"), std::string::npos) << msg;
  EXPECT_TRUE(tree(tmp.str("out")).empty()) << msg;
}

// ---- tokens -----------------------------------------------------------------------

template <class T>
std::vector<T> make_stream(size_t n, uint32_t seed, uint32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (auto& t : v) t = static_cast<T>(rng() % vocab);
  return v;
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
void check_rows(const Dataset& ds, const std::vector<T>& stream, uint32_t N) {
  uint64_t row = 0;
  for (uint64_t i = 0; i < ds.record_count(); ++i) {
    Record r = ds.read(i);
    ASSERT_EQ(r.fields[0].size() % ((N + 1) * sizeof(T)), 0u);
    const T* p = reinterpret_cast<const T*>(r.fields[0].data());
    const size_t rows = r.fields[0].size() / ((N + 1) * sizeof(T));
    for (size_t j = 0; j < rows; ++j, ++row)
      for (uint32_t k = 0; k <= N; ++k)
        ASSERT_EQ(p[j * (N + 1) + k], stream[row * N + k]) << "row " << row << " token " << k;
  }
  EXPECT_EQ(row, (stream.size() - 1) / N);
}

TEST(PackTokens, FlatUint16RowsOverlapByOneToken) {
  TempDir tmp;
  auto stream = make_stream<uint16_t>(10007, 1, 50257);
  write_file(tmp.str("train.bin"), as_bytes(stream));
  TokensPackOptions o;
  o.seq_len = 64;
  o.rows_per_record = 7;
  o.threads = 2;
  PackSummary s = pack_tokens(tmp.str("train.bin"), tmp.str("out"), o);
  const uint64_t rows = (10007 - 1) / 64;  // 156
  EXPECT_EQ(s.records, (rows + 6) / 7);
  auto ds = Dataset::open(tmp.str("out"));
  ASSERT_EQ(ds->schema().fields.size(), 1u);
  const Field& f = ds->schema().fields[0];
  EXPECT_EQ(f.name, "tokens");
  EXPECT_EQ(f.kind, FieldKind::kTokens);
  EXPECT_EQ(f.dtype, DType::kUint16);
  EXPECT_EQ(f.seq_len, 64u);
  EXPECT_EQ(ds->manifest().meta.at("seq_len"), "64");
  EXPECT_EQ(ds->manifest().meta.at("dtype"), "uint16");
  EXPECT_EQ(ds->manifest().meta.at("tokens"), "10007");
  EXPECT_EQ(ds->manifest().meta.at("source"), "flat:train.bin");
  // #18: the tail that makes no full row is said, not silently dropped.
  EXPECT_EQ(s.tokens_dropped, 10007u - (rows * 64 + 1));  // 22
  EXPECT_EQ(ds->manifest().meta.at("tokens_dropped"), "22");
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("dropped the last 22 of 10007 tokens"), std::string::npos) << s.notes[0];
  EXPECT_EQ(ds->manifest().version, 2u);
  EXPECT_EQ(ds->schema().key_field(), -1);  // token chunks have no source key
  EXPECT_EQ(ds->read(0).fields[0].size(), 7u * 65 * 2);
  EXPECT_EQ(ds->read(ds->record_count() - 1).fields[0].size(), (rows % 7 ? rows % 7 : 7) * 65 * 2);
  check_rows(*ds, stream, 64);
}

TEST(PackTokens, Uint32ZstdRoundTripsThroughExtract) {
  TempDir tmp;
  // Compressible: a small vocabulary.
  auto stream = make_stream<uint32_t>(300001, 2, 300);
  write_file(tmp.str("t.bin"), as_bytes(stream));
  TokensPackOptions o;
  o.dtype = DType::kUint32;
  o.seq_len = 100;
  o.zstd_level = 3;
  PackSummary s = pack_tokens(tmp.str("t.bin"), tmp.str("out"), o);
  EXPECT_LT(s.stored_bytes, s.raw_bytes / 2);
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->shard(0)->header().compression, Compression::kZstd);
  EXPECT_TRUE(ds->shard(0)->location(0).flags & kRecordZstd);
  // Default rows per record: as many as fit in 256 KiB.
  EXPECT_EQ(ds->read(0).fields[0].size(), (256u * 1024 / (101 * 4)) * 101 * 4);
  check_rows(*ds, stream, 100);
  extract_dataset(tmp.str("out"), tmp.str("x"));
  const uint64_t rows = (stream.size() - 1) / 100;
  std::vector<uint32_t> prefix(stream.begin(), stream.begin() + static_cast<long>(rows * 100 + 1));
  EXPECT_EQ(read_file(tmp.str("x/tokens.bin")), as_bytes(prefix));
}

TEST(PackTokens, ByteIdenticalAcrossThreadCounts) {
  TempDir tmp;
  auto stream = make_stream<uint16_t>(200000, 3, 1000);
  write_file(tmp.str("t.bin"), as_bytes(stream));
  std::vector<std::map<std::string, std::vector<uint8_t>>> results;
  for (int threads : {1, 2, 4}) {
    TokensPackOptions o;
    o.seq_len = 256;
    o.rows_per_record = 16;
    o.zstd_level = 5;
    o.threads = threads;
    o.shard_size = 64 << 10;
    const std::string out = tmp.str("o" + std::to_string(threads));
    EXPECT_GT(pack_tokens(tmp.str("t.bin"), out, o).shards, 1u);
    results.push_back(tree(out));
  }
  EXPECT_TRUE(results[1] == results[0]);
  EXPECT_TRUE(results[2] == results[0]);
}

TEST(PackTokens, BadInputsAreClearErrors) {
  TempDir tmp;
  write_file(tmp.str("odd.bin"), {1, 2, 3});
  TokensPackOptions o;
  o.seq_len = 1;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_tokens(tmp.str("odd.bin"), tmp.str("o1"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("odd.bin"), std::string::npos) << msg;
  write_file(tmp.str("short.bin"), as_bytes(make_stream<uint16_t>(10, 1, 5)));
  o.seq_len = 10;  // needs 11 tokens
  EXPECT_EQ(error_code_of([&] { pack_tokens(tmp.str("short.bin"), tmp.str("o2"), o); }), ErrorCode::kInvalidArgument);
  o.seq_len = 9;  // exactly one row
  EXPECT_EQ(pack_tokens(tmp.str("short.bin"), tmp.str("o3"), o).records, 1u);
  EXPECT_EQ(error_code_of([&] { pack_tokens(tmp.str("missing.bin"), tmp.str("o4"), o); }), ErrorCode::kNotFound);
}

// A Megatron MMapIndexedDataset pair: sequences placed in the .bin with gaps, so the
// packer must follow the pointers.
struct Megatron {
  std::vector<std::vector<uint16_t>> seqs;
  std::vector<int64_t> doc_idx;
};

std::vector<uint8_t> megatron_idx(const std::vector<int32_t>& sizes, const std::vector<int64_t>& ptrs,
                                  const std::vector<int64_t>& docs, uint8_t code = 8, uint64_t version = 1) {
  std::vector<uint8_t> b = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(version, 8);
  b.push_back(code);
  put(sizes.size(), 8);
  put(docs.size(), 8);
  for (int32_t s : sizes) put(static_cast<uint32_t>(s), 4);
  for (int64_t p : ptrs) put(static_cast<uint64_t>(p), 8);
  for (int64_t d : docs) put(static_cast<uint64_t>(d), 8);
  return b;
}

TEST(PackTokens, MegatronPairIsReadInIndexOrder) {
  TempDir tmp;
  std::vector<int32_t> sizes = {5, 300, 1, 77, 1000, 42};
  std::vector<uint8_t> bin;
  std::vector<int64_t> ptrs;
  std::vector<uint16_t> stream;
  uint32_t seed = 10;
  for (int32_t n : sizes) {
    bin.resize(bin.size() + 6, 0xEE);  // a gap the index skips
    ptrs.push_back(static_cast<int64_t>(bin.size()));
    auto seq = make_stream<uint16_t>(static_cast<size_t>(n), seed++, 60000);
    auto b = as_bytes(seq);
    bin.insert(bin.end(), b.begin(), b.end());
    stream.insert(stream.end(), seq.begin(), seq.end());
  }
  write_file(tmp.str("corpus_text_document.bin"), bin);
  write_file(tmp.str("corpus_text_document.idx"), megatron_idx(sizes, ptrs, {0, 2, 3, 6}));
  MegatronIndex idx = read_megatron_index(tmp.str("corpus_text_document.idx"), static_cast<int64_t>(bin.size()));
  EXPECT_EQ(idx.version, 1u);
  EXPECT_EQ(idx.dtype, DType::kUint16);
  EXPECT_EQ(idx.sizes, sizes);
  EXPECT_EQ(idx.pointers, ptrs);
  EXPECT_EQ(idx.doc_idx, (std::vector<int64_t>{0, 2, 3, 6}));

  for (const char* which : {".bin", ".idx"}) {
    TokensPackOptions o;
    o.dtype = DType::kNone;  // taken from the index
    o.seq_len = 32;
    o.rows_per_record = 3;
    const std::string out = tmp.str(std::string("out") + which);
    pack_tokens(tmp.str(std::string("corpus_text_document") + which), out, o);
    auto ds = Dataset::open(out);
    EXPECT_EQ(ds->manifest().meta.at("tokens"), std::to_string(stream.size()));
    EXPECT_EQ(ds->manifest().meta.at("source"), "megatron:corpus_text_document.bin");
    check_rows(*ds, stream, 32);
  }
  TokensPackOptions o;
  o.dtype = DType::kUint32;  // contradicts the index
  o.seq_len = 32;
  EXPECT_EQ(error_code_of([&] { pack_tokens(tmp.str("corpus_text_document.bin"), tmp.str("o5"), o); }),
            ErrorCode::kInvalidArgument);
}

TEST(PackTokens, BadMegatronIndexIsDataLoss) {
  TempDir tmp;
  write_file(tmp.str("d.bin"), std::vector<uint8_t>(100, 1));
  const int64_t bin = 100;
  struct Case {
    const char* what;
    std::vector<uint8_t> idx;
  };
  auto good = megatron_idx({10, 20}, {0, 20}, {0, 2});
  auto bad_magic = good;
  bad_magic[0] = 'X';
  auto huge_count = good;
  huge_count[18 + 7] = 0x10;  // sequence count ~2^60
  auto truncated = good;
  truncated.resize(truncated.size() - 4);
  std::vector<Case> cases = {
      {"bad magic", bad_magic},
      {"version 2", megatron_idx({10}, {0}, {0, 1}, 8, 2)},
      {"unknown dtype", megatron_idx({10}, {0}, {0, 1}, 42)},
      {"count beyond file", huge_count},
      {"truncated", truncated},
      {"pointer past .bin", megatron_idx({10, 20}, {0, 70}, {0, 2})},
      {"negative size", megatron_idx({-1}, {0}, {0, 1})},
      {"doc index decreasing", megatron_idx({1, 1, 1}, {0, 2, 4}, {0, 2, 1, 3})},
      {"doc index not ending at count", megatron_idx({1, 1}, {0, 2}, {0, 1})},
      {"too short", {'M', 'M'}},
  };
  for (auto& c : cases) {
    write_file(tmp.str("d.idx"), c.idx);
    std::string msg;
    EXPECT_EQ(error_code_of([&] { read_megatron_index(tmp.str("d.idx"), bin); }, &msg), ErrorCode::kDataLoss) << c.what;
    EXPECT_NE(msg.find("d.idx"), std::string::npos) << c.what << ": " << msg;
    TokensPackOptions o;
    o.seq_len = 4;
    EXPECT_EQ(error_code_of([&] { pack_tokens(tmp.str("d.idx"), tmp.str("o"), o); }), ErrorCode::kDataLoss) << c.what;
  }
  write_file(tmp.str("d.idx"), good);
  EXPECT_EQ(read_megatron_index(tmp.str("d.idx"), bin).sizes.size(), 2u);
}

// ---- wds --------------------------------------------------------------------------

struct WdsSample {
  std::string key;
  std::vector<uint8_t> jpeg;
  int64_t label;
};

TEST(PackWds, SamplesAreGroupedByKeyAcrossTars) {
  TempDir tmp;
  std::vector<WdsSample> want;
  testing::TarBuilder a;
  for (int i = 0; i < 5; ++i) {
    WdsSample s{"shard0/" + std::to_string(i), make_jpeg(20 + i, 16, static_cast<uint32_t>(i)), i % 3};
    if (i % 2) {  // member order within a sample does not matter
      a.file(s.key + ".cls", std::to_string(s.label) + "\n");
      a.file(s.key + ".jpg", s.jpeg);
    } else {
      a.file(s.key + ".jpg", s.jpeg);
      a.file(s.key + ".cls", std::to_string(s.label));
    }
    want.push_back(s);
  }
  a.header("shard0/", 0, '5');
  a.file("README", "no extension: not part of a sample");
  a.end();
  testing::TarBuilder b;
  const std::string long_key = "long/" + std::string(140, 'k');
  WdsSample l{long_key, make_jpeg(30, 30, 77), 2};
  b.gnu_long_file(long_key + ".jpg", l.jpeg);
  b.gnu_long_file(long_key + ".cls", {'2'});
  want.push_back(l);
  WdsSample p{"pax/" + std::string(120, 'p') + "/s", make_jpeg(12, 40, 78), 0};
  b.pax_file(p.key + ".cls", {'0'}, "a");
  b.pax_file(p.key + ".JPG", p.jpeg, "b");  // extensions are lower-cased
  want.push_back(p);
  b.end();
  write_file(tmp.str("a.tar"), a.bytes);
  write_file(tmp.str("b.tar"), b.bytes);
  WdsPackOptions o;
  o.class_names = {"cat", "dog", "eel"};
  PackSummary s = pack_wds({tmp.str("a.tar"), tmp.str("b.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.records, want.size());
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->schema().to_string(), "__key__:text cls:int64 jpg:image");
  EXPECT_EQ(ds->manifest().class_names, o.class_names);
  ASSERT_EQ(ds->record_count(), want.size());
  for (uint64_t i = 0; i < want.size(); ++i) {
    Record r = ds->read(i);
    EXPECT_EQ(record_key(ds->schema(), r), want[i].key);
    EXPECT_EQ(span_vec(r.fields[2]), want[i].jpeg) << want[i].key;
    EXPECT_EQ(r.int64_field(1), want[i].label) << want[i].key;
  }
  // Round trip through extract: files under their keys, WebDataset-style.
  extract_dataset(tmp.str("out"), tmp.str("x"));
  EXPECT_EQ(read_file(tmp.str("x/" + long_key + ".jpg")), l.jpeg);
  EXPECT_EQ(read_file(tmp.str("x/" + long_key + ".cls")), std::vector<uint8_t>{'2'});
}

// A .npy file as NumPy writes it (version 1.0, header padded to 64 bytes).
std::vector<uint8_t> make_npy(const std::string& descr, const std::vector<size_t>& shape, std::vector<uint8_t> data) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) dims += ", ";
    dims += std::to_string(shape[i]);
  }
  if (shape.size() == 1) dims += ",";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  dict.append((64 - (10 + dict.size() + 1) % 64) % 64, ' ');
  dict += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<uint8_t>(dict.size()));
  out.push_back(static_cast<uint8_t>(dict.size() >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
std::vector<uint8_t> raw_of(std::vector<T> v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// The WebDataset member convention: each extension a field of the kind it implies.
struct TypedTar {
  std::vector<uint8_t> tar;
  std::map<std::string, std::vector<uint8_t>> members;  // name -> bytes, as in the tar
};

TypedTar typed_tar(int n) {
  const std::string data = std::string(STOKER_SOURCE_DIR) + "/tests/data/images/";
  const auto png = read_file(data + "tiny.png");
  const std::vector<std::string> captions = {"a cat", "", "naïve café 東京 🚀", "line\nbreak"};
  TypedTar t;
  testing::TarBuilder b;
  for (int i = 0; i < n; ++i) {
    const std::string k = "part/" + std::to_string(1000 + i);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> m = {
        {k + ".jpg", make_jpeg(10 + i, 8, static_cast<uint32_t>(i))},
        {k + ".seg.png", png},
        {k + ".cls", bytes_of(std::to_string(i % 3))},
        {k + ".txt", bytes_of(captions[static_cast<size_t>(i) % captions.size()])},
        {k + ".json", bytes_of(std::string("{\"i\": ") + std::to_string(i) + "}")},
        {k + ".emb.npy", make_npy("<f4", {2, 3}, raw_of(std::vector<float>{1, 2, 3, 4, 5, float(i)}))},
        {k + ".npy", make_npy("<f4", {static_cast<size_t>(i % 3), 4},
                              raw_of(std::vector<float>(static_cast<size_t>(4 * (i % 3)), float(i))))},
        {k + ".bin", testing::random_bytes(static_cast<size_t>(i * 5), static_cast<uint32_t>(i))},
    };
    for (auto& [name, bytes] : m) {
      b.file(name, bytes);
      t.members[name] = bytes;
    }
  }
  b.end();
  t.tar = b.bytes;
  return t;
}

TEST(PackWds, MembersBecomeTypedFieldsAndExtractGivesThemBack) {
  TempDir tmp;
  TypedTar t = typed_tar(7);
  write_file(tmp.str("t.tar"), t.tar);
  PackSummary s = pack_wds({tmp.str("t.tar")}, tmp.str("out"));
  EXPECT_EQ(s.records, 7u);
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->schema().to_string(),
            "__key__:text bin:bytes cls:int64 emb.npy:ndarray/float32/2x3 jpg:image json:text "
            "npy:vararray/float32/*x4 seg.png:image txt:text");
  const Schema& sc = ds->schema();
  for (uint64_t i = 0; i < 7; ++i) {
    Record r = ds->read(i);
    const std::string k = "part/" + std::to_string(1000 + i);
    EXPECT_EQ(record_key(sc, r), k);
    EXPECT_EQ(span_vec(r.fields[sc.find("jpg")]), t.members[k + ".jpg"]);
    EXPECT_EQ(span_vec(r.fields[sc.find("seg.png")]), t.members[k + ".seg.png"]);
    EXPECT_EQ(r.int64_field(sc.find("cls")), static_cast<int64_t>(i % 3));
    EXPECT_EQ(span_vec(r.fields[sc.find("txt")]), t.members[k + ".txt"]);  // unicode and empty
    EXPECT_EQ(r.fields[sc.find("npy")].size(), 16 * (i % 3));            // 0, 1 or 2 rows of 4 float32
    EXPECT_EQ(r.fields[sc.find("emb.npy")].size(), 24u);
    EXPECT_EQ(span_vec(r.fields[sc.find("bin")]), t.members[k + ".bin"]);
  }
  // extract writes every member back under its own name, byte for byte.
  extract_dataset(tmp.str("out"), tmp.str("x"));
  EXPECT_EQ(tree(tmp.str("x")), t.members);
}

TEST(PackWds, CompressedTarsSimplyWork) {
  TempDir tmp;
  TypedTar t = typed_tar(4);
  write_file(tmp.str("t.tar"), t.tar);
  pack_wds({tmp.str("t.tar")}, tmp.str("plain"));
  const auto want = tree(tmp.str("plain"));
  int tried = 0;
  for (const char* tool : {"gzip", "xz", "zstd", "bzip2"}) {
    const std::string z = tmp.str("t.tar.") + tool;
    const std::string cmd = std::string(tool) + " -c " + tmp.str("t.tar") + " > " + z + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) continue;  // the compressor is not installed
    ++tried;
    const std::string out = tmp.str(std::string("out-") + tool);
    pack_wds({z}, out);
    EXPECT_EQ(tree(out), want) << tool;  // identical datasets
  }
  EXPECT_GE(tried, 2);
}

TEST(PackWds, NpyShapesThatFitNoRuleAreAnErrorNamingBothKeys) {
  TempDir tmp;
  testing::TarBuilder b;
  b.file("a.npy", make_npy("<f4", {2, 3}, std::vector<uint8_t>(24)));
  b.file("b.npy", make_npy("<f4", {2, 4}, std::vector<uint8_t>(32)));
  b.end();
  write_file(tmp.str("t.tar"), b.bytes);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("t.tar")}, tmp.str("out")); }, &msg), ErrorCode::kInvalidArgument);
  for (const char* n : {"'a'", "(2, 3)", "'b'", "(2, 4)"}) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.str("out")));  // found before anything was written

  testing::TarBuilder c;
  c.file("a.npy", make_npy("<f4", {2}, std::vector<uint8_t>(8)));
  c.file("b.npy", make_npy("<i8", {2}, std::vector<uint8_t>(16)));
  c.end();
  write_file(tmp.str("c.tar"), c.bytes);
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("c.tar")}, tmp.str("out")); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;
}

TEST(PackWds, IncompleteSampleIsAnErrorOrSkipped) {
  TempDir tmp;
  testing::TarBuilder b;
  auto j = make_jpeg(8, 8, 1);
  b.file("a.jpg", j);
  b.file("a.txt", "first");
  b.file("b.jpg", j);  // no .txt
  b.file("c.jpg", j);
  b.file("c.txt", "third");
  b.end();
  write_file(tmp.str("t.tar"), b.bytes);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("t.tar")}, tmp.str("out")); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("sample 'b' has no 'txt' member"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--skip-incomplete"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
  WdsPackOptions o;
  o.skip_incomplete = true;
  PackSummary s = pack_wds({tmp.str("t.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.records, 2u);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].find("'b'"), std::string::npos) << s.skipped[0];
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->manifest().meta.at("skipped_incomplete"), "1");
  EXPECT_EQ(record_key(ds->schema(), ds->read(1)), "c");
}

TEST(PackWds, BadSamplesAreErrorsNamingTarAndKeyOrSkipped) {
  TempDir tmp;
  testing::TarBuilder t;
  auto good = make_jpeg(16, 16, 1);
  t.file("ok1.jpg", good);
  t.file("ok1.cls", "1");
  t.file("badlabel.jpg", good);
  t.file("badlabel.cls", "one");
  t.file("notjpeg.jpg", "GIF89a....");
  t.file("notjpeg.cls", "0");
  t.file("big.jpg", good);
  t.file("big.cls", "7");  // >= class count
  t.file("ok2.jpg", good);
  t.file("ok2.cls", "0");
  t.end();
  write_file(tmp.str("t.tar"), t.bytes);
  WdsPackOptions o;
  o.class_names = {"a", "b"};
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("t.tar")}, tmp.str("out"), o); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("t.tar"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'badlabel'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("badlabel.cls"), std::string::npos) << msg;  // the member too
  o.skip_bad = true;
  PackSummary s = pack_wds({tmp.str("t.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.records, 2u);
  ASSERT_EQ(s.skipped.size(), 3u);
  const char* keys[] = {"'badlabel'", "'notjpeg'", "'big'"};
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(s.skipped[i].find(keys[i]), std::string::npos) << s.skipped[i];
  EXPECT_NE(s.skipped[1].find("JPEG, PNG or WebP"), std::string::npos) << s.skipped[1];
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->read(0).int64_field(1), 1);
  EXPECT_EQ(ds->read(1).int64_field(1), 0);
}

TEST(PackWds, MalformedTarIsDataLoss) {
  TempDir tmp;
  testing::TarBuilder t;
  t.file("../x.jpg", make_jpeg(8, 8, 1));
  t.end();
  write_file(tmp.str("t.tar"), t.bytes);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("t.tar")}, tmp.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("t.tar"), std::string::npos) << msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("none.tar")}, tmp.str("out")); }), ErrorCode::kNotFound);
}

TEST(PackWds, ByteIdenticalAcrossThreadCounts) {
  TempDir tmp;
  testing::TarBuilder t;
  for (int i = 0; i < 40; ++i) {
    t.file("s" + std::to_string(i) + ".jpg", make_jpeg(16 + i, 16, static_cast<uint32_t>(i)));
    t.file("s" + std::to_string(i) + ".cls", std::to_string(i % 4));
  }
  t.end();
  write_file(tmp.str("t.tar"), t.bytes);
  std::vector<std::map<std::string, std::vector<uint8_t>>> results;
  for (int threads : {1, 2}) {
    WdsPackOptions o;
    o.threads = threads;
    o.shard_size = 8192;
    pack_wds({tmp.str("t.tar")}, tmp.str("o" + std::to_string(threads)), o);
    results.push_back(tree(tmp.str("o" + std::to_string(threads))));
  }
  EXPECT_GT(results[0].size(), 2u);
  EXPECT_TRUE(results[0] == results[1]);
}

// ---- extract ----------------------------------------------------------------------

Schema image_schema() {
  Schema s;
  s.fields = {Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}};
  return s;
}

TEST(Extract, RefusesToWriteOutsideTheOutputDirectory) {
  TempDir tmp;
  {
    DatasetWriter w(tmp.str("ds"), image_schema());
    w.manifest().class_names = {"ok", "../escape"};
    auto j = make_jpeg(8, 8, 1);
    auto label = internal::le64(1);
    const std::span<const uint8_t> f[] = {j, label};
    w.add(f);
    w.finish();
  }
  std::string msg;
  EXPECT_EQ(error_code_of([&] { extract_dataset(tmp.str("ds"), tmp.str("x")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("../escape"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.str("escape")));

  // A symlink planted where a class directory goes is not followed.
  {
    DatasetWriter w(tmp.str("ds2"), image_schema());
    w.manifest().class_names = {"cls"};
    auto j = make_jpeg(8, 8, 1);
    auto label = internal::le64(0);
    const std::span<const uint8_t> f[] = {j, label};
    w.add(f);
    w.finish();
  }
  fs::create_directories(tmp.str("elsewhere"));
  fs::create_directories(tmp.str("y"));
  fs::create_directory_symlink(tmp.str("elsewhere"), tmp.str("y/cls"));
  EXPECT_EQ(error_code_of([&] { extract_dataset(tmp.str("ds2"), tmp.str("y")); }), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(tmp.str("elsewhere")));
}

TEST(Extract, OtherSchemasGetOneFilePerField) {
  TempDir tmp;
  Schema s;
  s.fields = {Field{"blob", FieldKind::kBytes}, Field{"n", FieldKind::kInt64}};
  auto blob = testing::random_bytes(100, 1);
  {
    DatasetWriter w(tmp.str("ds"), s);
    auto n = internal::le64(-5);
    const std::span<const uint8_t> f[] = {blob, n};
    w.add(f);
    w.finish();
  }
  extract_dataset(tmp.str("ds"), tmp.str("x"));
  EXPECT_EQ(read_file(tmp.str("x/00000000.blob")), blob);
  auto n = internal::le64(-5);
  EXPECT_EQ(read_file(tmp.str("x/00000000.n")), std::vector<uint8_t>(n.begin(), n.end()));
}

// ---- trust: atomic writes, refusing what training would fail on -------------------

// Every record of the dataset at `dir`, field by field.
std::vector<std::vector<std::vector<uint8_t>>> records_of(const std::string& dir) {
  auto ds = Dataset::open(dir);
  std::vector<std::vector<std::vector<uint8_t>>> out;
  for (uint64_t i = 0; i < ds->record_count(); ++i) {
    Record r = ds->read(i);
    out.emplace_back();
    for (auto f : r.fields) out.back().push_back(span_vec(f));
  }
  return out;
}

bool any_pending_file(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(kPendingMarker) != std::string::npos) return true;
  return false;
}

TEST(PackOverwrite, AFailedOrCancelledOverwriteLeavesTheOldDatasetWhole) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  ImageFolderPackOptions o;
  o.shard_size = 4096;  // several shards, so some are finished when the run stops
  pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  const auto old = records_of(tmp.str("out"));
  const auto old_files = tree(tmp.str("out"));
  ASSERT_GT(old_files.size(), 2u);

  // A bad file at the end fails the overwrite after shards were finished.
  write_file(tmp.str("src/zebra/zz.jpg"), {'n', 'o'});
  o.overwrite = true;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out"), o); }), ErrorCode::kDataLoss);
  EXPECT_EQ(tree(tmp.str("out")), old_files);
  EXPECT_EQ(records_of(tmp.str("out")), old);
  EXPECT_TRUE(verify_path(tmp.str("out")).ok());

  // Cancelled: the same.
  fs::remove(tmp.str("src/zebra/zz.jpg"));
  std::atomic<bool> cancel{true};
  o.cancel = &cancel;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out"), o); }), ErrorCode::kCancelled);
  EXPECT_EQ(tree(tmp.str("out")), old_files);

  // A writer dropped without finish() (an exception anywhere, ENOSPC) removes its shards.
  {
    Schema schema;
    schema.fields = {Field{"blob", FieldKind::kBytes}};
    DatasetWriterOptions wo;
    wo.shard_size = 4096;
    DatasetWriter w(tmp.str("out"), schema, wo, true);
    auto blob = testing::random_bytes(3000, 1);
    const std::span<const uint8_t> f[] = {blob};
    for (int i = 0; i < 5; ++i) w.add(f);
  }
  EXPECT_EQ(tree(tmp.str("out")), old_files);

  // A successful overwrite replaces it, with plain shard names and nothing pending.
  o.cancel = nullptr;
  o.shard_size = 1 << 20;
  pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_TRUE(verify_path(tmp.str("out")).ok());
  EXPECT_TRUE(fs::exists(tmp.str("out/shard-00000.stk")));
  EXPECT_FALSE(fs::exists(tmp.str("out/shard-00001.stk")));  // the old extra shards are gone
  EXPECT_FALSE(any_pending_file(tmp.str("out")));
  EXPECT_EQ(records_of(tmp.str("out")), old);  // same input, same records
}

TEST(PackOverwrite, LeftoversOfAKilledWriterAreIgnoredByVerifyAndRemovedByTheNextWriter) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  pack_imagefolder(tmp.str("src"), tmp.str("out"));
  write_file(tmp.str("out/shard-00000.stk.pending-1-2-3"), {1, 2, 3});
  write_file(tmp.str("out/shard-00001.stk.pending-1-2-3.tmp"), {1, 2, 3});
  write_file(tmp.str("out/MANIFEST.pending-1-2-3"), {1, 2, 3});
  EXPECT_TRUE(verify_path(tmp.str("out")).ok());
  ImageFolderPackOptions o;
  o.overwrite = true;
  pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_FALSE(any_pending_file(tmp.str("out")));
}

// A commit killed after its MANIFEST went live and before the old shards went leaves
// old shards that no manifest names (an old dataset of more shards than the new one):
// verify notes them without failing, and the next writer removes those of its naming.
TEST(PackOverwrite, OldShardsAKilledCommitLeftAreNotedByVerifyAndRemovedByTheNextWriter) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  pack_imagefolder(tmp.str("src"), tmp.str("out"));
  write_file(tmp.str("out/shard-00007.stk"), {1, 2, 3});
  write_file(tmp.str("out/shard-000123.stk"), {1, 2, 3});
  write_file(tmp.str("out/notes-00001.stk"), {1, 2, 3});  // another writer's prefix
  VerifyReport r = verify_path(tmp.str("out"));
  EXPECT_TRUE(r.ok()) << r.problems[0].to_string();
  EXPECT_EQ(r.notes.size(), 3u);
  ImageFolderPackOptions o;
  o.overwrite = true;
  pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_FALSE(fs::exists(tmp.str("out/shard-00007.stk")));
  EXPECT_FALSE(fs::exists(tmp.str("out/shard-000123.stk")));
  EXPECT_TRUE(fs::exists(tmp.str("out/notes-00001.stk")));
  EXPECT_TRUE(fs::exists(tmp.str("out/shard-00000.stk")));
  r = verify_path(tmp.str("out"));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.notes.size(), 1u);
  // A .stk file of no writer's naming is a problem.
  write_file(tmp.str("out/shard-7.stk"), {1, 2, 3});
  r = verify_path(tmp.str("out"));
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].reason.find("not listed"), std::string::npos);
}

TEST(PackImageFolder, TruncatedImagesAreRefusedOrSkippedByName) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  auto cut = make_jpeg(96, 64, 7);
  cut.resize(cut.size() * 2 / 3);  // the header is whole, the scan is cut
  write_file(tmp.str("src/mango/cut.jpg"), cut);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("mango/cut.jpg"), std::string::npos) << msg;
  EXPECT_NE(msg.find("remature end"), std::string::npos) << msg;
  ImageFolderPackOptions o;
  o.skip_bad = true;
  PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("out"), o);
  EXPECT_EQ(s.records, 6u);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].find("mango/cut.jpg"), std::string::npos) << s.skipped[0];
  // Header checks only: packed as it is.
  o.skip_bad = false;
  o.overwrite = true;
  o.check_decode = false;
  EXPECT_EQ(pack_imagefolder(tmp.str("src"), tmp.str("out"), o).records, 7u);
}

TEST(PackImageFolder, FilesThatAreNotImagesByNameAreIgnoredAndCounted) {
  TempDir tmp;
  auto want = make_tree(tmp.str("src"));
  write_file(tmp.str("src/mango/.DS_Store"), {0, 0, 0, 1, 'B', 'u', 'd', '1'});
  write_file(tmp.str("src/zebra/Thumbs.db"), {0xD0, 0xCF, 0x11, 0xE0});
  write_file(tmp.str("src/Apple/README"), {'h', 'i'});
  PackSummary s = pack_imagefolder(tmp.str("src"), tmp.str("out"));
  EXPECT_EQ(s.records, want.size());
  EXPECT_TRUE(s.skipped.empty());
  bool noted = false;
  for (const std::string& n : s.notes) noted |= n.find("ignored 3 files") != std::string::npos;
  EXPECT_TRUE(noted) << (s.notes.empty() ? "" : s.notes[0]);
}

TEST(PackWds, JpegAndJpgAreOneField) {
  TempDir tmp;
  testing::TarBuilder b;
  auto j = make_jpeg(8, 8, 1);
  b.file("a.jpg", j);
  b.file("a.cls", "0");
  b.file("b.jpeg", j);
  b.file("b.cls", "1");
  b.file("c.JPEG", j);
  b.file("c.cls", "1");
  b.end();
  write_file(tmp.str("t.tar"), b.bytes);
  WdsPackOptions o;
  o.skip_incomplete = true;
  PackSummary s = pack_wds({tmp.str("t.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.records, 3u);
  EXPECT_TRUE(s.skipped.empty());
  auto ds = Dataset::open(tmp.str("out"));
  EXPECT_EQ(ds->schema().fields.size(), 3u);  // __key__ cls jpg
  EXPECT_GE(ds->schema().find("jpg"), 0);
}

TEST(PackWds, APackOfZeroRecordsIsAnError) {
  TempDir tmp;
  testing::TarBuilder b;
  b.file("a.jpg", "not a jpeg");
  b.file("b.jpg", "not one either");
  b.end();
  write_file(tmp.str("t.tar"), b.bytes);
  WdsPackOptions o;
  o.skip_bad = true;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("t.tar")}, tmp.str("out"), o); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("0 records"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;  // the first reason
  EXPECT_FALSE(fs::exists(tmp.str("out/MANIFEST")));
}

TEST(PackWds, TruncatedTarNamesTarAndOffsetAndSkipBadKeepsWhatWasRead) {
  TempDir tmp;
  testing::TarBuilder b;
  auto j = make_jpeg(16, 16, 1);
  for (const char* k : {"a", "b", "c", "d"}) {
    b.file(std::string(k) + ".jpg", j);
    b.file(std::string(k) + ".cls", "0");
  }
  b.end();
  auto bytes = b.bytes;
  // Cut inside the fourth sample's image (its 512-byte header holds its name first).
  const std::string name = "d.jpg";
  const auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(at, bytes.end());
  bytes.resize(static_cast<size_t>(at - bytes.begin()) + 512 + 100);
  write_file(tmp.str("t.tar"), bytes);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_wds({tmp.str("t.tar")}, tmp.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("t.tar"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at byte"), std::string::npos) << msg;
  WdsPackOptions o;
  o.skip_bad = true;
  PackSummary s = pack_wds({tmp.str("t.tar")}, tmp.str("out"), o);
  EXPECT_EQ(s.records, 3u);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].find("rest of the tar"), std::string::npos) << s.skipped[0];
}

TEST(PackTokens, AnEosThatNeverOccursIsAnError) {
  TempDir tmp;
  std::vector<uint16_t> stream(1000);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<uint16_t>(i % 500);
  write_file(tmp.str("t.bin"), as_bytes(stream));
  TokensPackOptions o;
  o.seq_len = 16;
  o.eos = 999;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_tokens(tmp.str("t.bin"), tmp.str("out"), o); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("never occurs"), std::string::npos) << msg;
  o.eos = 499;
  EXPECT_GT(pack_tokens(tmp.str("t.bin"), tmp.str("out"), o).records, 0u);
}

// A fast-crop JPEG whose index is damaged (a byte of it flipped).
std::vector<uint8_t> damaged_fast_crop_jpeg() {
  FastCropOptions fo;
  fo.target_interval = 1;
  auto j = jpeg_for_fast_crop(make_jpeg(128, 96, 3), fo);
  const std::string tag = "STKRST";
  auto at = std::search(j.begin(), j.end(), tag.begin(), tag.end());
  EXPECT_NE(at, j.end());
  at[static_cast<ptrdiff_t>(tag.size() + 12)] ^= 0x40;
  return j;
}

TEST(Verify, ChecksWhatTheReaderChecksNotOnlyChecksums) {
  TempDir tmp;
  // An image field whose fast-crop index was damaged before it was packed.
  auto bad = damaged_fast_crop_jpeg();
  EXPECT_THROW(check_fast_crop_index(bad), Error);
  {
    Schema s;
    s.fields = {Field{"image", FieldKind::kImage}};
    internal::add_key_field(s);
    DatasetWriter w(tmp.str("img"), s);
    const std::string key = "cat/1.jpg";
    const std::span<const uint8_t> f[] = {internal::as_bytes(key), bad};
    w.add(f);
    w.finish();
  }
  VerifyReport r = verify_path(tmp.str("img"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.problems[0].to_string().find("fast-crop index"), std::string::npos) << r.problems[0].to_string();
  EXPECT_NE(r.problems[0].to_string().find("cat/1.jpg"), std::string::npos) << r.problems[0].to_string();
  // Pack refuses it in the first place.
  fs::create_directories(tmp.str("src/c"));
  write_file(tmp.str("src/c/1.jpg"), bad);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(tmp.str("src"), tmp.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("fast-crop index"), std::string::npos) << msg;

  // Token records whose doc_starts break the reader's rules (not increasing).
  {
    Schema s;
    s.fields = {Field{"tokens", FieldKind::kTokens, DType::kUint16, 4},
                Field{"doc_starts", FieldKind::kVarArray, DType::kInt32, 0, {}}};
    DatasetWriter w(tmp.str("tok"), s);
    std::vector<uint16_t> row = {1, 2, 3, 4, 5};
    std::vector<int32_t> starts = {0, 3, 2};
    const std::span<const uint8_t> f[] = {{reinterpret_cast<const uint8_t*>(row.data()), 10},
                                          {reinterpret_cast<const uint8_t*>(starts.data()), 12}};
    w.add(f);
    w.finish();
  }
  r = verify_path(tmp.str("tok"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.problems[0].reason.find("does not increase"), std::string::npos) << r.problems[0].to_string();
}

// Flips a byte in the middle of record 1's image data.
void corrupt_record_1(const std::string& dir) {
  auto ds = Dataset::open(dir);
  auto [s, r] = ds->locate(1);
  const RecordLocation l = ds->shard(s)->location(r);
  const std::string path = ds->shard_path(s);
  ds.reset();
  auto bytes = read_file(path);
  bytes[l.offset + l.stored_size - 20] ^= 0xFF;
  write_file(path, bytes);
}

TEST(Extract, AChecksumErrorNamesTheKeyAndSkipBadSkipsTheRecord) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  pack_imagefolder(tmp.str("src"), tmp.str("ds"));
  corrupt_record_1(tmp.str("ds"));
  const std::string key = "mango/a.JPG";  // record 1 in byte-wise order
  VerifyReport r = verify_path(tmp.str("ds"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.problems[0].where.find(key), std::string::npos) << r.problems[0].to_string();
  std::string msg;
  EXPECT_EQ(error_code_of([&] { extract_dataset(tmp.str("ds"), tmp.str("x")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find(key), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.str("x")));  // nothing half-written
  ExtractOptions o;
  o.skip_bad = true;
  PackSummary s = extract_dataset(tmp.str("ds"), tmp.str("x"), o);
  EXPECT_EQ(s.records, 5u);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_FALSE(fs::exists(tmp.str("x/") + key));
  EXPECT_TRUE(fs::exists(tmp.str("x/mango/b.jpeg")));
}

TEST(Extract, OutputAppearsWholeOrNotAtAll) {
  TempDir tmp;
  make_tree(tmp.str("src"));
  pack_imagefolder(tmp.str("src"), tmp.str("ds"));
  std::atomic<bool> cancel{true};
  ExtractOptions o;
  o.cancel = &cancel;
  EXPECT_EQ(error_code_of([&] { extract_dataset(tmp.str("ds"), tmp.str("x"), o); }), ErrorCode::kCancelled);
  EXPECT_FALSE(fs::exists(tmp.str("x")));
  for (const auto& e : fs::directory_iterator(tmp.path())) EXPECT_EQ(e.path().filename().string().find(".x."), std::string::npos) << e.path();
  // An existing empty directory is fine; one with files in it is refused.
  fs::create_directories(tmp.str("y"));
  extract_dataset(tmp.str("ds"), tmp.str("y"));
  EXPECT_TRUE(fs::exists(tmp.str("y/mango/b.jpeg")));
  std::string msg;
  EXPECT_EQ(error_code_of([&] { extract_dataset(tmp.str("ds"), tmp.str("y")); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("not empty"), std::string::npos) << msg;
}

// ---- samples and progress ---------------------------------------------------------

TEST(SampleData, ImageFolderIsDeterministicAndPacks) {
  TempDir tmp;
  SampleImageFolderOptions o;
  o.images = 12;
  o.classes = 3;
  o.seed = 5;
  o.progressive_frac = 0.25;
  o.threads = 1;
  PackSummary a = make_sample_imagefolder(tmp.str("a"), o);
  o.threads = 2;
  make_sample_imagefolder(tmp.str("b"), o);
  EXPECT_EQ(a.records, 12u);
  auto ta = tree(tmp.str("a")), tb = tree(tmp.str("b"));
  EXPECT_EQ(ta.size(), 12u);
  EXPECT_TRUE(ta == tb);
  int progressive = 0;
  for (auto& [name, bytes] : ta) {
    internal::JpegHeader info;
    ASSERT_EQ(internal::check_jpeg_header(bytes, &info), "") << name;
    EXPECT_GE(std::min(info.width, info.height), 100) << name;
    progressive += info.progressive;
  }
  EXPECT_GT(progressive, 0);
  EXPECT_LT(progressive, 12);
  o.seed = 6;
  make_sample_imagefolder(tmp.str("c"), o);
  EXPECT_FALSE(tree(tmp.str("c")) == ta);
  EXPECT_EQ(pack_imagefolder(tmp.str("a"), tmp.str("ds")).records, 12u);
}

TEST(SampleData, TokensAreDeterministicBoundedAndCompressible) {
  TempDir tmp;
  SampleTokensOptions o;
  o.tokens = 100000;
  o.vocab = 1000;
  o.seed = 3;
  make_sample_tokens(tmp.str("a.bin"), o);
  make_sample_tokens(tmp.str("b.bin"), o);
  auto a = read_file(tmp.str("a.bin"));
  EXPECT_EQ(a.size(), 200000u);
  EXPECT_EQ(a, read_file(tmp.str("b.bin")));
  std::vector<uint16_t> t(a.size() / 2);
  std::memcpy(t.data(), a.data(), a.size());
  std::map<uint16_t, int> freq;
  for (uint16_t v : t) {
    ASSERT_LT(v, 1000);
    ++freq[v];
  }
  EXPECT_GT(freq[0] + freq[1], freq[500] + freq[501] + 10);  // Zipf-like: low ranks dominate
  TokensPackOptions p;
  p.seq_len = 128;
  p.zstd_level = 3;
  PackSummary s = pack_tokens(tmp.str("a.bin"), tmp.str("ds"), p);
  EXPECT_LT(s.stored_bytes * 10, s.raw_bytes * 9);  // compresses
}

TEST(OrderedParallelFor, ConsumesInOrderAndReportsTheFirstFailureInOrder) {
  for (int threads : {1, 2, 4}) {
    std::vector<size_t> seen;
    internal::ordered_parallel_for<size_t>(
        1000, threads, 8, [](size_t i) { return i * i; },
        [&](size_t i, size_t&& v) {
          EXPECT_EQ(v, i * i);
          seen.push_back(i);
        });
    ASSERT_EQ(seen.size(), 1000u);
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i) << threads;
    // Items 700 and 300 fail; whichever thread finishes first, 300 is reported and
    // nothing at or after it is consumed.
    size_t consumed = 0;
    std::string msg;
    EXPECT_EQ(error_code_of(
                  [&] {
                    internal::ordered_parallel_for<int>(
                        1000, threads, 16,
                        [](size_t i) {
                          if (i == 700 || i == 300) throw_error(ErrorCode::kDataLoss, "item " + std::to_string(i));
                          return 0;
                        },
                        [&](size_t, int&&) { ++consumed; });
                  },
                  &msg),
              ErrorCode::kDataLoss);
    EXPECT_EQ(msg, "item 300");
    EXPECT_EQ(consumed, 300u);
  }
}

TEST(Progress, LineShowsRatesAndEta) {
  std::string line = internal::ProgressReporter::format_line("pack", 50, 50 << 20, 100, 100 << 20, 10.0);
  EXPECT_NE(line.find("50/100 records"), std::string::npos) << line;
  EXPECT_NE(line.find("5 rec/s"), std::string::npos) << line;
  EXPECT_NE(line.find("5.0 MiB/s"), std::string::npos) << line;
  EXPECT_NE(line.find("50%"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 10s"), std::string::npos) << line;
}

}  // namespace
}  // namespace stoker

#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <csignal>

namespace stoker {
namespace {

// Runs pack_imagefolder(src, out) in a child process after `setup` (which may change
// the child's limits or mounts). Returns "" when it fails to set up ("skip: why"), or
// the outcome: "ok" or the error's message.
std::string pack_in_child(const std::string& src, const std::string& out, const std::function<std::string()>& setup) {
  int fds[2];
  if (::pipe(fds) != 0) return "skip: pipe";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg = setup();
    if (msg.empty()) {
      try {
        ImageFolderPackOptions o;
        o.threads = 1;
        pack_imagefolder(src, out, o);
        msg = "ok";
      } catch (const std::exception& e) {
        msg = e.what();
      }
      // Checked here: a mount made in `setup` is only visible to this process.
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(out, ec))
        if (e.path().extension() == ".tmp") msg += " [left behind: " + e.path().filename().string() + "]";
    }
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "child died with signal " + std::to_string(WTERMSIG(status));
  return msg;
}

void expect_clean_failure(const std::string& out, const std::string& msg, const std::string& reason) {
  EXPECT_NE(msg.find("shard-00000.stk"), std::string::npos) << msg;
  EXPECT_NE(msg.find(reason), std::string::npos) << msg;
  // Nothing that could pass for a dataset, and no half-written file left behind.
  EXPECT_FALSE(fs::exists(fs::path(out) / "MANIFEST"));
  if (fs::exists(out)) {
    for (const auto& e : fs::directory_iterator(out)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  }
  EXPECT_THROW(Dataset::open(out), Error);
}

TEST(PackLimits, DiskFullOrFileSizeLimitIsAClearErrorAndLeavesNoDataset) {
  TempDir tmp;
  SampleImageFolderOptions so;
  so.images = 40;  // ~3 MiB of JPEGs
  so.classes = 2;
  make_sample_imagefolder(tmp.str("src"), so);

  // A file size limit (any user): writes past it fail with EFBIG instead of a signal.
  const std::string out1 = tmp.str("out-fsize");
  const std::string m1 = pack_in_child(tmp.str("src"), out1, [] {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl{256u << 10, 256u << 10};
    return ::setrlimit(RLIMIT_FSIZE, &rl) == 0 ? std::string() : std::string("skip: setrlimit");
  });
  ASSERT_NE(m1, "ok");
  ASSERT_NE(m1.rfind("skip", 0), 0u) << m1;
  std::printf("file size limit: %s\n", m1.c_str());
  expect_clean_failure(out1, m1, std::strerror(EFBIG));

  // A really full filesystem: a 512 KiB tmpfs in a private mount namespace (needs
  // CAP_SYS_ADMIN; skipped without it).
  const std::string mnt = tmp.str("small");
  fs::create_directories(mnt);
  const std::string out2 = mnt + "/out";
  const std::string m2 = pack_in_child(tmp.str("src"), out2, [mnt] {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("skip: unshare: ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return std::string("skip: private mounts");
    if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=512k") != 0)
      return std::string("skip: mount tmpfs: ") + std::strerror(errno);
    return std::string();
  });
  if (m2.rfind("skip", 0) == 0) GTEST_SKIP() << "disk-full case not run: " << m2;
  ASSERT_NE(m2, "ok");
  std::printf("disk full: %s\n", m2.c_str());
  // The tmpfs lived in the child's namespace: what it left is gone with it; the message
  // is what the user sees.
  EXPECT_NE(m2.find("shard-00000.stk"), std::string::npos) << m2;
  EXPECT_NE(m2.find(std::strerror(ENOSPC)), std::string::npos) << m2;
  EXPECT_EQ(m2.find("left behind"), std::string::npos) << m2;
}

}  // namespace
}  // namespace stoker
