// Staging: host batches in pinned memory, copied to a device ring on their own stream,
// handed to the trainer as device batches ordered by events, never by host syncs.
//
// A Stager sits behind a Loader (or any source of host Batches). Its `stoker-h2d` thread
// picks a free slot of a device ring that is allocated once (stable addresses across
// epochs, so CUDA graphs may capture them), waits until the kernels that read the slot's
// previous batch are done (its release event), takes the next ready host batch and
// queues on a dedicated non-blocking copy stream one cudaMemcpyAsync per tensor and
// "record the slot's copy event" — so a loader slot is held only while its copy runs.
// A second thread (`stoker-h2d-rel`) waits for copy events in order and gives each
// host batch back to the loader as soon as its copy has landed, so the decoders get their
// slots back without anyone polling on their behalf.
//
// The consumer contract (DeviceBatch):
//   b.wait(stream)    the trainer's stream waits for the copy event (cudaStreamWaitEvent;
//                     the host does not block) and, when StagerOptions asks for it, runs
//                     the on-device conversion (uint8 NHWC -> normalised NCHW float,
//                     uint16 tokens -> int64) on that stream;
//   ...kernels reading b's tensors on `stream`...
//   b.release(stream) records the slot's release event on `stream`: the slot is refilled
//                     only after everything queued on `stream` before it has finished.
// Releasing before waiting, releasing twice, waiting or reading tensors after release are
// kInvalidArgument errors (cheap checks, always on). Dropping a batch that was waited on
// releases it on the stream it was waited on; dropping one never waited on just frees
// its slot.
//
// Backends: the CUDA backend (a build with STOKER_HAS_CUDA and a visible device) copies
// with cudaMemcpyAsync and orders with CUDA events; the host backend runs the very same
// ring/slot/event state machine with memcpy on a copy thread and host events. "Device"
// memory is then host memory (TensorView::device == -1), and a `stream` argument is
// nullptr: the work runs on the calling thread, synchronously. (The library's own tests
// and benchmarks pass internal in-order host queues there.) With CUDA, `stream` is a
// cudaStream_t (nullptr: the legacy default stream).
//
// Threading: a Stager is driven by one consumer thread (next(), set_epoch()); stats() may
// be called from any thread. DeviceBatches may be released on any thread and may outlive
// the Stager (the device ring lives until the last batch is gone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/batch.h"
#include "stoker/order.h"
#include "stoker/stats.h"

