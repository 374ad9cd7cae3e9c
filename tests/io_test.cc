// Tests of the IO engines (io_uring and pread), range planning and the fault/throttle
// wrappers. Every read is checked byte for byte against the file's contents.
#include "stoker/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/shard.h"
#include "util/fault_engine.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

const std::string& uring_refusal() {
  static const std::string r = io_uring_unavailable_reason();
  return r;
}

#define SKIP_IF_NO_URING(kind)                                                   \
  do {                                                                            \
    if ((kind) == IoEngineKind::kUring && !uring_refusal().empty())               \
      GTEST_SKIP() << "io_uring is refused on this machine: " << uring_refusal(); \
  } while (0)

size_t open_fd_count() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

std::unique_ptr<IoEngine> make_engine(IoEngineKind kind, unsigned qd, bool direct,
                                      size_t slab = 16u << 20) {
  IoOptions o;
  o.engine = kind;
  o.queue_depth = qd;
  o.direct = direct;
  o.slab_bytes = slab;
  return make_io_engine(o);
}

// Submits `reqs` in batches of `batch` between reaps; returns completions by tag. Fails
// the test (instead of hanging) if they do not all arrive within a minute.
std::map<uint64_t, ReadCompletion> run_all(IoEngine& e, const std::vector<ReadRequest>& reqs,
                                           size_t batch = 7) {
  std::map<uint64_t, ReadCompletion> done;
  std::vector<ReadCompletion> out;
  size_t next = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (done.size() < reqs.size()) {
    if (next < reqs.size()) {
      const size_t n = std::min(batch, reqs.size() - next);
      e.submit(std::span<const ReadRequest>(reqs.data() + next, n));
      next += n;
    }
    out.clear();
    e.reap(out, next < reqs.size() ? 0 : 1, 100ms);
    for (auto& c : out) {
      EXPECT_FALSE(done.count(c.tag)) << "tag " << c.tag << " completed twice";
      done[c.tag] = c;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "reads did not complete: " << done.size() << " of " << reqs.size();
      break;
    }
  }
  EXPECT_EQ(e.inflight(), 0u);
  return done;
}

struct Region {
  uint64_t offset, length;
};

// Records of mixed sizes tiling the file: 1 byte, a few bytes, KiBs, hundreds of KiB.
std::vector<Region> tile(uint64_t file_size, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const uint64_t sizes[] = {1, 3, 100, 4095, 4096, 4097, 20000, 65536, 300000};
  std::vector<Region> rs;
  for (uint64_t off = 0; off < file_size;) {
    uint64_t len = std::min(sizes[rng() % std::size(sizes)], file_size - off);
    rs.push_back({off, len});
    off += len;
  }
  return rs;
}

// ---- round trip: both engines x queue depths x O_DIRECT ------------------------------

using RoundTripCase = std::tuple<IoEngineKind, unsigned, bool>;

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTrip, ShuffledReadsReturnTheFileBytes) {
  const auto [kind, qd, direct] = GetParam();
  SKIP_IF_NO_URING(kind);
  TempDir dir;
  const uint64_t size = (3u << 20) + 123;
  const auto bytes = testing::random_bytes(size, 7);
  testing::write_file(dir.str("a.stk"), bytes);
  const auto bytes_b = testing::random_bytes(size / 3, 8);
  testing::write_file(dir.str("b.stk"), bytes_b);

  auto e = make_engine(kind, qd, direct);
  const uint32_t fa = e->add_file(dir.str("a.stk"));
  const uint32_t fb = e->add_file(dir.str("b.stk"));
  ASSERT_EQ(e->file_size(fa), size);
  ASSERT_EQ(e->file_path(fb), dir.str("b.stk"));
  // /work is ext4: O_DIRECT is accepted. On a filesystem refusing it the engine must say
  // so (buffered, with a reason) and every read below must still be right.
  if (direct && !e->direct()) {
    EXPECT_NE(e->stats().fallback_reason.find("O_DIRECT"), std::string::npos);
  }
  const uint32_t align = e->direct() ? kDirectAlignment : 1;

  struct Rec {
    uint32_t file;
    Region r;
  };
  std::vector<Rec> recs;
  for (auto& r : tile(size, 1)) recs.push_back({fa, r});
  for (auto& r : tile(size / 3, 2)) recs.push_back({fb, r});
  std::shuffle(recs.begin(), recs.end(), std::mt19937_64(qd * 31 + direct));

  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  std::vector<AlignedRange> ranges;
  for (size_t i = 0; i < recs.size(); ++i) {
    const AlignedRange ar =
        align_range(recs[i].r.offset, recs[i].r.length, e->file_size(recs[i].file), align);
    ranges.push_back(ar);
    bufs.push_back(e->alloc(ar.length));
    reqs.push_back({recs[i].file, ar.offset, static_cast<uint32_t>(ar.length), bufs.back().data(), i});
  }
  auto done = run_all(*e, reqs);
  ASSERT_EQ(done.size(), recs.size());
  uint64_t total = 0;
  for (size_t i = 0; i < recs.size(); ++i) {
    const ReadCompletion& c = done[i];
    const auto& src = recs[i].file == fa ? bytes : bytes_b;
    ASSERT_GE(c.result, static_cast<int64_t>(ranges[i].skip + recs[i].r.length))
        << "record " << i << ": " << c.error;
    ASSERT_EQ(0, std::memcmp(bufs[i].data() + ranges[i].skip, src.data() + recs[i].r.offset,
                             recs[i].r.length))
        << "record " << i << " at offset " << recs[i].r.offset;
    total += static_cast<uint64_t>(c.result);
  }
  const IoStats s = e->stats();
  EXPECT_EQ(s.engine, kind == IoEngineKind::kUring ? "uring" : "pread");
  EXPECT_EQ(s.requests, recs.size());
  EXPECT_EQ(s.bytes, total);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.direct, e->direct());
  EXPECT_EQ(s.unaligned_reads, 0u);
  EXPECT_GT(s.busy_s, 0.0);
  if (kind == IoEngineKind::kUring) {
    EXPECT_LE(s.max_inflight, qd);
    EXPECT_TRUE(s.registered_files);
    // Every buffer that fit in the 16 MiB slab was read with READ_FIXED.
    if (s.fixed_buffers) {
      size_t in_slab = 0;
      for (auto& b : bufs) in_slab += b.in_slab();
      EXPECT_GE(s.fixed_reads, in_slab);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Engines, RoundTrip,
    ::testing::Combine(::testing::Values(IoEngineKind::kUring, IoEngineKind::kPread),
                       ::testing::Values(1u, 2u, 8u, 64u, 256u), ::testing::Bool()),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      return std::string(io_engine_kind_name(std::get<0>(info.param))) + "_qd" +
             std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_direct" : "_buffered");
    });

