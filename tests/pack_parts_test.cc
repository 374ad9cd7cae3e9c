// Packing in parts (--part I/N) and commit_parts: the parts of an input hold the
// records of a one-part pack in the same order; commit refuses missing or killed parts
// by name, is idempotent, lets one of two racing commits publish, lists and cleans
// strays; a part re-run replaces the part.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "stoker/commit.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/pack.h"
#include "stoker/verify.h"
#include "util/test_util.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::error_code_of;
using testing::TempDir;

// An ImageFolder of `per_class` tiny JPEGs in each of 3 classes.
std::string tiny_folder(const TempDir& d, int per_class) {
  const std::string src = d.str("src");
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < per_class; ++i) {
      fs::create_directories(src + "/c" + std::to_string(c));
      char name[64];
      std::snprintf(name, sizeof name, "/c%d/%03d.jpg", c, i);
      testing::write_file(src + name, testing::make_jpeg(24 + i % 5, 16 + c, static_cast<uint32_t>(c * 100 + i)));
    }
  return src;
}

// Every record of the dataset at `dir`, fields as byte strings.
std::vector<std::vector<std::string>> records_of(const std::string& dir) {
  auto ds = Dataset::open(dir);
  std::vector<std::vector<std::string>> out;
  for (uint64_t i = 0; i < ds->record_count(); ++i) {
    Record r = ds->read(i);
    std::vector<std::string> fields;
    for (size_t f = 0; f < ds->schema().fields.size(); ++f) {
      auto b = r.fields[f];
      fields.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
    }
    out.push_back(std::move(fields));
  }
  return out;
}

std::map<std::string, std::string> meta_without_parts(Manifest m) {
  m.meta.erase("parts");
  return m.meta;
}

TEST(PartSpec, ParsesAndCutsContiguousRanges) {
  EXPECT_EQ(PartSpec::parse("3/8").to_string(), "3/8");
  for (const char* bad : {"8/8", "1", "a/2", "1/0", "-1/2", "1/100000", "1/2/3"})
    EXPECT_EQ(error_code_of([&] { PartSpec::parse(bad); }), ErrorCode::kInvalidArgument) << bad;
  for (uint64_t n : {0, 1, 7, 10, 1000}) {
    uint64_t next = 0;
    for (uint32_t i = 0; i < 4; ++i) {
      auto [a, b] = PartSpec{i, 4}.range(n);
      EXPECT_EQ(a, next);
      EXPECT_LE(b - a, n / 4 + 1);
      next = b;
    }
    EXPECT_EQ(next, n);
  }
}