namespace stoker {

struct LoaderOptions;
class Loader;

namespace internal {
class DeviceSlotLease;
class StageCore;
}  // namespace internal

enum class StageBackend {
  kAuto,  ///< CUDA when built with it and a device is visible, else host
  kCuda,  ///< CUDA or kUnavailable
  kHost,  ///< memcpy on a copy thread, host events (tests, CPU-only machines)
};
const char* stage_backend_name(StageBackend b) noexcept;  ///< "auto" | "cuda" | "host"
StageBackend stage_backend_from_name(const std::string& s);  ///< throws kInvalidArgument

// --- devices -------------------------------------------------------------------------

/// CUDA devices visible to this process: 0 in a build without CUDA, without a driver,
/// or when cudaGetDeviceCount fails (the reason is in cuda_unavailable_reason()).
int cuda_device_count() noexcept;
/// Why cuda_device_count() is 0 ("built without CUDA", "cudaGetDeviceCount: ..."), or "".
std::string cuda_unavailable_reason();

/// The device to use: `requested` when >= 0; else the LOCAL_RANK environment variable;
/// else 0. With `device_count` > 0 the result must be below it, except that a LOCAL_RANK
/// of a process that sees exactly one device (CUDA_VISIBLE_DEVICES per rank) maps to 0.
/// Throws kInvalidArgument for a malformed LOCAL_RANK or an out-of-range device.
int select_device(int requested, int device_count);

/// The PCI bus id ("0000:17:00.0", lower case) of CUDA device `device`, or nullopt
/// (no CUDA, no such device). Feeds plan_cpus() / LoaderOptions::gpu_pci_bus_id.
std::optional<std::string> cuda_pci_bus_id(int device);

/// Pinned host memory for loader slots: cudaHostAlloc(cudaHostAllocPortable), which
/// both pins and maps the pages for DMA, so async copies from it are truly async. Pages
/// are placed by the kernel's default (first-touch on the allocating thread's node).
/// name() is "pinned". Without CUDA or a device: host_slot_allocator().
std::shared_ptr<SlotAllocator> pinned_slot_allocator(int device);

// --- conversion ------------------------------------------------------------------------

/// Converts `src` (uint8 {N, H, W, 3}) into `dst` ({N, 3, H, W} of `dst_type`). When
/// src.device >= 0: a CUDA kernel on `stream` (cudaStream_t), nothing waits on the host.
/// Otherwise on the CPU, bit for bit what the kernel computes: (x / 255 - mean[c]) /
/// std[c] in float32, 16-bit types rounded to nearest even; run now (`stream` nullptr).
void convert_image(const TensorView& src, ElemType dst_type, const float mean[3], const float std[3],
                   void* dst, void* stream);
/// Widens `src` (kUint16/kUint32/kInt32/kInt64, any shape) into int64 `dst`, likewise.
void widen_tokens(const TensorView& src, int64_t* dst, void* stream);

// --- the stager ------------------------------------------------------------------------

struct StagerOptions {
  StageBackend backend = StageBackend::kAuto;
  /// CUDA device ordinal; -1: LOCAL_RANK, else 0 (select_device()). Ignored by kHost.
  int device = -1;
  /// Device ring size, 1..64. Each slot holds one batch (plus its converted tensors).
  unsigned device_slots = 3;
  /// Samples (dim 0) a device slot holds; 0: the loader's batch_size, or for a raw
  /// source the first batch's dim 0. A later batch that does not fit is an error.
  uint64_t max_batch_samples = 0;
  /// kUint8: the "image" tensor is delivered as copied (uint8 NHWC). kFloat32/kFloat16/
  /// kBFloat16: wait() converts it on the consumer's stream into normalised NCHW of that
  /// type with mean/std, and the batch's "image" tensor is the converted one. The loader
  /// must then deliver uint8 HWC (PixelFormat::kU8HWC, its default).
  ElemType image_dtype = ElemType::kUint8;
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  /// true: "tokens"/"targets" travel in their stored type and wait() widens them to
  /// int64 on the consumer's stream (the batch's tensors are then int64).
  bool widen_tokens = false;
  /// With an owned Loader: give it pinned_slot_allocator() unless its options name one.
  bool pinned_host_slots = true;
  /// With an owned Loader: set its gpu_pci_bus_id from the device (NUMA-local CPUs)
  /// unless already set.
  bool numa_local_threads = true;
  /// > 0: the copy stream carries at most this many bytes per second (each batch's
  /// copy is followed on the stream by a pause); rehearses a copy-bound feed, as
  /// `stoker bench stage --copy-limit-mbps` and the diagnosis tests do.
  double copy_limit_bytes_per_s = 0;
};

struct StagerStats {
  std::string backend;          ///< "cuda" | "host"
  int device = -1;              ///< CUDA ordinal; -1 for the host backend
  unsigned device_slots = 0;
  size_t slot_bytes = 0;        ///< bytes of one device slot (0 before the first batch)
  std::string host_memory;      ///< "pinned", "host", ... (owned loader) or "" (raw source)
  uint64_t batches = 0;         ///< copies issued
  uint64_t bytes_copied = 0;    ///< host -> device payload bytes
  uint64_t host_released = 0;   ///< host batches given back after their copy landed
  double source_wait_s = 0;     ///< stoker-h2d blocked in the source's next()
  double slot_wait_s = 0;       ///< stoker-h2d waiting for a free slot and its release event
  double consumer_wait_s = 0;   ///< next() blocked waiting for a batch
  /// Seconds the copy stream had a copy in flight: from its issue (or the previous
  /// copy's landing, when queued behind it) to its landing as the host saw it.
  double copy_busy_s = 0;
  /// Seconds the consumer's streams waited for copies, as the host sees it: for each
  /// batch handed out before its copy landed, landing minus hand-out (an upper bound:
  /// the stream may still have been busy with earlier work).
  double device_wait_s = 0;
  double wall_s = 0;            ///< since the copy thread first started (figures add up across epochs)
  /// The fields above by name (stats.h), in the order backend, device, device_slots,
  /// slot_bytes, host_memory, batches, bytes_copied, host_released, source_wait_s,
  /// slot_wait_s, copy_busy_s, device_wait_s, wall_s, consumer_wait_s.
  void visit(StatsVisitor& v) const;
  std::string to_json() const;  ///< one JSON object, no newline: visit()'s figures
};

/// A batch in a device slot. Move-only; see the consumer contract at the top.
class DeviceBatch {
 public:
  DeviceBatch() = default;
  DeviceBatch(DeviceBatch&& o) noexcept;
  DeviceBatch& operator=(DeviceBatch&& o) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
  /// Waited, not released: released on the stream it was waited on (errors swallowed;
  /// that stream must still exist). Never waited: the slot is freed (nothing read it).
  /// Never throws.
  ~DeviceBatch();

  /// Makes `stream` wait for the copy (and runs the conversions on the first call);
  /// may be called for several streams. kInvalidArgument after release or on an
  /// empty batch.
  void wait(void* stream);
  /// Records the release on `stream`; the batch must have been waited on (by any
  /// stream) and not yet released, else kInvalidArgument. `stream` must be ordered after
  /// every kernel reading the batch.
  void release(void* stream);