// ---- a real dataset, every record, shuffled --------------------------------------------

struct DatasetCase {
  IoEngineKind kind;
  uint32_t align;  // shard record alignment: 1 (packed) or 4096 (O_DIRECT-padded)
  Compression compression;
  bool direct;
};

class DatasetRoundTrip : public ::testing::TestWithParam<DatasetCase> {};

TEST_P(DatasetRoundTrip, EveryRecordMatchesTheShardReader) {
  const DatasetCase dc = GetParam();
  SKIP_IF_NO_URING(dc.kind);
  TempDir dir;
  Schema schema;
  schema.fields.push_back(Field{"data", FieldKind::kBytes});
  DatasetWriterOptions wo;
  wo.shard_size = 1u << 20;
  wo.shard.align = dc.align;
  wo.shard.compression = dc.compression;
  wo.shard.fsync = false;
  {
    DatasetWriter w(dir.str("ds"), schema, wo);
    std::mt19937_64 rng(17);
    for (int i = 0; i < 300; ++i) {
      // Tiny, small and large records; one of 3 MiB. Half compressible.
      size_t n = i == 150 ? (3u << 20) : i % 10 == 0 ? 1 + rng() % 8 : 1 + rng() % 40000;
      std::vector<uint8_t> data = testing::random_bytes(n, static_cast<uint32_t>(i));
      if (i % 2) std::fill(data.begin() + static_cast<long>(n / 2), data.end(), uint8_t{7});
      std::span<const uint8_t> f(data);
      w.add({&f, 1});
    }
    w.finish();
  }
  auto ds = Dataset::open(dir.str("ds"));
  ASSERT_GT(ds->shard_count(), 2u);
  auto e = make_engine(dc.kind, 32, dc.direct);
  std::vector<std::shared_ptr<const ShardReader>> shards;
  for (size_t s = 0; s < ds->shard_count(); ++s) {
    ASSERT_EQ(e->add_file(ds->shard_path(s)), s);
    shards.push_back(ds->shard(s));
  }
  std::vector<uint64_t> order(ds->record_count());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  std::vector<RecordRange> ranges;
  for (uint64_t g : order) {
    const auto [s, i] = ds->locate(g);
    const RecordLocation& loc = shards[s]->location(i);
    ranges.push_back({static_cast<uint32_t>(s), loc.offset, loc.stored_size, shards[s]->file_size()});
  }
  PlanOptions po;
  po.alignment = e->direct() ? kDirectAlignment : 1;
  const ReadPlan plan = plan_reads(ranges, po);
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (size_t r = 0; r < plan.reads.size(); ++r) {
    bufs.push_back(e->alloc(plan.reads[r].length));
    reqs.push_back({plan.reads[r].file, plan.reads[r].offset,
                    static_cast<uint32_t>(plan.reads[r].length), bufs.back().data(), r});
  }
  auto done = run_all(*e, reqs, 16);
  for (size_t k = 0; k < order.size(); ++k) {
    const auto [s, i] = ds->locate(order[k]);
    const std::vector<uint8_t> want = shards[s]->read_stored(i);
    const auto& sl = plan.records[k];
    ASSERT_GE(done[sl.read].result, static_cast<int64_t>(sl.skip + want.size())) << done[sl.read].error;
    ASSERT_EQ(0, std::memcmp(bufs[sl.read].data() + sl.skip, want.data(), want.size()))
        << "record " << order[k];
    // And the loader's next step accepts them.
    const RecordLocation& loc = shards[s]->location(i);
    Record rec = unpack_record(ds->schema(), loc,
                               {bufs[sl.read].data() + sl.skip, loc.stored_size}, "test");
    ASSERT_EQ(rec.fields.size(), 1u);
  }
  EXPECT_EQ(e->stats().unaligned_reads, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Engines, DatasetRoundTrip,
    ::testing::Values(DatasetCase{IoEngineKind::kUring, 1, Compression::kNone, true},
                      DatasetCase{IoEngineKind::kUring, 4096, Compression::kZstd, true},
                      DatasetCase{IoEngineKind::kUring, 1, Compression::kZstd, false},
                      DatasetCase{IoEngineKind::kPread, 1, Compression::kNone, true},
                      DatasetCase{IoEngineKind::kPread, 4096, Compression::kNone, false},
                      DatasetCase{IoEngineKind::kPread, 1, Compression::kZstd, true}),
    [](const ::testing::TestParamInfo<DatasetCase>& info) {
      const DatasetCase& c = info.param;
      return std::string(io_engine_kind_name(c.kind)) + "_align" + std::to_string(c.align) +
             (c.compression == Compression::kZstd ? "_zstd" : "_plain") +
             (c.direct ? "_direct" : "_buffered");
    });

// ---- tiny and huge reads, unaligned requests on a direct engine ----------------------

// Each test runs once per engine kind in a scratch directory `dir`; io_uring is skipped,
// visibly, where the machine refuses it.
class EachEngine : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override { SKIP_IF_NO_URING(kind); }

  // Writes `size` random bytes (from `seed`) to dir/name and returns them.
  std::vector<uint8_t> write_random(const std::string& name, size_t size, uint32_t seed) {
    auto bytes = testing::random_bytes(size, seed);
    testing::write_file(dir.str(name), bytes);
    return bytes;
  }

  const IoEngineKind kind = GetParam();
  TempDir dir;
};

