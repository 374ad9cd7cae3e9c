// `stoker bench stage`: host -> device staging, measured three ways in one run.
//
//  1. h2d through the ring: synthetic host batches (pinned slots of a small host ring,
//     as the loader's) pushed through a Stager — the same copy thread, events and device
//     slots as real training — with a consumer that only waits and releases;
//  2. the plain copy it is compared with: back-to-back cudaMemcpyAsync of pinned memory
//     of the same size on one stream (peak), and from pageable memory (for the record);
//  3. a consumer loop whose "kernel" takes --consumer-us per batch, fed by a source that
//     makes a batch every --source-us (default: 10% faster than the consumer, with
//     host-slot buffering like the loader's), or by a real Loader (--dataset): the
//     fraction of the consumer stream's time spent waiting on input is
//     (T_loop - T_kernels) / T_loop, where T_kernels is the same kernels run back to back.
// Without a GPU (or with --backend host) everything runs on the host backend: memcpy on
// the copy thread, HostStream consumer, a spinning "kernel".
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cli.h"
// Not the library: stoker_benchlib, the benchmarks' own code (streams, timers, copy loops).
#include "benchlib/bench_ops.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/stage.h"
// Internal (the tool links the library statically): the Json type, the one JSON writer
// and the library's reports as values (to_json_value), so --json prints the library's
// own JSON, measurements rounded as every report rounds them (figure).
#include "util/json.h"

namespace stoker::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Synthetic host batches: one uint8 tensor {1, bytes} per batch from `slots` buffers of
// `alloc`'s memory; next() blocks while every buffer is held (the loader's ring), and is
// paced to one batch per `pace_us` with up to `slots` batches of credit (a loader whose
// decoders work ahead into free slots).
class PacedSource {
 public:
  PacedSource(std::shared_ptr<SlotAllocator> alloc, size_t bytes, unsigned slots, double pace_us, uint64_t total)
      : ring_(std::move(alloc), bytes, slots), bytes_(bytes), pace_(pace_us), total_(total), slots_(slots) {
    for (unsigned i = 0; i < slots; ++i)
      std::memset(ring_.buffer(i), static_cast<int>(i + 1), bytes);  // pages faulted in before timing
  }

  StageSource source() { return StageSource{[this] { return next(); }, {}}; }

 private:
  std::optional<Batch> next() {
    if (step_ == total_) return std::nullopt;
    if (pace_ > 0) {
      const auto now = Clock::now();
      const auto period = std::chrono::nanoseconds(static_cast<int64_t>(pace_ * 1000));
      ready_at_ = std::max(ready_at_, now - period * slots_);  // credit: at most `slots` batches
      std::this_thread::sleep_until(ready_at_);
      ready_at_ += period;
    }
    auto [buf, lease] = ring_.acquire();
    std::vector<TensorView> t(1);
    t[0] = TensorView{"data", buf, {1, static_cast<int64_t>(bytes_)}, ElemType::kUint8, -1};
    return Batch(std::move(t), std::move(lease), 0, step_++, 1);
  }

  internal::BufferRing ring_;
  size_t bytes_;
  double pace_;
  uint64_t total_, step_ = 0;
  unsigned slots_;
  Clock::time_point ready_at_{};
};

struct LoopResult {
  double loop_s = 0;
  uint64_t batches = 0;
  uint64_t bytes = 0;
};

// Takes `warmup` batches untimed, then times `iters` batches on the consumer stream:
// wait, the kernel (when us > 0), release.
LoopResult consume(Stager& st, internal::BenchOps& ops, void* stream, double us, uint64_t warmup, uint64_t iters) {
  LoopResult r;
  for (uint64_t k = 0; k < warmup; ++k) {
    auto b = st.next();
    if (!b) return r;
    b->wait(stream);
    if (us > 0) ops.spin(stream, us);
    b->release(stream);
  }
  auto timer = ops.make_timer();
  timer->start(stream);
  for (uint64_t k = 0; k < iters; ++k) {
    auto b = st.next();
    if (!b) break;
    b->wait(stream);
    if (us > 0) ops.spin(stream, us);
    for (const TensorView& t : b->tensors()) r.bytes += t.bytes();
    b->release(stream);
    ++r.batches;
  }
  timer->stop(stream);
  r.loop_s = timer->seconds();
  ops.sync_stream(stream);
  return r;
}

struct StageArgs {
  std::string bytes = "32MiB", backend = "auto", dataset;
  int64_t slots = 3, host_slots = 0, iters = 50, device = -1, batch = 256, threads = 0;
  double consumer_us = 1000, source_us = -1, copy_limit_mbps = 0;
  bool json = false;
};

