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
#include "benchlib/bench_ops.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/stage.h"

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

int bench_stage_cmd(const Args& args) {
  ArgParser p(args, {"json"});
  p.check_known({"json", "bytes", "slots", "host-slots", "iters", "consumer-us", "source-us", "backend", "device",
                 "dataset", "batch", "threads", "copy-limit-mbps"});
  if (!p.positional().empty())
    throw_error(ErrorCode::kInvalidArgument, "usage: stoker bench stage [options] (no positional arguments)");
  const uint64_t bytes = parse_size(p.get_or("bytes", "32MiB"));
  const int64_t slots = p.get_int("slots", 3);
  const int64_t host_slots = p.get_int("host-slots", slots + 1);
  const int64_t iters = p.get_int("iters", 50);
  const double consumer_us = p.get_double("consumer-us", 1000);
  const double source_us = p.get_double("source-us", consumer_us / 1.1);
  const bool json = p.flag("json");
  if (bytes < 1 || bytes > (16ull << 30)) throw_error(ErrorCode::kInvalidArgument, "--bytes must be 1 B..16 GiB");
  if (slots < 1 || slots > 64) throw_error(ErrorCode::kInvalidArgument, "--slots must be 1..64");
  if (host_slots < 1 || host_slots > 64) throw_error(ErrorCode::kInvalidArgument, "--host-slots must be 1..64");
  if (iters < 1 || iters > 1000000) throw_error(ErrorCode::kInvalidArgument, "--iters must be 1..1000000");
  if (consumer_us < 0 || source_us < 0) throw_error(ErrorCode::kInvalidArgument, "--consumer-us/--source-us must be >= 0");

  StageBackend kind = stage_backend_from_name(p.get_or("backend", "auto"));
  if (kind == StageBackend::kAuto) kind = cuda_device_count() > 0 ? StageBackend::kCuda : StageBackend::kHost;
  if (kind == StageBackend::kCuda && cuda_device_count() == 0)
    throw_error(ErrorCode::kUnavailable, "no CUDA device: " + cuda_unavailable_reason());
  const int device =
      kind == StageBackend::kCuda ? select_device(static_cast<int>(p.get_int("device", -1)), cuda_device_count()) : -1;
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
  std::string loader_json, verdict_line;
  // The fed loop only: rehearses a copy-bound feed (the ring measurement stays a yardstick).
  StagerOptions fed_so = so;
  fed_so.copy_limit_bytes_per_s = p.get_double("copy-limit-mbps", 0) * 1e6;
  const std::string dataset = p.get_or("dataset", "");
  if (!dataset.empty()) {
    LoaderOptions lo;
    lo.path = dataset;
    lo.batch_size = static_cast<uint64_t>(p.get_int("batch", 256));
    lo.threads = static_cast<unsigned>(p.get_int("threads", 0));
    Stager st(lo, fed_so);
    fed = consume(st, *ops, stream, consumer_us, warmup, static_cast<uint64_t>(iters));
    fed_stats = st.stats();
    LoaderStats ls = st.loader()->stats();
    const Verdict v = diagnose(FeedFigures::from(ls, fed_stats));
    record_verdict(ls, v);
    loader_json = ls.to_json();
    verdict_line = v.summary();
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
    std::printf(
        "{\"backend\":\"%s\",\"device\":%d,\"bytes\":%llu,\"device_slots\":%lld,\"host_slots\":%lld,"
        "\"host_memory\":\"%s\",\"iters\":%lld,\"h2d_bytes_per_s\":%.1f,\"peak_bytes_per_s\":%.1f,"
        "\"pageable_bytes_per_s\":%.1f,\"ring_vs_peak\":%.4f,\"consumer_us\":%.1f,\"source_us\":%.1f,"
        "\"consumer_batches\":%llu,\"consumer_loop_s\":%.6f,\"consumer_kernels_s\":%.6f,"
        "\"consumer_wait_frac\":%.5f,\"ring_stager\":%s,\"fed_stager\":%s%s%s}\n",
        stage_backend_name(kind), device, static_cast<unsigned long long>(bytes), static_cast<long long>(slots),
        static_cast<long long>(host_slots), alloc->name(), static_cast<long long>(iters), h2d_bps, peak_bps,
        pageable_bps, peak_bps > 0 ? h2d_bps / peak_bps : 0, consumer_us, dataset.empty() ? source_us : 0.0,
        static_cast<unsigned long long>(fed.batches), fed.loop_s, want_s, wait_frac, ring_stats.to_json().c_str(),
        fed_stats.to_json().c_str(), loader_json.empty() ? "" : ",\"loader\":", loader_json.c_str());
  }
  return 0;
}

}  // namespace

STOKER_COMMAND("bench stage",
               "[--bytes N] [--slots S] [--host-slots H] [--iters I] [--consumer-us U] [--source-us P] [--copy-limit-mbps M] "
               "[--backend auto|cuda|host] [--device D] [--dataset PATH [--batch B] [--threads T]] [--json]",
               "Host-to-device staging: ring throughput vs a plain pinned copy, and how long a consumer "
               "stream waits on input.",
               bench_stage_cmd);

}  // namespace stoker::cli
