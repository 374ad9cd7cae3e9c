// Loader lifecycle costs: time to first batch and shutdown with work in flight.
// The bounds (first batch < 0.5 s, shutdown < 100 ms) are read off these.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "util/bytes.h"

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

}  // namespace