int bench_stage_cmd(const StageArgs& a) {
  const uint64_t bytes = parse_size(a.bytes);
  const int64_t slots = a.slots;
  const int64_t host_slots = a.host_slots > 0 ? a.host_slots : slots + 1;
  const int64_t iters = a.iters;
  const double consumer_us = a.consumer_us;
  const double source_us = a.source_us >= 0 ? a.source_us : consumer_us / 1.1;
  const bool json = a.json;
  if (bytes < 1 || bytes > (16ull << 30)) throw UsageError("--bytes must be 1 B..16 GiB");

  StageBackend kind = stage_backend_from_name(a.backend);
  if (kind == StageBackend::kAuto) kind = cuda_device_count() > 0 ? StageBackend::kCuda : StageBackend::kHost;
  if (kind == StageBackend::kCuda && cuda_device_count() == 0)
    throw_error(ErrorCode::kUnavailable, "no CUDA device: " + cuda_unavailable_reason());
  const int device =
      kind == StageBackend::kCuda ? select_device(static_cast<int>(a.device), cuda_device_count()) : -1;
  auto ops = internal::make_bench_ops(kind, device);
  auto alloc = kind == StageBackend::kCuda ? pinned_slot_allocator(device) : host_slot_allocator();

  StagerOptions so;
  so.backend = kind;
  so.device = device;
  so.device_slots = static_cast<unsigned>(slots);
  const uint64_t warmup = 3;
  const size_t sz = static_cast<size_t>(bytes);
  const int it = static_cast<int>(iters);

  // 2. The plain copies (first: they are the yardstick).
  const double peak_s = ops->plain_copy_seconds(sz, it, true);
  const double pageable_s = ops->plain_copy_seconds(sz, std::max(1, it / 4), false);
  const double peak_bps = static_cast<double>(bytes) * it / peak_s;
  const double pageable_bps = static_cast<double>(bytes) * std::max(1, it / 4) / pageable_s;

  void* stream = ops->create_stream();
  struct StreamGuard {
    internal::BenchOps* ops;
    void* s;
    ~StreamGuard() { ops->destroy_stream(s); }
  } guard{ops.get(), stream};

  // 1. Through the ring, the consumer only waiting.
  double h2d_bps = 0;
  StagerStats ring_stats;
  {
    PacedSource src(alloc, sz, static_cast<unsigned>(host_slots), 0, warmup + static_cast<uint64_t>(iters));
    Stager st(src.source(), so);
    LoopResult r = consume(st, *ops, stream, 0, warmup, static_cast<uint64_t>(iters));
    // The loop's stream time spans the copies it waited for back to back.
    h2d_bps = r.loop_s > 0 ? static_cast<double>(r.bytes) / r.loop_s : 0;
    ring_stats = st.stats();
  }

  // 3. The consumer loop: calibration, then the fed loop.
  double kernels_s = 0;
  {
    auto timer = ops->make_timer();
    timer->start(stream);
    for (int64_t k = 0; k < iters; ++k) ops->spin(stream, consumer_us);
    timer->stop(stream);
    kernels_s = timer->seconds();
  }
  LoopResult fed;
  StagerStats fed_stats;
  internal::Json loader_json;
  std::string verdict_line;
  // The fed loop only: rehearses a copy-bound feed (the ring measurement stays a yardstick).
  StagerOptions fed_so = so;
  fed_so.copy_limit_bytes_per_s = a.copy_limit_mbps * 1e6;
  const std::string& dataset = a.dataset;
  if (!dataset.empty()) {
    LoaderOptions lo;
    lo.path = dataset;
    lo.batch_size = static_cast<uint64_t>(a.batch);
    lo.threads = static_cast<unsigned>(a.threads);
    Stager st(lo, fed_so);
    fed = consume(st, *ops, stream, consumer_us, warmup, static_cast<uint64_t>(iters));
    const StagedFeed feed = diagnose_staged(st);
    fed_stats = feed.stager;
    loader_json = internal::to_json_value(feed.loader);
    verdict_line = feed.verdict.summary();
  } else {
    PacedSource src(alloc, sz, static_cast<unsigned>(host_slots), source_us, warmup + static_cast<uint64_t>(iters));
    Stager st(src.source(), fed_so);
    fed = consume(st, *ops, stream, consumer_us, warmup, static_cast<uint64_t>(iters));
    fed_stats = st.stats();
  }
  // Calibrated over `iters` kernels; the fed loop may have run fewer (a short dataset).
  const double want_s = fed.batches ? kernels_s * static_cast<double>(fed.batches) / static_cast<double>(iters) : 0;
  const double wait_frac = fed.loop_s > 0 ? std::max(0.0, (fed.loop_s - want_s) / fed.loop_s) : 0;

  std::printf("stage bench: backend %s%s, %s batches, %lld device slots, %lld host slots (%s), %lld iters\n",
              stage_backend_name(kind), kind == StageBackend::kCuda ? (" device " + std::to_string(device)).c_str() : "",
              format_bytes(static_cast<double>(bytes)).c_str(), static_cast<long long>(slots),
              static_cast<long long>(host_slots), alloc->name(), static_cast<long long>(iters));
  std::printf("h2d through the ring: %.2f GB/s = %.3f of a plain pinned copy (%.2f GB/s); pageable copy %.2f GB/s\n",
              h2d_bps / 1e9, peak_bps > 0 ? h2d_bps / peak_bps : 0, peak_bps / 1e9, pageable_bps / 1e9);
  std::printf("consumer %.0f us/batch fed by %s: %llu batches in %.3f s, kernels alone %.3f s -> stream waited on "
              "input %.2f%% of its time\n",
              consumer_us,
              dataset.empty() ? ("a source making one batch per " + std::to_string(static_cast<int>(source_us)) + " us").c_str()
                              : ("the loader on " + dataset).c_str(),
              static_cast<unsigned long long>(fed.batches), fed.loop_s, want_s, wait_frac * 100);
  std::printf("copy stream %.0f%% busy over the fed loop\n",
              fed_stats.wall_s > 0 ? 100 * std::min(1.0, fed_stats.copy_busy_s / fed_stats.wall_s) : 0.0);
  if (!verdict_line.empty()) std::printf("verdict: %s\n", verdict_line.c_str());
  if (json) {
    internal::Json j = {{"backend", stage_backend_name(kind)},
                        {"device", device},
                        {"bytes", bytes},
                        {"device_slots", slots},
                        {"host_slots", host_slots},
                        {"host_memory", alloc->name()},
                        {"iters", iters},
                        {"h2d_bytes_per_s", internal::figure(h2d_bps)},
                        {"peak_bytes_per_s", internal::figure(peak_bps)},
                        {"pageable_bytes_per_s", internal::figure(pageable_bps)},
                        {"ring_vs_peak", internal::figure(peak_bps > 0 ? h2d_bps / peak_bps : 0)},
                        {"consumer_us", internal::figure(consumer_us)},
                        {"source_us", internal::figure(dataset.empty() ? source_us : 0.0)},
                        {"consumer_batches", fed.batches},
                        {"consumer_loop_s", internal::figure(fed.loop_s)},
                        {"consumer_kernels_s", internal::figure(want_s)},
                        {"consumer_wait_frac", internal::figure(wait_frac)},
                        {"ring_stager", internal::to_json_value(ring_stats)},
                        {"fed_stager", internal::to_json_value(fed_stats)}};
    if (!loader_json.is_null()) j["loader"] = std::move(loader_json);
    std::printf("%s\n", internal::json_text(j).c_str());
  }
  return 0;
}