TEST_P(EachEngine, TinyHugeAndUnalignedReadsAreExact) {
  const uint64_t size = 9u << 20;
  const auto bytes = write_random("f", size, 3);
  for (bool direct : {true, false}) {
    auto e = make_engine(kind, 16, direct);
    const uint32_t f = e->add_file(dir.str("f"));
    struct Case {
      uint64_t offset;
      uint32_t length;
    };
    // Unaligned offsets/lengths on a direct engine go through the buffered descriptor.
    const Case cases[] = {{0, 1}, {size - 1, 1}, {12345, 1}, {4096, 8u << 20}, {777, 8u << 20},
                          {size - 100, 4096}};
    std::vector<IoBuffer> bufs;
    std::vector<ReadRequest> reqs;
    for (size_t i = 0; i < std::size(cases); ++i) {
      bufs.push_back(e->alloc(cases[i].length));
      reqs.push_back({f, cases[i].offset, cases[i].length, bufs.back().data(), i});
    }
    auto done = run_all(*e, reqs, 64);
    for (size_t i = 0; i < std::size(cases); ++i) {
      const uint64_t expect = std::min<uint64_t>(cases[i].length, size - cases[i].offset);
      ASSERT_EQ(done[i].result, static_cast<int64_t>(expect)) << i << " " << done[i].error;
      ASSERT_EQ(0, std::memcmp(bufs[i].data(), bytes.data() + cases[i].offset, expect)) << i;
    }
    if (e->direct()) {
      // 0+1, size-1+1, 12345+1, 777+8MiB and size-100+4096 are not aligned.
      EXPECT_EQ(e->stats().unaligned_reads, 5u);
    } else {
      EXPECT_EQ(e->stats().unaligned_reads, 0u);
    }
  }
}

// A buffer outside the slab (plain heap memory) is read with a plain READ.
TEST_P(EachEngine, BuffersOutsideTheSlabWork) {
  const auto bytes = write_random("f", 100000, 4);
  auto e = make_engine(kind, 4, /*direct=*/false, /*slab=*/0);
  const uint32_t f = e->add_file(dir.str("f"));
  std::vector<uint8_t> buf(50000);
  ReadRequest r{f, 25000, 50000, buf.data(), 9};
  auto done = run_all(*e, {r});
  ASSERT_EQ(done[9].result, 50000);
  EXPECT_EQ(0, std::memcmp(buf.data(), bytes.data() + 25000, 50000));
  EXPECT_EQ(e->stats().fixed_reads, 0u);
  EXPECT_FALSE(e->alloc(10).in_slab());
}

// The slab starts on a 2 MiB boundary (transparent huge pages can back it whole: a read
// is then a segment or two instead of one per 4 KiB page) and all of it is usable.
TEST_P(EachEngine, SlabStartsOnAHugePageBoundaryAndIsWhollyUsable) {
  const auto bytes = write_random("f", 6u << 20, 11);
  auto e = make_engine(kind, 4, /*direct=*/true, /*slab=*/6u << 20);
  IoBuffer all = e->alloc(6u << 20);
  ASSERT_TRUE(all.in_slab());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(all.data()) % (2u << 20), 0u);
  // And it is marked for them: where the kernel has THP at all, the mapping is eligible
  // (with `enabled` set to madvise, only because of the advice).
  if (testing::thp_available()) {
    EXPECT_EQ(testing::thp_eligible(all.data()), 1);
  }
  const uint32_t f = e->add_file(dir.str("f"));
  auto done = run_all(*e, {ReadRequest{f, 0, 6u << 20, all.data(), 1}});
  ASSERT_EQ(done[1].result, 6 << 20);
  EXPECT_EQ(0, std::memcmp(all.data(), bytes.data(), bytes.size()));
}

// ---- truncation and real errors -------------------------------------------------------

TEST_P(EachEngine, FileTruncatedUnderTheEngineGivesShortOrEmptyReads) {
  const auto bytes = write_random("t.stk", 1u << 20, 5);
  for (bool direct : {true, false}) {
    auto e = make_engine(kind, 8, direct);
    const uint32_t f = e->add_file(dir.str("t.stk"));
    ASSERT_EQ(0, ::truncate(dir.str("t.stk").c_str(), 100000));
    // Before the new EOF, across it, and wholly past it.
    const uint64_t offs[] = {0, 98304, 200704};
    std::vector<IoBuffer> bufs;
    std::vector<ReadRequest> reqs;
    for (size_t i = 0; i < 3; ++i) {
      bufs.push_back(e->alloc(8192));
      reqs.push_back({f, offs[i], 8192, bufs.back().data(), i});
    }
    auto done = run_all(*e, reqs);
    ASSERT_EQ(done.size(), 3u);
    EXPECT_EQ(done[0].result, 8192) << done[0].error;
    EXPECT_EQ(0, std::memcmp(bufs[0].data(), bytes.data(), 8192));
    EXPECT_EQ(done[1].result, 100000 - 98304) << done[1].error;
    EXPECT_EQ(0, std::memcmp(bufs[1].data(), bytes.data() + 98304, 100000 - 98304));
    EXPECT_EQ(done[2].result, 0) << done[2].error;
    testing::write_file(dir.str("t.stk"), bytes);  // restore for the next round
  }
}

// seq_file-backed /proc files return about a page per read: a real source of short
// reads, which the engines must continue until the requested length.
TEST_P(EachEngine, ShortReadsAreContinued) {
  const char* path = "/proc/kallsyms";
  std::vector<uint8_t> want(65536);
  {
    const int fd = ::open(path, O_RDONLY);
    if (fd < 0) GTEST_SKIP() << path << " cannot be opened";
    size_t got = 0;
    bool was_short = false;
    while (got < want.size()) {
      const ssize_t n = ::pread(fd, want.data() + got, want.size() - got, 100000 + got);
      if (n <= 0) break;
      was_short |= static_cast<size_t>(n) < want.size() - got;
      got += static_cast<size_t>(n);
    }
    ::close(fd);
    if (got < want.size() || !was_short) GTEST_SKIP() << path << " gives no short reads here";
  }
  auto e = make_engine(kind, 4, /*direct=*/false);
  const uint32_t f = e->add_file(path);
  IoBuffer b = e->alloc(65536);
  auto done = run_all(*e, {{f, 100000, 65536, b.data(), 1}});
  ASSERT_EQ(done[1].result, 65536) << done[1].error;
  EXPECT_EQ(0, std::memcmp(b.data(), want.data(), 65536));
  EXPECT_GT(e->stats().short_reads, 0u);
}