TEST(PackParts, ImageFolderInFourPartsHoldsTheOnePartRecordsInOrder) {
  TempDir d;
  const std::string src = tiny_folder(d, 7);
  ImageFolderPackOptions o;
  o.threads = 2;
  o.shard_size = 4096;
  pack_imagefolder(src, d.str("one"), o);
  for (uint32_t i = 0; i < 4; ++i) {
    o.part = PartSpec{3 - i, 4};  // any order, any machine
    pack_imagefolder(src, d.str("four"), o);
    EXPECT_FALSE(fs::exists(d.str("four/MANIFEST"))) << "a part wrote MANIFEST";
    EXPECT_TRUE(fs::exists(d.str("four/") + part_manifest_name(o.part)));
  }
  const CommitReport r = commit_parts(d.str("four"));
  EXPECT_EQ(r.outcome, CommitReport::Outcome::kCommitted);
  EXPECT_EQ(r.parts, 4u);
  EXPECT_EQ(r.records, 21u);
  EXPECT_TRUE(r.strays.empty());
  EXPECT_EQ(records_of(d.str("four")), records_of(d.str("one")));
  const Manifest a = read_manifest(d.str("one")), b = read_manifest(d.str("four"));
  EXPECT_EQ(b.class_names, a.class_names);
  EXPECT_EQ(meta_without_parts(b), a.meta);
  EXPECT_EQ(b.meta.at("parts"), "4");
  EXPECT_TRUE(verify_path(d.str("four")).ok());
  // Idempotent; a part cannot be written into a committed dataset.
  EXPECT_EQ(commit_parts(d.str("four")).outcome, CommitReport::Outcome::kAlreadyCommitted);
  o.part = PartSpec{1, 4};
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(src, d.str("four"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("already holds a committed dataset"), std::string::npos) << msg;
  // More parts than images: the empty part says so.
  o.part = PartSpec{0, 22};
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(src, d.str("many"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("use at most 21 parts"), std::string::npos) << msg;
}

TEST(PackParts, TokensCutAtRecordsGiveTheOnePartRecordsAndCounts) {
  TempDir d;
  // Documents of varied length, each ending with EOS 0, some crossing the part cuts.
  std::vector<uint8_t> bytes;
  uint32_t x = 1;
  for (int t = 0; t < 5000; ++t) {
    x = x * 1103515245u + 12345u;
    const uint16_t tok = (x >> 16) % 97 == 0 ? 0 : static_cast<uint16_t>(1 + (x >> 16) % 500);
    bytes.push_back(static_cast<uint8_t>(tok));
    bytes.push_back(static_cast<uint8_t>(tok >> 8));
  }
  testing::write_file(d.str("t.bin"), bytes);
  TokensPackOptions o;
  o.seq_len = 16;
  o.rows_per_record = 5;
  o.eos = 0;
  o.threads = 2;
  o.zstd_level = 3;
  pack_tokens(d.str("t.bin"), d.str("one"), o);
  for (uint32_t i = 0; i < 3; ++i) {
    o.part = PartSpec{i, 3};
    pack_tokens(d.str("t.bin"), d.str("three"), o);
  }
  commit_parts(d.str("three"));
  EXPECT_EQ(records_of(d.str("three")), records_of(d.str("one")));
  EXPECT_EQ(meta_without_parts(read_manifest(d.str("three"))), read_manifest(d.str("one")).meta);
}

TEST(PackParts, WdsPartsTakeTheTarsAsGiven) {
  TempDir d;
  SampleWdsOptions so;
  so.samples = 12;
  so.per_tar = 3;
  so.threads = 2;
  make_sample_wds(d.str("tars"), so);
  std::vector<std::string> tars;
  for (const auto& e : fs::directory_iterator(d.str("tars"))) tars.push_back(e.path().string());
  std::sort(tars.begin(), tars.end());
  WdsPackOptions o;
  o.threads = 2;
  pack_wds(tars, d.str("one"), o);
  for (uint32_t i = 0; i < 2; ++i) {
    o.part = PartSpec{i, 2};
    pack_wds(tars, d.str("two"), o);
  }
  commit_parts(d.str("two"));
  EXPECT_EQ(records_of(d.str("two")), records_of(d.str("one")));
}

TEST(CommitParts, RefusesMissingPartsByNameAndReRunReplacesAPart) {
  TempDir d;
  const std::string src = tiny_folder(d, 4);
  ImageFolderPackOptions o;
  o.threads = 1;
  o.shard_size = 4096;
  std::string msg;
  EXPECT_EQ(error_code_of([&] { commit_parts(d.str("out")); }, &msg), ErrorCode::kNotFound);
  o.part = PartSpec{0, 3};
  pack_imagefolder(src, d.str("out"), o);
  o.part = PartSpec{2, 3};
  pack_imagefolder(src, d.str("out"), o);
  EXPECT_EQ(error_code_of([&] { commit_parts(d.str("out")); }, &msg), ErrorCode::kNotFound);
  EXPECT_NE(msg.find("part 1/3: missing"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("part 0/3"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d.str("out/MANIFEST")));
  // Re-running part 2 replaces it: same names, no leftovers.
  auto listing = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(d.str("out"))) names.insert(e.path().filename().string());
    return names;
  };
  const auto before = listing();
  pack_imagefolder(src, d.str("out"), o);
  EXPECT_EQ(listing(), before);
  // A part packed with other options does not merge.
  o.part = PartSpec{1, 3};
  o.fast_crop = true;
  pack_imagefolder(src, d.str("out"), o);
  EXPECT_EQ(error_code_of([&] { commit_parts(d.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("part 1/3: meta baseline"), std::string::npos) << msg;
  o.fast_crop = false;
  pack_imagefolder(src, d.str("out"), o);
  // A stray shard (as a part re-run with another N leaves) is listed, then cleaned.
  fs::copy_file(d.str("out/part-00000-of-00003-00000.stk"), d.str("out/part-00000-of-00005-00000.stk"));
  CommitReport r = commit_parts(d.str("out"));
  EXPECT_EQ(r.outcome, CommitReport::Outcome::kCommitted);
  ASSERT_EQ(r.strays.size(), 1u);
  EXPECT_TRUE(fs::exists(d.str("out/part-00000-of-00005-00000.stk")));
  CommitOptions clean;
  clean.clean = true;
  r = commit_parts(d.str("out"), clean);
  EXPECT_EQ(r.outcome, CommitReport::Outcome::kAlreadyCommitted);
  EXPECT_FALSE(fs::exists(d.str("out/part-00000-of-00005-00000.stk")));
  EXPECT_TRUE(verify_path(d.str("out")).ok());
}

TEST(CommitParts, AShardThatDoesNotMatchItsPartManifestIsRefused) {
  TempDir d;
  const std::string src = tiny_folder(d, 2);
  ImageFolderPackOptions o;
  o.threads = 1;
  for (uint32_t i = 0; i < 2; ++i) {
    o.part = PartSpec{i, 2};
    pack_imagefolder(src, d.str("out"), o);
  }
  const std::string shard = d.str("out/part-00001-of-00002-00000.stk");
  auto bytes = testing::read_file(shard);
  bytes[bytes.size() - 20] ^= 1;  // in the trailer/index
  testing::write_file(shard, bytes);
  std::string msg;
  EXPECT_EQ(error_code_of([&] { commit_parts(d.str("out")); }, &msg), ErrorCode::kDataLoss);
  EXPECT_NE(msg.find("part 1/2: shard part-00001-of-00002-00000.stk"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d.str("out/MANIFEST")));
}

TEST(CommitParts, KilledPartIsNamedAndItsReRunCommitsClean) {
  TempDir d;
  SampleImageFolderOptions so;
  so.images = 60;
  so.classes = 2;
  so.threads = 2;
  make_sample_imagefolder(d.str("src"), so);
  ImageFolderPackOptions o;
  o.threads = 1;
  o.shard_size = 4096;  // a shard per record: pending files appear early
  o.fast_crop = true;   // slow enough to be caught mid-write
  o.part = PartSpec{0, 2};
  pack_imagefolder(d.str("src"), d.str("out"), o);
  o.part = PartSpec{1, 2};
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      pack_imagefolder(d.str("src"), d.str("out"), o);
    } catch (...) {
    }
    ::_exit(0);
  }
  bool seen = false;
  for (int i = 0; i < 20000 && !seen; ++i) {
    for (const auto& e : fs::directory_iterator(d.str("out")))
      if (e.path().filename().string().starts_with("part-00001-of-00002-00001.stk.pending-")) seen = true;
    if (!seen) ::usleep(200);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(seen) << "the part never wrote its second shard";
  ASSERT_FALSE(fs::exists(d.str("out/") + part_manifest_name(o.part))) << "the part finished before the kill";
  std::string msg;
  EXPECT_EQ(error_code_of([&] { commit_parts(d.str("out")); }, &msg), ErrorCode::kNotFound);
  EXPECT_NE(msg.find("part 1/2: missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pending file"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d.str("out/MANIFEST")));
  pack_imagefolder(d.str("src"), d.str("out"), o);
  const CommitReport r = commit_parts(d.str("out"));
  EXPECT_EQ(r.outcome, CommitReport::Outcome::kCommitted);
  EXPECT_EQ(r.records, 60u);
  EXPECT_TRUE(r.strays.empty());  // the re-run removed the killed run's pending files
  const VerifyReport v = verify_path(d.str("out"));
  EXPECT_TRUE(v.ok() && v.notes.empty()) << (v.problems.empty() ? "" : v.problems[0].to_string());
  EXPECT_EQ(v.records, 60u);
}

TEST(CommitParts, OfTwoConcurrentCommitsOnePublishes) {
  TempDir d;
  const std::string src = tiny_folder(d, 2);
  ImageFolderPackOptions o;
  o.threads = 1;
  for (uint32_t i = 0; i < 2; ++i) {
    o.part = PartSpec{i, 2};
    pack_imagefolder(src, d.str("out"), o);
  }
  int lost = 0;
  for (int round = 0; round < 30; ++round) {
    fs::remove(d.str("out/MANIFEST"));
    std::atomic<int> ready{0};
    CommitReport::Outcome got[2];
    auto run = [&](int k) {
      ++ready;
      while (ready.load() < 2) {
      }
      got[k] = commit_parts(d.str("out")).outcome;
    };
    std::thread a(run, 0), b(run, 1);
    a.join();
    b.join();
    const int committed = (got[0] == CommitReport::Outcome::kCommitted) + (got[1] == CommitReport::Outcome::kCommitted);
    EXPECT_EQ(committed, 1) << "round " << round;
    lost += got[0] == CommitReport::Outcome::kCommitLostRace || got[1] == CommitReport::Outcome::kCommitLostRace;
    EXPECT_EQ(Dataset::open(d.str("out"))->record_count(), 6u);
  }
  std::printf("lost races: %d of 30 rounds (the rest: the second found the first's MANIFEST)\n", lost);
}

// --append: a new generation lists the old shards, untouched, then the new ones; a
// Dataset opened before keeps its generation.
TEST(PackAppend, NewGenerationKeepsOldShardsAndOldReaders) {
  TempDir d;
  const std::string src = tiny_folder(d, 3);
  ImageFolderPackOptions o;
  o.threads = 1;
  o.shard_size = 4096;
  pack_imagefolder(src, d.str("ds"), o);
  const auto before = records_of(d.str("ds"));
  auto old_reader = Dataset::open(d.str("ds"));
  const Manifest m1 = old_reader->manifest();
  EXPECT_EQ(manifest_generation(m1), 1u);

  TempDir d2;
  const std::string more = tiny_folder(d2, 2);
  o.append = true;
  const PackSummary s = pack_imagefolder(more, d.str("ds"), o);
  EXPECT_EQ(s.records, 6u);
  const Manifest m2 = read_manifest(d.str("ds"));
  EXPECT_EQ(manifest_generation(m2), 2u);
  ASSERT_EQ(m2.shards.size(), m1.shards.size() + s.shards);
  for (size_t i = 0; i < m1.shards.size(); ++i) EXPECT_EQ(m2.shards[i], m1.shards[i]);
  EXPECT_TRUE(m2.shards.back().name.starts_with("gen-00002-"));
  // The old reader still reads exactly its generation; a new one sees both.
  EXPECT_EQ(old_reader->record_count(), 9u);
  for (uint64_t i = 0; i < old_reader->record_count(); ++i) (void)old_reader->read(i);
  const auto after = records_of(d.str("ds"));
  ASSERT_EQ(after.size(), 15u);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
  TempDir d4;
  o.append = false;
  pack_imagefolder(more, d4.str("alone"), o);
  const auto alone = records_of(d4.str("alone"));
  EXPECT_TRUE(std::equal(alone.begin(), alone.end(), after.begin() + 9));
  o.append = true;
  EXPECT_TRUE(verify_path(d.str("ds")).ok());
  // Other classes (or options) are refused, and nothing changes.
  TempDir d3;
  fs::create_directories(d3.str("src/other"));
  testing::write_file(d3.str("src/other/a.jpg"), testing::make_jpeg(20, 20, 1));
  std::string msg;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(d3.str("src"), d.str("ds"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("other class names"), std::string::npos) << msg;
  EXPECT_EQ(read_manifest(d.str("ds")).serialize(), m2.serialize());
  o.fast_crop = true;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(more, d.str("ds"), o); }, &msg), ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("meta baseline"), std::string::npos) << msg;
  EXPECT_EQ(read_manifest(d.str("ds")).serialize(), m2.serialize());
  EXPECT_TRUE(verify_path(d.str("ds")).ok());
  // Nothing to append to.
  o.fast_crop = false;
  EXPECT_EQ(error_code_of([&] { pack_imagefolder(more, d.str("none"), o); }, &msg), ErrorCode::kInvalidArgument);
}

// The CLI: pack --part, then commit (refusing first, naming the missing part).
TEST(CommitParts, CliPacksPartsAndCommits) {
  TempDir d;
  const std::string src = tiny_folder(d, 3);
  auto run = [&](const std::string& args, std::string* out) {
    const std::string cmd = testing::test_tool(STOKER_TOOL) + " " + args + " >" + d.str("log") + " 2>&1";
    const int status = std::system(cmd.c_str());
    *out = testing::read_file_text(d.str("log"));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  ASSERT_EQ(run("pack imagefolder " + src + " " + d.str("ds") + " --threads 1 --part 1/2", &out), 0) << out;
  EXPECT_NE(run("commit " + d.str("ds"), &out), 0);
  EXPECT_NE(out.find("part 0/2: missing"), std::string::npos) << out;
  EXPECT_NE(run("pack imagefolder " + src + " " + d.str("ds") + " --part 2/2", &out), 0);
  EXPECT_NE(out.find("0 <= I < N"), std::string::npos) << out;
  ASSERT_EQ(run("pack imagefolder " + src + " " + d.str("ds") + " --threads 1 --part 0/2", &out), 0) << out;
  ASSERT_EQ(run("commit " + d.str("ds"), &out), 0) << out;
  EXPECT_NE(out.find("committed " + d.str("ds") + ": 2 parts"), std::string::npos) << out;
  ASSERT_EQ(run("commit " + d.str("ds"), &out), 0) << out;
  EXPECT_NE(out.find("already committed"), std::string::npos) << out;
  ASSERT_EQ(run("verify " + d.str("ds"), &out), 0) << out;
}

}  // namespace
}  // namespace stoker