void setup(CLI::App& tool) {
  CLI::App* bench = group(tool, "bench", "Measure the feed, its stages and the machine's limits.");
  auto a = std::make_shared<StageArgs>();
  CLI::App* c = bench->add_subcommand(
      "stage", "Host-to-device staging: ring throughput vs a plain pinned copy, and how long a consumer stream waits on input.");
  c->add_option("--bytes", a->bytes, "bytes of one batch (1 B..16 GiB)")->check(byte_size())->capture_default_str();
  c->add_option("--slots", a->slots, "device slots")->check(CLI::Range(1, 64))->capture_default_str();
  c->add_option("--host-slots", a->host_slots, "host slots (default: slots + 1)")->check(CLI::Range(1, 64));
  c->add_option("--iters", a->iters, "batches timed")->check(CLI::Range(1, 1000000))->capture_default_str();
  c->add_option("--consumer-us", a->consumer_us, "the consumer's kernel time per batch")
      ->check(non_negative())->capture_default_str();
  c->add_option("--source-us", a->source_us, "one batch made every P us (default: 10% faster than the consumer)")
      ->check(non_negative());
  c->add_option("--copy-limit-mbps", a->copy_limit_mbps, "throttle the fed loop's copies (rehearses a copy-bound feed)")
      ->check(non_negative());
  c->add_option("--backend", a->backend, "copy backend")->check(named_by(stage_backend_from_name, "auto|cuda|host"))
      ->capture_default_str();
  c->add_option("--device", a->device, "CUDA device (-1: LOCAL_RANK, else 0)")->capture_default_str();
  c->add_option("--dataset", a->dataset, "feed the consumer from a real loader on this dataset");
  c->add_option("--batch", a->batch, "batch size of the loader (--dataset)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  c->add_option("--threads", a->threads, "decode threads of the loader (--dataset; 0: the CPU plan)")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  c->add_flag("--json", a->json, "a JSON object after the text");
  on_run(c, [a] { return bench_stage_cmd(*a); });
}

}  // namespace

STOKER_COMMAND("bench stage", setup);

}  // namespace stoker::cli
