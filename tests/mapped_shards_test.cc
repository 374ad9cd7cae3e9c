// Records under a block taken from a mapping of their cached shard (IoOptions::map_cached):
// the mapping itself (io/mapped_shards.h), and a Loader that uses it delivering what the
// engine's reads deliver, catching corruption the same way, and leaving rehearsed or
// wrapped storage every read.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>

#include "io/mapped_shards.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/fault_engine.h"
#include "util/loader_util.h"
#include "util/test_util.h"

using namespace stoker;
using stoker::internal::MappedShards;
using stoker::testing::lognormal_lengths;
using stoker::testing::read_file;
using stoker::testing::TempDir;
using stoker::testing::write_file;
using stoker::testing::write_sample_dataset;

namespace {

// Which of the file's pages are in the page cache (mincore over a mapping of it).
std::vector<bool> cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  const size_t len = std::filesystem::file_size(path);
  void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (fd >= 0) ::close(fd);
  if (p == MAP_FAILED) return {};
  std::vector<unsigned char> pages((len + 4095) / 4096);
  const bool asked = mincore(p, len, pages.data()) == 0;
  munmap(p, len);
  std::vector<bool> cached;
  if (asked)
    for (unsigned char c : pages) cached.push_back(c & 1);
  return cached;
}

// Drops pages [first, first + count) of the file (all: count 0) from the page cache;
// false where the filesystem keeps them (tmpfs).
bool evict(const std::string& path, size_t first = 0, size_t count = 0) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  fdatasync(fd);
  posix_fadvise(fd, static_cast<off_t>(first * 4096), static_cast<off_t>(count * 4096), POSIX_FADV_DONTNEED);
  ::close(fd);
  const std::vector<bool> cached = cached_pages(path);
  if (cached.empty()) return false;
  const size_t end = count == 0 ? cached.size() : first + count;
  for (size_t i = first; i < end; ++i)
    if (cached[i]) return false;
  return true;
}

void warm(const std::string& path) { (void)read_file(path); }

// The file written a page per write(): its pages cached one by one, so that a few can
// be dropped (pages written together may be cached, and dropped, as one).
void write_in_pages(const std::string& path, const std::vector<uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t at = 0; at < bytes.size(); at += 4096)
    ASSERT_GT(::write(fd, bytes.data() + at, std::min<size_t>(4096, bytes.size() - at)), 0);
  ::close(fd);
}

}  // namespace

TEST(MappedShards, ACachedFileIsMappedAndReadsAsTheFile) {
  TempDir dir;
  const auto bytes = stoker::testing::random_bytes(3 * 4096 + 17, 1);
  write_file(dir.str("a"), bytes);
  warm(dir.str("a"));
  MappedShards maps(2);
  EXPECT_FALSE(maps.answered(0)) << "nothing asked yet this run";
  const auto m = maps.at(0, dir.str("a"));
  ASSERT_EQ(m.size(), bytes.size());
  EXPECT_EQ(std::memcmp(m.data(), bytes.data(), bytes.size()), 0);
  ASSERT_TRUE(maps.answered(0));
  EXPECT_EQ(maps.answered(0)->data(), m.data()) << "asked once a run";
  EXPECT_EQ(maps.mapped_bytes(), bytes.size());
}

TEST(MappedShards, AFileOutOfThePageCacheIsLeftToTheEngineUntilCachedAgain) {
  TempDir dir;
  write_file(dir.str("a"), stoker::testing::random_bytes(64 * 4096, 2));
  if (!evict(dir.str("a"))) GTEST_SKIP() << "this filesystem keeps the file's pages: nothing to tell apart";
  MappedShards maps(1);
  EXPECT_TRUE(maps.at(0, dir.str("a")).empty()) << "not cached: read by the engine";
  warm(dir.str("a"));
  EXPECT_TRUE(maps.at(0, dir.str("a")).empty()) << "the run's answer stands until the next run";
  maps.new_run();
  EXPECT_EQ(maps.at(0, dir.str("a")).size(), 64u * 4096) << "cached by the time the next run asks";
}

