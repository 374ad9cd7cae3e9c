// Loader costs: time to first batch and shutdown with work in flight (the bounds,
// first batch < 0.5 s and shutdown < 100 ms, are read off these), and what the token
// path does per record beyond the decode limit.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "pipeline/doc_rows.h"
#include "util/bytes.h"
#include "util/huge_pages.h"
#include "util/stream_copy.h"

namespace {

// ~375 px JPEG-like payloads would need TurboJPEG here; the bench packs noise-textured
// JPEGs produced by the library's own sample generator instead, once per process.
const std::string& dataset() {
  static std::string dir = [] {
    std::string d = std::filesystem::temp_directory_path() / ("stoker-loader-bench-" + std::to_string(getpid()));
    std::string cmd = "./stoker sample imagefolder " + d + "/imgs --images 256 --classes 4 --seed 1 >/dev/null && "
                      "./stoker pack imagefolder " + d + "/imgs " + d + "/ds >/dev/null";
    if (std::system(cmd.c_str()) != 0) std::abort();
    return d + "/ds";
  }();
  return dir;
}

stoker::LoaderOptions options() {
  stoker::LoaderOptions o;
  o.path = dataset();
  o.batch_size = 64;
  o.rank = 0;
  o.world_size = 1;
  return o;
}

void BM_Loader_FirstBatch(benchmark::State& state) {
  dataset();  // generated once, outside the timing
  for (auto _ : state) {
    stoker::Loader l(options());
    auto b = l.next();
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_Loader_FirstBatch)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Loader_ShutdownWithWorkInFlight(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    auto l = std::make_unique<stoker::Loader>(options());
    auto b = l->next();  // threads running, slots filling, reads in flight
    state.ResumeTiming();
    l.reset();
  }
}
BENCHMARK(BM_Loader_ShutdownWithWorkInFlight)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(10);

// The token path's CPU work per record, in two parts. Unpack: what `bench feed`'s limit
// does, `unpack_record_into` (CRC, zstd) into one buffer that stays in cache. UnpackScatter:
// that, and what the loader adds for the shuffle within a window, copying each of the
// record's rows into a ring of batch slots at shuffled places. The records are the main
// job's kind: `stoker sample tokens` text packed by `stoker pack tokens --seq-len 1024
// --zstd 3` (127 rows of ~2 KiB per record), 512 of them in memory (~60 MiB, more than
// the caches hold, as the limit's 2000 are). Each thread has its own ring, the size the
// loader gives 2 threads (99 slots of 64 rows).
// UnpackScatter's rows/s over Unpack's at the same thread count is the most a token
// pipeline that shuffles rows on the CPU can reach against that limit on this machine,
// before any reads, hand-overs or context switches.
namespace tokens {

struct Stored {
  std::vector<uint8_t> bytes;
  stoker::RecordLocation loc;
};

struct Records {
  std::shared_ptr<stoker::Dataset> ds;
  std::vector<Stored> recs;
  size_t row_bytes = 0, copy_bytes = 0;
};

const Records& records() {
  static const Records all = [] {
    const std::string d = std::filesystem::temp_directory_path() / ("stoker-token-bench-" + std::to_string(getpid()));
    const std::string cmd = "mkdir -p " + d + " && ./stoker sample tokens " + d + "/t.bin --tokens 70000000 --vocab 50257 --seed 1 >/dev/null && "
                            "./stoker pack tokens " + d + "/t.bin " + d + "/ds --dtype uint16 --seq-len 1024 --zstd 3 >/dev/null";
    if (std::system(cmd.c_str()) != 0) std::abort();
    Records r;
    r.ds = stoker::Dataset::open(d + "/ds");
    const uint64_t n = std::min<uint64_t>(r.ds->record_count(), 512);
    for (uint64_t i = 0; i < n; ++i) {
      auto [s, rec] = r.ds->locate(i);
      auto reader = r.ds->shard(s);
      r.recs.push_back({reader->read_stored(rec), reader->location(rec)});
    }
    r.copy_bytes = 1024 * 2;
    r.row_bytes = r.copy_bytes + 2;  // stored rows carry the next token (targets)
    std::filesystem::remove_all(d);
    return r;
  }();
  return all;
}

// Document starts of a record of 127 rows of 1024 (documents of 1 to 2000 tokens, ~1000
// on average, the first begun before the record), as `pack tokens --eos` stores them.
std::vector<uint8_t> doc_starts() {
  std::vector<uint8_t> out;
  std::mt19937 g(1);
  for (int64_t at = -500; at <= 127 * 1024; at += 1 + g() % 2000) {
    const int32_t v = static_cast<int32_t>(at);
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
  }
  return out;
}

// docs: also each row's position_ids (int32) and loss_mask (uint8), streamed into rings
// of their own as the loader does.
void run(benchmark::State& state, bool scatter, bool docs = false) {
  const Records& r = records();
  constexpr size_t kRingRows = 99 * 64;
  std::vector<uint8_t> raw;
  stoker::internal::PageBuffer ring(scatter ? kRingRows * r.copy_bytes : 0);
  const std::vector<uint8_t> starts = doc_starts();
  stoker::internal::PageBuffer pos_ring(docs ? kRingRows * 1024 * 4 : 0), mask_ring(docs ? kRingRows * 1024 : 0);
  std::vector<uint32_t> places(kRingRows);  // the ring's rows in a shuffled order
  std::iota(places.begin(), places.end(), 0u);
  std::shuffle(places.begin(), places.end(), std::mt19937(static_cast<uint32_t>(state.thread_index()) + 1));
  size_t next = static_cast<size_t>(state.thread_index()) * r.recs.size() / 2, place = 0;
  int64_t rows = 0;
  for (auto _ : state) {
    const Stored& rec = r.recs[next++ % r.recs.size()];
    raw.resize(rec.loc.raw_size);
    auto fields = stoker::unpack_record_into(r.ds->schema(), rec.loc, rec.bytes, raw, "bench record");
    const uint8_t* rows_at = fields[0].data();
    const size_t n = fields[0].size() / r.row_bytes;
    if (scatter) {
      for (size_t i = 0; i < n; ++i) {
        stoker::internal::stream_copy(ring.get() + size_t{places[place]} * r.copy_bytes, rows_at + i * r.row_bytes, r.copy_bytes);
        if (docs) {
          stoker::internal::DocRowOut out;
          out.position_ids = reinterpret_cast<int32_t*>(pos_ring.get() + size_t{places[place]} * 1024 * 4);
          out.loss_mask = mask_ring.get() + size_t{places[place]} * 1024;
          out.stream = true;
          stoker::internal::doc_row(starts, i % 127, 1024, out);
        }
        place = place + 1 == places.size() ? 0 : place + 1;
      }
      stoker::internal::stream_copy_fence();
    }
    benchmark::DoNotOptimize(raw.data());
    rows += static_cast<int64_t>(n);
  }
  state.SetItemsProcessed(rows);
  state.SetLabel("items = rows");
}

}  // namespace tokens

void BM_Tokens_Unpack(benchmark::State& state) { tokens::run(state, false); }
BENCHMARK(BM_Tokens_Unpack)->Threads(1)->Threads(2)->UseRealTime();
void BM_Tokens_UnpackScatter(benchmark::State& state) { tokens::run(state, true); }
BENCHMARK(BM_Tokens_UnpackScatter)->Threads(1)->Threads(2)->UseRealTime();
// UnpackScatter and each row's position_ids + loss_mask: over UnpackScatter, the cost of
// the document outputs where nothing else varies.
void BM_Tokens_UnpackScatterDocs(benchmark::State& state) { tokens::run(state, true, true); }
BENCHMARK(BM_Tokens_UnpackScatterDocs)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