TEST_P(EachEngine, ReadErrorNamesFileAndOffset) {
  // A directory opens read-only but every read of it fails with EISDIR: a real,
  // per-request error that does not disturb the other requests.
  std::filesystem::create_directories(dir.path() / "shard-dir");
  testing::write_file(dir.str("ok"), testing::random_bytes(8192, 1));
  auto e = make_engine(kind, 8, /*direct=*/false);
  const uint32_t bad = e->add_file(dir.str("shard-dir"));
  const uint32_t ok = e->add_file(dir.str("ok"));
  IoBuffer b1 = e->alloc(4096), b2 = e->alloc(4096);
  auto done = run_all(*e, {{bad, 4096, 4096, b1.data(), 1}, {ok, 4096, 4096, b2.data(), 2}});
  EXPECT_EQ(done[1].result, -EISDIR);
  EXPECT_NE(done[1].error.find(dir.str("shard-dir")), std::string::npos) << done[1].error;
  EXPECT_NE(done[1].error.find("offset 4096"), std::string::npos) << done[1].error;
  EXPECT_NE(done[1].error.find("errno " + std::to_string(EISDIR)), std::string::npos);
  EXPECT_EQ(done[2].result, 4096);
  EXPECT_EQ(e->stats().errors, 1u);
}

TEST_P(EachEngine, BadArgumentsAreRejected) {
  auto e = make_engine(kind, 8, true);
  try {
    e->add_file(dir.str("missing.stk"));
    FAIL() << "no exception";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(err.what()).find("missing.stk"), std::string::npos);
  }
  uint8_t buf[16];
  ReadRequest r{3, 0, 16, buf, 0};
  try {
    e->submit({&r, 1});
    FAIL() << "no exception";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(e->inflight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, EachEngine,
                         ::testing::Values(IoEngineKind::kUring, IoEngineKind::kPread),
                         [](const ::testing::TestParamInfo<IoEngineKind>& info) {
                           return std::string(io_engine_kind_name(info.param));
                         });

// ---- cancellation and teardown ---------------------------------------------------------

// The queue depth knob of threads="auto": a limit caps the reads in flight (clamped to
// what the engine has), the reads beyond it wait in the engine and are counted as such,
// and every read still completes with its bytes.
TEST_P(EachEngine, QueueLimitCapsTheReadsInFlightAndCountsTheWaits) {
  const auto bytes = write_random("q", 4u << 20, 8);
  auto e = make_engine(kind, 16, false);
  const unsigned most = kind == IoEngineKind::kPread ? IoOptions{}.pread_threads : 16u;
  EXPECT_EQ(e->stats().queue_limit, most);
  EXPECT_EQ(e->set_queue_limit(1000), most);
  EXPECT_EQ(e->set_queue_limit(0), 1u);
  EXPECT_EQ(e->set_queue_limit(2), 2u);
  const uint32_t f = e->add_file(dir.str("q"));
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 64; ++i) {
    bufs.push_back(e->alloc(65536));
    reqs.push_back({f, i * 65536, 65536, bufs.back().data(), i});
  }
  auto done = run_all(*e, reqs, 64);
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_EQ(done[i].result, 65536) << i << " " << done[i].error;
    ASSERT_EQ(0, std::memcmp(bufs[i].data(), bytes.data() + i * 65536, 65536)) << i;
  }
  const IoStats s = e->stats();
  EXPECT_EQ(s.queue_limit, 2u);
  EXPECT_EQ(s.queue_depth, 16u);
  // All 64 came in one submit: most waited for room while 2 were read.
  EXPECT_GT(s.queue_full_s, 0);
  if (kind == IoEngineKind::kUring) {
    EXPECT_LE(s.max_inflight, 2u);  // pread counts its queue too
  }
}

// IoOptions::read_latency_s: every read is handed back no sooner than the latency after
// it was issued, and the queue limit bounds how many are out, so 8 reads through a queue
// of 4 take two latencies; every read keeps its bytes.
TEST_P(EachEngine, ReadLatencyHoldsEachReadAndTheQueueBoundsThem) {
  const auto bytes = write_random("l", 1u << 20, 9);
  IoOptions o;
  o.engine = kind;
  o.queue_depth = 8;
  o.read_latency_s = 0.05;
  auto e = make_io_engine(o);
  EXPECT_EQ(e->set_queue_limit(4), 4u);
  const uint32_t f = e->add_file(dir.str("l"));
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 8; ++i) {
    bufs.push_back(e->alloc(4096));
    reqs.push_back({f, i * 4096, 4096, bufs.back().data(), i});
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto done = run_all(*e, reqs, 8);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 0.1);  // two waves of 4
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_EQ(done[i].result, 4096) << i << " " << done[i].error;
    ASSERT_EQ(0, std::memcmp(bufs[i].data(), bytes.data() + i * 4096, 4096)) << i;
  }
  const IoStats s = e->stats();
  EXPECT_EQ(s.queue_limit, 4u);
  EXPECT_LE(s.max_inflight, 4u);
  EXPECT_GE(s.queue_full_s, 0.04);  // the second wave waited out the first (50 ms)
  o.read_latency_s = -1;
  EXPECT_THROW(make_io_engine(o), Error);
}