TEST(MappedShards, AFileMissingAFewPagesIsMappedAndTheyAreReadAhead) {
  TempDir dir;
  write_in_pages(dir.str("a"), stoker::testing::random_bytes(400 * 4096, 3));
  if (!evict(dir.str("a"), 200, 2)) GTEST_SKIP() << "this filesystem keeps the file's pages: nothing to tell apart";
  MappedShards maps(1);
  EXPECT_EQ(maps.at(0, dir.str("a")).size(), 400u * 4096) << "2 pages of 400 missing: cached enough";
  // Asked for, not faulted in: they arrive without anything touching them.
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    const std::vector<bool> cached = cached_pages(dir.str("a"));
    back = cached.size() == 400 && cached[200] && cached[201];
    if (!back) usleep(5000);
  }
  EXPECT_TRUE(back) << "the missing pages were read ahead";
  ASSERT_TRUE(evict(dir.str("a"), 0, 10));
  maps.new_run();
  EXPECT_TRUE(maps.at(0, dir.str("a")).empty()) << "10 pages of 400 missing: read by the engine";
}

TEST(MappedShards, AFileReplacedOrResizedIsMappedAnewAtTheNextRun) {
  TempDir dir;
  write_file(dir.str("a"), std::vector<uint8_t>(5000, 1));
  warm(dir.str("a"));
  MappedShards maps(1);
  ASSERT_EQ(maps.at(0, dir.str("a")).size(), 5000u);
  // Replaced by rename, as datasets are written: the next run maps the new file.
  write_file(dir.str("b"), std::vector<uint8_t>(7000, 2));
  std::filesystem::rename(dir.str("b"), dir.str("a"));
  warm(dir.str("a"));
  EXPECT_EQ(maps.at(0, dir.str("a")).size(), 5000u) << "this run keeps its mapping";
  maps.new_run();
  auto m = maps.at(0, dir.str("a"));
  ASSERT_EQ(m.size(), 7000u);
  EXPECT_EQ(m[6999], 2);
  EXPECT_EQ(maps.mapped_bytes(), 7000u);
  // Cut in place to a different size: mapped anew at its size.
  std::filesystem::resize_file(dir.str("a"), 6000);
  warm(dir.str("a"));
  maps.new_run();
  EXPECT_EQ(maps.at(0, dir.str("a")).size(), 6000u);
}

TEST(MappedShards, AFileThatCannotBeMappedIsLeftToTheEngine) {
  TempDir dir;
  MappedShards maps(2);
  EXPECT_TRUE(maps.at(0, dir.str("missing")).empty());
  write_file(dir.str("empty"), std::vector<uint8_t>());
  EXPECT_TRUE(maps.at(1, dir.str("empty")).empty());
  EXPECT_TRUE(maps.at(5, dir.str("missing")).empty()) << "a shard number past the dataset's";
  EXPECT_EQ(maps.mapped_bytes(), 0u);
}

namespace {

LoaderOptions small_record_options(const std::string& dir) {
  LoaderOptions o = stoker::testing::default_options(dir, 4);
  o.threads = 2;
  o.seq_len = 512;
  o.pack_window = 32;
  o.position_ids = o.loss_mask = o.cu_seqlens = true;
  return o;
}

// Every tensor of every batch of epochs 0 and 1, as bytes.
std::vector<std::vector<uint8_t>> two_epochs(Loader& l) {
  std::vector<std::vector<uint8_t>> out;
  for (uint64_t e = 0; e < 2; ++e) {
    l.set_epoch(e);
    while (auto b = l.next()) {
      for (const auto& t : b->tensors()) {
        const auto* p = static_cast<const uint8_t*>(t.data);
        out.emplace_back(p, p + t.bytes());
      }
    }
  }
  return out;
}

std::string shard_of(const std::string& dir) { return Dataset::open(dir)->shard_path(0); }

// Reads every shard (into the page cache); returns their bytes together.
uint64_t warm_shards(const std::string& dir) {
  auto ds = Dataset::open(dir);
  uint64_t bytes = 0;
  for (size_t s = 0; s < ds->shard_count(); ++s) {
    warm(ds->shard_path(s));
    bytes += std::filesystem::file_size(ds->shard_path(s));
  }
  return bytes;
}

}  // namespace

