// Sample-order throughput: how much a loader pays per sample to know what to load.
//
//   build/order_bench --benchmark_min_time=0.2
//
// items_per_second is lookups (positions mapped to samples) per second, one thread.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "stoker/order.h"

namespace stoker {
namespace {

// Raw permutation over a domain of state.range(0) elements (sizes that round up to a
// power of two well and badly: cycle-walking costs more just above a power of two).
void BM_Permutation_Apply(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  const Permutation perm(n, 12345);
  uint64_t i = 0, acc = 0;
  for (auto _ : state) {
    acc += perm(i);
    if (++i == n) i = 0;
  }
  benchmark::DoNotOptimize(acc);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Permutation_Apply)->Arg(200)->Arg(1 << 20)->Arg((1 << 20) + 1)->Arg(1281167)
    ->Arg(int64_t{1} << 40);

// The loop the EpochOrder benchmarks share: map positions 0, 1, ... (wrapping at the
// order's size) to samples, one lookup an iteration.
void lookup_loop(benchmark::State& state, const EpochOrder& order) {
  uint64_t p = 0, acc = 0;
  for (auto _ : state) {
    acc += order.at(p);
    if (++p == order.size()) p = 0;
  }
  benchmark::DoNotOptimize(acc);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_EpochOrder_Shuffled(benchmark::State& state) {
  const uint64_t n = 1281167;  // ImageNet train
  OrderOptions opt;
  opt.seed = 1;
  const EpochOrder order(opt, n, 0);
  lookup_loop(state, order);
}
BENCHMARK(BM_EpochOrder_Shuffled);

// ImageNet-sized chunk-local order: 1024 shards, chunks of 64 records, windows of 16.
void BM_EpochOrder_ChunkLocal(benchmark::State& state) {
  OrderOptions opt;
  opt.kind = OrderKind::kChunkLocal;
  opt.seed = 1;
  opt.chunk_size = 64;
  opt.window_chunks = 16;
  const std::vector<uint64_t> shards(1024, 1251);
  const EpochOrder order(opt, shards, 0);
  lookup_loop(state, order);
}
BENCHMARK(BM_EpochOrder_ChunkLocal);

// Token data: 100,000 records of 64 rows (e.g. 64 x 2048 tokens), windows of
// state.range(0) records.
void BM_EpochOrder_TokenWindow(benchmark::State& state) {
  OrderOptions opt;
  opt.kind = OrderKind::kTokenWindow;
  opt.seed = 1;
  opt.window_chunks = static_cast<uint64_t>(state.range(0));
  const EpochOrder order(opt, std::vector<uint64_t>(100000, 64), 0);
  lookup_loop(state, order);
}
BENCHMARK(BM_EpochOrder_TokenWindow)->Arg(4)->Arg(16)->Arg(256);

// Per-epoch setup of a windowed order (walks the chunk permutation once).
void BM_EpochOrder_BuildTokenWindow(benchmark::State& state) {
  OrderOptions opt;
  opt.kind = OrderKind::kTokenWindow;
  opt.window_chunks = 16;
  const auto layout = std::make_shared<const UnitLayout>(std::vector<uint64_t>(100000, 64));
  uint64_t epoch = 0;
  for (auto _ : state) {
    const EpochOrder order(opt, layout, epoch++);
    benchmark::DoNotOptimize(order.size());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 100000);  // chunks
}
BENCHMARK(BM_EpochOrder_BuildTokenWindow)->Unit(benchmark::kMillisecond);

void BM_SampleSeed(benchmark::State& state) {
  uint64_t i = 0, acc = 0;
  for (auto _ : state) acc += sample_seed(7, 3, i++);
  benchmark::DoNotOptimize(acc);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_SampleSeed);

}  // namespace
}  // namespace stoker