TEST_P(EachEngine, CancelWithReadsInFlightCompletesEveryRequestOnce) {
  const auto bytes = write_random("c", 4u << 20, 6);
  auto e = make_engine(kind, 16, true);
  const uint32_t f = e->add_file(dir.str("c"));
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 256; ++i) {
    bufs.push_back(e->alloc(65536));
    reqs.push_back({f, (i * 65536) % (4u << 20), 65536, bufs.back().data(), i});
  }
  e->submit(reqs);
  e->cancel_all();
  std::map<uint64_t, int64_t> got;
  std::vector<ReadCompletion> out;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (e->inflight() > 0 && std::chrono::steady_clock::now() < deadline) {
    out.clear();
    e->reap(out, 1, 100ms);
    for (auto& c : out) EXPECT_TRUE(got.emplace(c.tag, c.result).second) << c.tag;
  }
  ASSERT_EQ(got.size(), reqs.size());
  uint64_t cancelled = 0;
  for (auto& [tag, res] : got) {
    if (res == -ECANCELED) {
      ++cancelled;
    } else {
      ASSERT_EQ(res, 65536) << tag;
      EXPECT_EQ(0, std::memcmp(bufs[tag].data(), bytes.data() + reqs[tag].offset, 65536));
    }
  }
  // The cancel took most of the queue: about a queue depth reached the kernel (or the
  // pread workers) before it, a few more where a worker took its next request first
  // (a loaded machine may delay the submitting thread between submit and cancel).
  EXPECT_GE(cancelled, 256u - 4 * 16u);
  EXPECT_EQ(e->stats().cancelled, cancelled);
}

TEST_P(EachEngine, DestroyWithReadsInFlightLeaksNoDescriptor) {
  for (int i = 0; i < 4; ++i) {
    testing::write_file(dir.str("d" + std::to_string(i)), testing::random_bytes(2u << 20, i));
  }
  const size_t fds_before = open_fd_count();
  std::vector<IoBuffer> survivors;
  {
    auto e = make_engine(kind, 64, true);
    std::vector<ReadRequest> reqs;
    for (int i = 0; i < 4; ++i) e->add_file(dir.str("d" + std::to_string(i)));
    // One unaligned request per file so the lazily opened buffered descriptors exist too.
    std::vector<IoBuffer> bufs;
    for (uint64_t i = 0; i < 512; ++i) {
      bufs.push_back(e->alloc(32768));
      const bool odd = i < 4;
      reqs.push_back({static_cast<uint32_t>(i % 4), (i * 32768) % (2u << 20) + (odd ? 1 : 0),
                      32768, bufs.back().data(), i});
    }
    e->submit(reqs);
    std::vector<ReadCompletion> out;
    e->reap(out, 1, 1000ms);
    EXPECT_GT(open_fd_count(), fds_before);
    // Buffers may outlive their engine: these are released after it is gone.
    survivors.push_back(std::move(bufs[0]));
    survivors.push_back(std::move(bufs[511]));
    e.reset();  // cancels, waits for the kernel, unregisters, closes
  }
  EXPECT_EQ(open_fd_count(), fds_before);
  std::memset(survivors[0].data(), 0xAB, survivors[0].size());  // still valid memory (ASan)
  survivors.clear();
}

// A removed file's descriptors close (an evicted shard's blocks are freed), its id is
// refused, and the next add_file reuses the id for another file, whose bytes it reads.
TEST_P(EachEngine, RemovedFileClosesAndItsIdGoesToTheNextFile) {
  const IoEngineKind kind = GetParam();
  SKIP_IF_NO_URING(kind);
  TempDir dir;
  const auto a = testing::random_bytes(1u << 20, 21), b = testing::random_bytes(1u << 20, 22),
             c = testing::random_bytes(3u << 20, 23);
  testing::write_file(dir.str("a"), a);
  testing::write_file(dir.str("b"), b);
  testing::write_file(dir.str("c"), c);
  for (bool direct : {true, false}) {
    auto e = make_engine(kind, 16, direct);
    const size_t fds_before = open_fd_count();
    const uint32_t fa = e->add_file(dir.str("a"));
    const uint32_t fb = e->add_file(dir.str("b"));
    // An unaligned read of `a` opens its buffered descriptor too (direct engines).
    std::vector<IoBuffer> bufs;
    bufs.push_back(e->alloc(4096));
    std::vector<ReadRequest> reqs{{fa, 1, 4095, bufs.back().data(), 0}};
    ASSERT_EQ(run_all(*e, reqs)[0].result, 4095);
    const size_t fds_open = open_fd_count();
    e->remove_file(fa);
    EXPECT_LT(open_fd_count(), fds_open);
    reqs = {{fa, 0, 4096, bufs.back().data(), 1}};
    EXPECT_THROW(e->submit(reqs), Error);
    EXPECT_THROW(e->remove_file(fa), Error);
    const uint32_t fc = e->add_file(dir.str("c"));
    EXPECT_EQ(fc, fa);
    EXPECT_EQ(e->file_size(fc), c.size());
    EXPECT_EQ(e->file_path(fc), dir.str("c"));
    bufs.clear();
    reqs.clear();
    for (uint64_t i = 0; i < 8; ++i) {
      bufs.push_back(e->alloc(65536));
      const bool from_c = i % 2 == 0;
      reqs.push_back({from_c ? fc : fb, (2u << 20) * from_c + i * 65536, 65536, bufs.back().data(), i});
    }
    auto done = run_all(*e, reqs);
    for (uint64_t i = 0; i < 8; ++i) {
      ASSERT_EQ(done[i].result, 65536) << done[i].error;
      const auto& src = i % 2 == 0 ? c : b;
      EXPECT_EQ(0, std::memcmp(bufs[i].data(), src.data() + reqs[i].offset, 65536)) << i;
    }
    e->remove_file(fb);
    e->remove_file(fc);
    EXPECT_EQ(open_fd_count(), fds_before);
  }
}

// Runs `body` in a child process; returns its exit code and what it wrote to `report`.
template <typename Fn>
int in_child(Fn body, std::string* report) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::close(pipefd[0]);
    std::string r;
    int code = 0;
    try {
      code = body(r);
    } catch (const std::exception& e) {
      r += e.what();
      code = 99;
    }
    (void)!::write(pipefd[1], r.data(), r.size());
    ::close(pipefd[1]);
    ::_exit(code);
  }
  ::close(pipefd[1]);
  char buf[512];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) report->append(buf, n);
  ::close(pipefd[0]);
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// ---- engine selection and the fallback report ------------------------------------------

TEST(IoOptionsTest, OutOfRangeOptionsAreInvalidArgument) {
  for (unsigned qd : {0u, 4097u}) {
    IoOptions o;
    o.queue_depth = qd;
    try {
      make_io_engine(o);
      FAIL() << "queue_depth " << qd << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
  }
  for (double limit : {-1.0, std::nan(""), HUGE_VAL}) {
    IoOptions o;
    o.limit_bytes_per_s = limit;
    try {
      make_io_engine(o);
      FAIL() << "limit_bytes_per_s " << limit << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("limit_bytes_per_s"), std::string::npos) << e.what();
    }
  }
}