TEST(MappedRecords, BatchesAreTheSameWhetherRecordsAreMappedOrRead) {
  TempDir dir;
  write_sample_dataset(dir.str("ds"), lognormal_lengths(1500, 120, 5), true);  // records of ~500 bytes
  const uint64_t shard_bytes = warm_shards(dir.str("ds"));
  auto o = small_record_options(dir.str("ds"));
  Loader mapped(o);
  const auto from_mapping = two_epochs(mapped);
  o.io.map_cached = false;
  Loader read(o);
  const auto from_reads = two_epochs(read);
  ASSERT_FALSE(from_reads.empty());
  EXPECT_EQ(from_mapping, from_reads);

  const IoStats m = mapped.stats().io_engine, r = read.stats().io_engine;
  EXPECT_EQ(r.mapped_records, 0u);
  EXPECT_GT(r.requests, 0u);
  EXPECT_GT(m.mapped_records, 0u);
  EXPECT_EQ(m.mapped_shard_bytes, shard_bytes);
  const uint64_t stored = Dataset::open(dir.str("ds"))->manifest().total_bytes();
  EXPECT_GE(m.mapped_bytes + m.bytes, stored) << "every record taken or read";
}

TEST(MappedRecords, ARecordCorruptedInPlaceIsCaughtAndNamed) {
  TempDir dir;
  write_sample_dataset(dir.str("ds"), lognormal_lengths(400, 120, 6), false);
  const std::string shard = shard_of(dir.str("ds"));
  warm_shards(dir.str("ds"));
  auto o = small_record_options(dir.str("ds"));
  Loader l(o);
  while (l.next()) {
  }
  const uint64_t mapped = l.stats().io_engine.mapped_records;
  ASSERT_GT(mapped, 0u) << "the epoch took its records from the mapping";
  // A byte of record 123 flipped in the file, rewritten in place: the mapping shows the
  // page cache's bytes.
  ASSERT_EQ(Dataset::open(dir.str("ds"))->locate(123).first, 0u);
  stoker::testing::corrupt_records(dir.str("ds"), {123});
  l.set_epoch(1);
  std::string message;
  EXPECT_EQ(stoker::testing::error_code_of([&] {
              while (l.next()) {
              }
            }, &message),
            ErrorCode::kDataLoss);
  EXPECT_NE(message.find(shard + ": record 123"), std::string::npos) << message;
  EXPECT_GT(l.stats().io_engine.mapped_records, mapped) << "the second epoch took its records from the mapping too";
}

TEST(MappedRecords, RehearsedOrWrappedStorageSeesEveryRead) {
  TempDir dir;
  write_sample_dataset(dir.str("ds"), lognormal_lengths(300, 120, 7), false);
  warm_shards(dir.str("ds"));
  auto o = small_record_options(dir.str("ds"));
  std::atomic<int> wrapped{0};
  o.wrap_io = [&](std::unique_ptr<IoEngine> e) {
    wrapped++;
    return make_faulty_engine(std::move(e), FaultPlan{});
  };
  {
    Loader l(o);
    while (l.next()) {
    }
    EXPECT_EQ(wrapped.load(), 1);
    EXPECT_EQ(l.stats().io_engine.mapped_records, 0u);
    EXPECT_GT(l.stats().io_engine.requests, 0u);
  }
  o.wrap_io = nullptr;
  o.io.limit_bytes_per_s = 1e9;
  Loader l(o);
  while (l.next()) {
  }
  EXPECT_EQ(l.stats().io_engine.mapped_records, 0u);
  EXPECT_GT(l.stats().io_engine.requests, 0u);
}