  /// The tensor called `name` (device pointers); kInvalidArgument when absent, when the
  /// batch was released or is empty. Pointers stay the slot's for the Stager's life;
  /// kernels may use them until the release event, not after.
  const TensorView& operator[](const std::string& name) const;
  /// nullptr when absent, released or empty.
  const TensorView* find(const std::string& name) const noexcept;
  const std::vector<TensorView>& tensors() const noexcept { return tensors_; }
  uint64_t epoch() const noexcept { return epoch_; }
  uint64_t step() const noexcept { return step_; }
  uint64_t size() const noexcept { return size_; }
  int device() const noexcept { return device_; }  ///< -1: host backend
  bool valid() const noexcept { return state_ != State::kEmpty; }
  bool waited() const noexcept { return state_ == State::kWaited; }
  bool released() const noexcept { return state_ == State::kReleased; }

 private:
  friend class internal::StageCore;
  enum class State : uint8_t { kEmpty, kReady, kWaited, kReleased };
  std::vector<TensorView> tensors_;
  /// Text, byte strings and variable-length arrays: host copies (TensorKind other than
  /// kDense stays in host memory, device -1).
  std::vector<std::shared_ptr<std::vector<uint8_t>>> host_copies_;
  std::shared_ptr<internal::DeviceSlotLease> lease_;
  uint64_t epoch_ = 0, step_ = 0, size_ = 0;
  int device_ = -1;
  State state_ = State::kEmpty;
  void* waited_stream_ = nullptr;
};

/// Where a Stager gets host batches from. `next` is called on the stoker-h2d thread only
/// (never concurrently); `set_epoch` (may be empty) on the consumer's thread while
/// stoker-h2d is stopped.
struct StageSource {
  std::function<std::optional<Batch>()> next;
  std::function<void(uint64_t)> set_epoch;
};

class Stager {
 public:
  /// Owns a Loader built from `loader_options`, given pinned slots and NUMA-local CPUs
  /// (see StagerOptions). kUnavailable when kCuda is asked for and there is no device;
  /// kInvalidArgument for bad options. Threads start on the first next(). A Loader with
  /// buckets (LoaderOptions::buckets): its bucket-shaped tensors get device slots sized
  /// for the largest bucket, and each device batch has its host batch's shape.
  Stager(LoaderOptions loader_options, StagerOptions options = {});
  /// Stages batches from `source` (host memory; pinned for truly async CUDA copies).
  Stager(StageSource source, StagerOptions options);
  /// Stops stoker-h2d (after the source's current next() returns), waits for copies in
  /// flight, gives every host batch back, then destroys the owned Loader. Batches handed
  /// out stay valid.
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  /// The next batch in order, or nullopt at the end of the source's epoch. Rethrows the
  /// error the source raised for that batch (the Loader's: shard, record, reason).
  std::optional<DeviceBatch> next();
  /// Drops staged batches not handed out and restarts the source at epoch `e`.
  void set_epoch(uint64_t e);

  /// Where the consumer stands, for resuming: the owned Loader's state() as it was right
  /// after it produced the last batch next() has handed out in this run (or at the run's
  /// start). stoker-h2d stages ahead, so this is not the Loader's own state() now (which
  /// counts batches staged). Resumable with load_state() here, or in a Loader (or a Stager
  /// over one) with the same options. kInvalidArgument for a raw source (its owner knows
  /// its position).
  OrderState state() const;
  /// Drops staged batches not handed out and restarts the owned Loader at `s` (what
  /// Loader::load_state accepts: kInvalidArgument when `s` belongs to other order
  /// options or another dataset size, or for a raw source; nothing is dropped then).
  void load_state(const OrderState& s);
  /// The current run's epoch, and the batches next() hands out in it (from its start or
  /// resume point): the owned Loader's epoch() and num_batches() when the run began.
  /// Set by the constructor, set_epoch() and load_state() only, so readable on the
  /// consumer's thread while another thread is in next(). kInvalidArgument for a raw source.
  uint64_t epoch() const;
  uint64_t num_batches() const;

  /// The owned Loader, or nullptr for a raw source. Its next()/set_epoch()/state()/
  /// load_state() belong to stoker-h2d (use the Stager's state() and load_state());
  /// stats() and the const accessors are safe from any thread.
  Loader* loader() noexcept;
  StageBackend backend() const noexcept;  ///< kCuda or kHost
  int device() const noexcept;            ///< CUDA ordinal, -1 for host
  StagerStats stats() const;

 private:
  std::unique_ptr<Loader> loader_;
  std::shared_ptr<internal::StageCore> core_;
  // Where the consumer stands in the owned Loader's epoch (stager.cc); null for a raw source.
  struct Position;
  std::unique_ptr<Position> pos_;

  void run_restarted();  // stoker-h2d stopped: the run begins at the Loader's state()
};

}  // namespace stoker