TEST(EngineSelection, ForcedPreadIsUsedWithoutAFallbackReason) {
  testing::ScopedEnv env("STOKER_IO", std::nullopt);
  auto e = make_engine(IoEngineKind::kPread, 8, true);
  EXPECT_EQ(e->stats().engine, "pread");
  EXPECT_EQ(e->stats().fallback_reason, "");
}

TEST(EngineSelection, EnvironmentOverridesAuto) {
  {
    testing::ScopedEnv env("STOKER_IO", "pread");
    EXPECT_EQ(make_engine(IoEngineKind::kAuto, 8, true)->stats().engine, "pread");
    // An explicit engine wins over the environment.
    if (uring_refusal().empty()) {
      EXPECT_EQ(make_engine(IoEngineKind::kUring, 8, true)->stats().engine, "uring");
    }
  }
  if (uring_refusal().empty()) {
    testing::ScopedEnv env("STOKER_IO", "uring");
    EXPECT_EQ(make_engine(IoEngineKind::kAuto, 8, true)->stats().engine, "uring");
  }
  {
    testing::ScopedEnv env("STOKER_IO", "mmap");
    try {
      make_engine(IoEngineKind::kAuto, 8, true);
      FAIL() << "STOKER_IO=mmap accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("STOKER_IO"), std::string::npos);
    }
  }
}

// Installs a seccomp filter failing io_uring_setup with `err`, as container runtimes do.
bool refuse_io_uring(int err) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

struct RefusalCase {
  int err;
  const char* errno_name;  // in the report
  const char* culprit;     // "by what" in the report
};

class RefusedUring : public ::testing::TestWithParam<RefusalCase> {};

// In a child process io_uring is refused by a seccomp filter: kAuto falls back to pread
// with a plain reason, kUring is kUnavailable, and reads still return the right bytes.
TEST_P(RefusedUring, AutoFallsBackToPreadWithTheReason) {
  const RefusalCase rc = GetParam();
  TempDir dir;
  const auto bytes = testing::random_bytes(10000, 9);
  testing::write_file(dir.str("f"), bytes);
  testing::ScopedEnv env("STOKER_IO", std::nullopt);
  std::string report;
  const int code = in_child(
      [&](std::string& r) {
        if (!refuse_io_uring(rc.err)) return 10;
        auto e = make_engine(IoEngineKind::kAuto, 8, true);
        const IoStats s = e->stats();
        r = s.fallback_reason;
        if (s.engine != "pread") return 11;
        const uint32_t f = e->add_file(dir.str("f"));
        IoBuffer b = e->alloc(10000);
        ReadRequest q{f, 0, 10000, b.data(), 1};
        e->submit({&q, 1});
        std::vector<ReadCompletion> out;
        e->reap(out, 1, 10000ms);
        if (out.size() != 1 || out[0].result != 10000 ||
            std::memcmp(b.data(), bytes.data(), 10000) != 0) {
          return 12;
        }
        try {
          make_engine(IoEngineKind::kUring, 8, true);
          return 13;
        } catch (const Error& err) {
          if (err.code() != ErrorCode::kUnavailable) return 14;
        }
        return 0;
      },
      &report);
  ASSERT_EQ(code, 0) << "report: " << report;
  EXPECT_NE(report.find("io_uring_queue_init"), std::string::npos) << report;
  EXPECT_NE(report.find(rc.errno_name), std::string::npos) << report;
  EXPECT_NE(report.find(rc.culprit), std::string::npos) << report;
  EXPECT_NE(report.find("using the pread engine"), std::string::npos) << report;
  EXPECT_NE(report.find("to enable the io_uring fast path"), std::string::npos) << report;
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, RefusedUring,
    ::testing::Values(RefusalCase{EPERM, "errno 1)", "seccomp"},
                      RefusalCase{ENOSYS, "errno 38)", "kernel"},
                      RefusalCase{ENOMEM, "errno 12)", "RLIMIT_MEMLOCK"}),
    [](const ::testing::TestParamInfo<RefusalCase>& info) {
      return std::string("errno") + std::to_string(info.param.err);
    });

// Without CAP_IPC_LOCK and with a small RLIMIT_MEMLOCK the slab cannot be registered:
// the uring engine says so and reads into the slab with plain READs.
TEST(UringFixedBuffers, RefusedRegistrationIsReportedAndReadsStillWork) {
  SKIP_IF_NO_URING(IoEngineKind::kUring);
  TempDir dir;
  const auto bytes = testing::random_bytes(100000, 21);
  testing::write_file(dir.str("f"), bytes);
  std::string report;
  const int code = in_child(
      [&](std::string& r) {
        rlimit ml{64 << 10, 64 << 10};
        if (::setrlimit(RLIMIT_MEMLOCK, &ml) != 0) return 10;
        __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct data[2]{};
        if (::syscall(SYS_capget, &hdr, data) != 0) return 10;
        data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
        if (::syscall(SYS_capset, &hdr, data) != 0) return 10;
        auto e = make_engine(IoEngineKind::kUring, 8, true, 16u << 20);
        const IoStats s = e->stats();
        r = s.fallback_reason;
        if (s.fixed_buffers) return 11;
        const uint32_t f = e->add_file(dir.str("f"));
        IoBuffer b = e->alloc(65536);
        if (!b.in_slab()) return 12;
        ReadRequest q{f, 4096, 65536, b.data(), 1};
        e->submit({&q, 1});
        std::vector<ReadCompletion> out;
        e->reap(out, 1, 10000ms);
        if (out.size() != 1 || out[0].result != 65536) return 13;
        if (std::memcmp(b.data(), bytes.data() + 4096, 65536) != 0) return 14;
        if (e->stats().fixed_reads != 0) return 15;
        return 0;
      },
      &report);
  if (code == 10) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK here";
  ASSERT_EQ(code, 0) << report;
  EXPECT_NE(report.find("fixed buffers refused"), std::string::npos) << report;
  EXPECT_NE(report.find("RLIMIT_MEMLOCK (64 KiB)"), std::string::npos) << report;
  EXPECT_NE(report.find("plain IORING_OP_READ instead"), std::string::npos) << report;
}

