// Microbenchmarks of the IO engines: random aligned reads of one file at a sweep of
// queue depths, through io_uring and pread, O_DIRECT (storage speed) and buffered
// (page-cache speed: the file is warm after the first pass). The end-to-end number
// against fio is `stoker bench io` / bench/fio_compare.sh.
//
// The scratch file (256 MiB) lives in $STOKER_BENCH_DIR (default: the current
// directory) and is removed at exit.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "stoker/io.h"

namespace {

using namespace stoker;

constexpr uint64_t kFileBytes = 256ull << 20;

class ScratchFile {
 public:
  ScratchFile() {
    const char* d = std::getenv("STOKER_BENCH_DIR");
    path_ = std::string(d ? d : ".") + "/stoker-io-bench." + std::to_string(::getpid());
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) std::abort();
    std::vector<uint8_t> chunk(1 << 20);
    std::mt19937_64 rng(1);
    for (uint64_t off = 0; off < kFileBytes; off += chunk.size()) {
      for (auto& b : chunk) b = static_cast<uint8_t>(rng());
      if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) std::abort();
    }
    ::fsync(fd);
    ::close(fd);
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string& scratch() {
  static ScratchFile f;
  return f.path();
}

// args: engine (0 uring, 1 pread), queue depth, direct (0/1), read size in KiB
void BM_Io_RandomRead(benchmark::State& state) {
  IoOptions o;
  o.engine = state.range(0) == 0 ? IoEngineKind::kUring : IoEngineKind::kPread;
  o.queue_depth = static_cast<unsigned>(state.range(1));
  o.direct = state.range(2) != 0;
  const uint32_t len = static_cast<uint32_t>(state.range(3)) << 10;
  o.slab_bytes = std::max<size_t>(4096, static_cast<size_t>(len) * o.queue_depth);
  std::unique_ptr<IoEngine> e;
  try {
    e = make_io_engine(o);
  } catch (const std::exception& ex) {
    state.SkipWithError(ex.what());
    return;
  }
  const uint32_t f = e->add_file(scratch());
  std::vector<IoBuffer> bufs;
  for (unsigned i = 0; i < o.queue_depth; ++i) bufs.push_back(e->alloc(len));
  std::mt19937_64 rng(7);
  const uint64_t blocks = kFileBytes / len;
  constexpr size_t kReadsPerIteration = 512;
  std::vector<ReadCompletion> out;
  std::vector<ReadRequest> batch;
  std::vector<uint32_t> free_slots;
  for (auto _ : state) {
    free_slots.clear();
    for (unsigned i = 0; i < o.queue_depth; ++i) free_slots.push_back(i);
    size_t issued = 0, done = 0;
    while (done < kReadsPerIteration) {
      batch.clear();
      while (issued < kReadsPerIteration && !free_slots.empty()) {
        const uint32_t slot = free_slots.back();
        free_slots.pop_back();
        batch.push_back({f, (rng() % blocks) * len, len, bufs[slot].data(), slot});
        ++issued;
      }
      if (!batch.empty()) e->submit(batch);
      out.clear();
      e->reap(out, 1, std::chrono::milliseconds(10000));
      for (auto& c : out) {
        if (c.result != len) {
          state.SkipWithError(c.error.c_str());
          return;
        }
        free_slots.push_back(static_cast<uint32_t>(c.tag));
      }
      done += out.size();
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kReadsPerIteration));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kReadsPerIteration * len));
  const IoStats s = e->stats();
  state.SetLabel(s.engine + (s.direct ? " direct (storage)" : " buffered (warm page cache)") +
                 (s.fixed_buffers ? " fixed-buffers" : ""));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int engine : {0, 1})
    for (int direct : {1, 0})
      for (int qd : {1, 8, 64})
        for (int kib : {4, 128}) b->Args({engine, qd, direct, kib});
  b->ArgNames({"engine", "qd", "direct", "KiB"})->UseRealTime()->MinTime(0.2);
}
BENCHMARK(BM_Io_RandomRead)->Apply(Args);

void BM_Io_PlanReads(benchmark::State& state) {
  std::vector<RecordRange> recs;
  uint64_t off = 0;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t len = 1000 + rng() % 200000;
    recs.push_back({0, off, len, 1ull << 40});
    off += len;
  }
  PlanOptions po;
  for (auto _ : state) benchmark::DoNotOptimize(plan_reads(recs, po));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * recs.size()));
}
BENCHMARK(BM_Io_PlanReads);

}  // namespace