// ---- planning ---------------------------------------------------------------------------

struct AlignCase {
  uint64_t offset, len, file_size;
  uint32_t alignment;
  AlignedRange want;
};

class AlignRange : public ::testing::TestWithParam<AlignCase> {};

TEST_P(AlignRange, EnclosesTheRecord) {
  const AlignCase c = GetParam();
  const AlignedRange r = align_range(c.offset, c.len, c.file_size, c.alignment);
  EXPECT_EQ(r.offset, c.want.offset);
  EXPECT_EQ(r.length, c.want.length);
  EXPECT_EQ(r.skip, c.want.skip);
  EXPECT_EQ(r.offset + r.skip, c.offset);
  EXPECT_GE(r.length, r.skip + c.len);
}

INSTANTIATE_TEST_SUITE_P(
    Table, AlignRange,
    ::testing::Values(AlignCase{0, 1, 100, 4096, {0, 4096, 0}},
                      AlignCase{4095, 2, 10000, 4096, {0, 8192, 4095}},
                      AlignCase{5000, 100, 5100, 4096, {4096, 4096, 904}},
                      AlignCase{8192, 4096, 1u << 20, 4096, {8192, 4096, 0}},
                      AlignCase{8193, 4096, 1u << 20, 4096, {8192, 8192, 1}},
                      AlignCase{100, 50, 1000, 1, {100, 50, 0}},
                      AlignCase{1000, 0, 1000, 4096, {0, 4096, 1000}},
                      AlignCase{10, 20, 100, 512, {0, 512, 10}}));

TEST(AlignRangeErrors, RecordOutsideTheFileOrBadAlignmentIsInvalidArgument) {
  for (auto fn : {+[] { align_range(90, 20, 100, 4096); },
                  +[] { align_range(200, 1, 100, 4096); },
                  +[] { align_range(0, 1, 100, 3000); }}) {
    try {
      fn();
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
  }
}

TEST(PlanReads, NeighboursCoalesceUpToTheLimit) {
  const uint64_t fs = 10u << 20;
  std::vector<RecordRange> recs = {
      {0, 100, 1000, fs},     {0, 1100, 3000, fs},      // same 4 KiB page run -> merged
      {0, 4100, 200000, fs},                            // adjacent -> merged (204 KiB read)
      {0, 204100, 900000, fs},                          // would exceed 1 MiB -> new read
      {1, 1104100, 10, fs},                             // other file -> new read
      {1, 1000, 10, fs},                                // backwards -> new read
      {1, 1010 + (200u << 10), 10, fs},                 // gap > 64 KiB -> new read
  };
  PlanOptions o;
  const ReadPlan p = plan_reads(recs, o);
  ASSERT_EQ(p.reads.size(), 5u);
  EXPECT_EQ(p.reads[0].offset, 0u);
  EXPECT_EQ(p.reads[0].record_count, 3u);
  EXPECT_EQ(p.reads[0].length, 204800u);
  EXPECT_EQ(p.reads[1].first_record, 3u);
  EXPECT_EQ(p.reads[2].file, 1u);
  EXPECT_EQ(p.reads[3].first_record, 5u);
  EXPECT_EQ(p.reads[4].first_record, 6u);
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& rd = p.reads[p.records[i].read];
    EXPECT_EQ(rd.offset + p.records[i].skip, recs[i].offset) << i;
    EXPECT_LE(p.records[i].skip + recs[i].length, rd.length) << i;
    EXPECT_EQ(rd.offset % 4096, 0u);
    EXPECT_EQ(rd.length % 4096, 0u);
  }
  o.max_request_bytes = 0;  // no coalescing
  EXPECT_EQ(plan_reads(recs, o).reads.size(), recs.size());
}

TEST_P(EachEngine, PlannedCoalescedReadsDeliverEveryRecord) {
  const uint64_t size = (2u << 20) + 77;
  const auto bytes = write_random("s", size, 11);
  auto e = make_engine(kind, 8, true);
  const uint32_t f = e->add_file(dir.str("s"));
  std::vector<RecordRange> recs;
  for (auto& r : tile(size, 5)) recs.push_back({f, r.offset, r.length, size});
  PlanOptions o;
  o.alignment = e->direct() ? kDirectAlignment : 1;
  const ReadPlan plan = plan_reads(recs, o);
  EXPECT_LT(plan.reads.size(), recs.size() / 2);
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (size_t i = 0; i < plan.reads.size(); ++i) {
    bufs.push_back(e->alloc(plan.reads[i].length));
    reqs.push_back({f, plan.reads[i].offset, static_cast<uint32_t>(plan.reads[i].length),
                    bufs.back().data(), i});
  }
  auto done = run_all(*e, reqs);
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& sl = plan.records[i];
    ASSERT_GE(done[sl.read].result, static_cast<int64_t>(sl.skip + recs[i].length));
    ASSERT_EQ(0, std::memcmp(bufs[sl.read].data() + sl.skip, bytes.data() + recs[i].offset,
                             recs[i].length))
        << i;
  }
  EXPECT_EQ(e->stats().unaligned_reads, 0u);
}

// ---- wrappers ---------------------------------------------------------------------------

TEST_P(EachEngine, FaultsHitExactlyThePlannedRequests) {
  const auto bytes = write_random("a", 1u << 20, 12);
  testing::write_file(dir.str("b"), bytes);
  FaultPlan plan;
  plan.seed = 42;
  plan.fail_rate = plan.short_rate = plan.corrupt_rate = plan.delay_rate = 0.15;
  plan.delay = 2ms;
  plan.only = [](const ReadRequest& r) { return r.file == 0; };
  auto e = make_faulty_engine(make_engine(kind, 16, true), plan);
  const uint32_t fa = e->add_file(dir.str("a"));
  const uint32_t fb = e->add_file(dir.str("b"));
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 256; ++i) {
    bufs.push_back(e->alloc(4096));
    reqs.push_back({i % 2 ? fb : fa, (i * 4096) % (1u << 20), 4096, bufs.back().data(), i});
  }
  auto done = run_all(*e, reqs);
  ASSERT_EQ(done.size(), reqs.size());
  std::map<FaultKind, int> seen;
  for (const ReadRequest& r : reqs) {
    const FaultKind k = fault_for(plan, r);
    if (r.file == fb) {
      EXPECT_EQ(k, FaultKind::kNone);
    }
    ++seen[k];
    const ReadCompletion& c = done[r.tag];
    const uint8_t* got = bufs[r.tag].data();
    const uint8_t* want = bytes.data() + r.offset;
    switch (k) {
      case FaultKind::kFail:
        EXPECT_EQ(c.result, -EIO);
        EXPECT_NE(c.error.find(dir.str("a") + " offset " + std::to_string(r.offset)),
                  std::string::npos)
            << c.error;
        break;
      case FaultKind::kShort:
        EXPECT_EQ(c.result, 2048);
        EXPECT_EQ(0, std::memcmp(got, want, 2048));
        break;
      case FaultKind::kCorrupt: {
        ASSERT_EQ(c.result, 4096);
        const uint64_t at = corrupt_index(plan, r, 4096);
        for (uint64_t j = 0; j < 4096; ++j) {
          ASSERT_EQ(got[j], j == at ? static_cast<uint8_t>(want[j] ^ 0xFF) : want[j]) << j;
        }
        break;
      }
      case FaultKind::kDelay:
      case FaultKind::kNone:
        EXPECT_EQ(c.result, 4096);
        EXPECT_EQ(0, std::memcmp(got, want, 4096));
        break;
    }
  }
  for (FaultKind k : {FaultKind::kFail, FaultKind::kShort, FaultKind::kCorrupt,
                      FaultKind::kDelay, FaultKind::kNone}) {
    EXPECT_GT(seen[k], 0) << fault_kind_name(k);
  }
  // Deterministic from the seed; another seed picks other requests.
  FaultPlan other = plan;
  other.seed = 43;
  int same = 0, differ = 0;
  for (const ReadRequest& r : reqs) {
    same += fault_for(plan, r) == fault_for(plan, r);
    differ += fault_for(plan, r) != fault_for(other, r);
  }
  EXPECT_EQ(same, 256);
  EXPECT_GT(differ, 0);
}

TEST_P(EachEngine, ThrottleHoldsTheByteRate) {
  const auto bytes = write_random("a", 4u << 20, 13);
  const double rate = 8.0 * (1 << 20);  // 8 MiB/s: 4 MiB take >= (4 - 0.8 - 0.0625)/8 s
  IoOptions o;
  o.engine = kind;
  o.queue_depth = 16;
  o.limit_bytes_per_s = rate;
  auto e = make_io_engine(o);
  const uint32_t f = e->add_file(dir.str("a"));
  std::vector<IoBuffer> bufs;
  std::vector<ReadRequest> reqs;
  for (uint64_t i = 0; i < 64; ++i) {
    bufs.push_back(e->alloc(65536));
    reqs.push_back({f, i * 65536, 65536, bufs.back().data(), i});
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto done = run_all(*e, reqs, 64);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& [tag, c] : done) {
    ASSERT_EQ(c.result, 65536);
    ASSERT_EQ(0, std::memcmp(bufs[tag].data(), bytes.data() + tag * 65536, 65536));
  }
  EXPECT_EQ(e->stats().bytes, 4u << 20);
  EXPECT_GE(s, ((4u << 20) - rate / 10 - 65536) / rate);
}

TEST(FaultyEngine, DelayedCompletionIsHeldBack) {
  TempDir dir;
  testing::write_file(dir.str("a"), testing::random_bytes(8192, 1));
  FaultPlan plan;
  plan.delay_rate = 1.0;
  plan.delay = 300ms;
  auto e = make_faulty_engine(make_engine(IoEngineKind::kPread, 4, false), plan);
  const uint32_t f = e->add_file(dir.str("a"));
  IoBuffer b = e->alloc(4096);
  ReadRequest r{f, 0, 4096, b.data(), 5};
  const auto t0 = std::chrono::steady_clock::now();
  e->submit({&r, 1});
  std::vector<ReadCompletion> out;
  e->reap(out, 1, 10s);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].result, 4096);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
}

TEST(FaultyEngine, RatesAboveOneAreInvalidArgument) {
  FaultPlan plan;
  plan.fail_rate = 0.7;
  plan.short_rate = 0.7;
  try {
    make_faulty_engine(make_engine(IoEngineKind::kPread, 4, false), plan);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

// The loader builds its engine once and drives it from a new stoker-io thread every
// epoch: an engine must serve calls from a thread other than the one that made it.
TEST(IoEngineThreads, EngineServesCallsFromAnotherThreadThanItsCreator) {
  testing::TempDir dir;
  const auto bytes = testing::random_bytes(64 << 10, 5);
  testing::write_file(dir.str("f"), bytes);
  for (IoEngineKind kind : {IoEngineKind::kUring, IoEngineKind::kPread}) {
    IoOptions o;
    o.engine = kind;
    std::unique_ptr<IoEngine> e;
    try {
      e = make_io_engine(o);
    } catch (const Error& err) {
      if (kind == IoEngineKind::kUring && err.code() == ErrorCode::kUnavailable) continue;  // no io_uring here
      throw;
    }
    const uint32_t f = e->add_file(dir.str("f"));
    for (int round = 0; round < 3; ++round) {
      std::thread t([&] {
        IoBuffer b = e->alloc(8192);
        ReadRequest r{f, 8192u * static_cast<uint64_t>(round), 8192, b.data(), 7};
        e->submit({&r, 1});
        std::vector<ReadCompletion> out;
        e->reap(out, 1, std::chrono::seconds(5));
        ASSERT_EQ(out.size(), 1u);
        ASSERT_EQ(out[0].result, 8192) << out[0].error;
        EXPECT_EQ(std::memcmp(b.data(), bytes.data() + 8192 * round, 8192), 0);
      });
      t.join();
    }
  }
}

}  // namespace
}  // namespace stoker
