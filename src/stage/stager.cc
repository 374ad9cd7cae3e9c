// The Stager facade and DeviceBatch's consumer contract, over the StageCore state
// machine (stage_core.h): backend selection, the owned Loader's pinned slots and
// NUMA-local threads, and where the consumer stands for resuming.
#include <deque>
#include <mutex>
#include <utility>

#include "stage/copy_backend.h"
#include "stage/stage_core.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/stage.h"
#include "util/json.h"
#include "util/tensor_lookup.h"

namespace stoker {
namespace internal {
namespace {

StageBackend resolve_backend(StageBackend b) {
  if (b == StageBackend::kHost) return b;
  const int n = cuda_device_count();
  if (b == StageBackend::kCuda && n == 0)
    throw_error(ErrorCode::kUnavailable, "no CUDA device: " + cuda_unavailable_reason());
  return n > 0 ? StageBackend::kCuda : StageBackend::kHost;
}

std::unique_ptr<CopyBackend> make_backend(StageBackend b, int device) {
#if STOKER_HAS_CUDA
  if (b == StageBackend::kCuda) return make_cuda_backend(device);
#else
  (void)device;
  if (b == StageBackend::kCuda) throw_error(ErrorCode::kUnavailable, "no CUDA device: stoker was built without CUDA");
#endif
  return make_host_backend();
}

void check_options(const StagerOptions& o) {
  if (o.device_slots < 1 || o.device_slots > 64)
    throw_error(ErrorCode::kInvalidArgument,
                "StagerOptions::device_slots must be 1..64, got " + std::to_string(o.device_slots));
  if (o.image_dtype != ElemType::kUint8 && o.image_dtype != ElemType::kFloat32 &&
      o.image_dtype != ElemType::kFloat16 && o.image_dtype != ElemType::kBFloat16)
    throw_error(ErrorCode::kInvalidArgument, std::string("StagerOptions::image_dtype must be uint8, float32, "
                                                         "float16 or bfloat16, not ") +
                                                 elem_type_name(o.image_dtype));
  for (int c = 0; c < 3; ++c)
    if (!(o.std[c] != 0.0f))
      throw_error(ErrorCode::kInvalidArgument, "StagerOptions::std must be non-zero");
}

}  // namespace
}  // namespace internal

// --- DeviceBatch ---------------------------------------------------------------------

DeviceBatch::DeviceBatch(DeviceBatch&& o) noexcept
    : tensors_(std::move(o.tensors_)),
      host_copies_(std::move(o.host_copies_)),
      lease_(std::move(o.lease_)),
      epoch_(o.epoch_),
      step_(o.step_),
      size_(o.size_),
      device_(o.device_),
      state_(std::exchange(o.state_, State::kEmpty)),
      waited_stream_(o.waited_stream_) {}

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& o) noexcept {
  if (this != &o) {
    DeviceBatch old(std::move(*this));  // released (per the destructor) at scope end
    tensors_ = std::move(o.tensors_);
    host_copies_ = std::move(o.host_copies_);
    lease_ = std::move(o.lease_);
    epoch_ = o.epoch_;
    step_ = o.step_;
    size_ = o.size_;
    device_ = o.device_;
    state_ = std::exchange(o.state_, State::kEmpty);
    waited_stream_ = o.waited_stream_;
  }
  return *this;
}

DeviceBatch::~DeviceBatch() {
  if (state_ == State::kWaited && lease_) {
    try {
      lease_->release(waited_stream_);
    } catch (...) {
    }
  }
}

namespace {
std::string describe(uint64_t epoch, uint64_t step) {
  return "device batch (epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + ")";
}
}  // namespace

void DeviceBatch::wait(void* stream) {
  if (state_ == State::kEmpty) throw_error(ErrorCode::kInvalidArgument, "wait() on an empty DeviceBatch");
  if (state_ == State::kReleased)
    throw_error(ErrorCode::kInvalidArgument, describe(epoch_, step_) + ": wait() after release()");
  const bool first = state_ == State::kReady;
  lease_->wait(stream, first);
  if (first) {
    waited_stream_ = stream;
    state_ = State::kWaited;
  }
}

void DeviceBatch::release(void* stream) {
  if (state_ == State::kEmpty) throw_error(ErrorCode::kInvalidArgument, "release() on an empty DeviceBatch");
  if (state_ == State::kReleased)
    throw_error(ErrorCode::kInvalidArgument, describe(epoch_, step_) + " released twice");
  if (state_ == State::kReady)
    throw_error(ErrorCode::kInvalidArgument,
                describe(epoch_, step_) + ": release() before wait(): no stream has been ordered after its copy "
                                          "(drop the batch instead to skip it)");
  lease_->release(stream);
  state_ = State::kReleased;
  lease_.reset();  // the slot goes back to the ring
}

const TensorView* DeviceBatch::find(const std::string& name) const noexcept {
  if (state_ == State::kEmpty || state_ == State::kReleased) return nullptr;
  return internal::find_tensor(tensors_, name);
}

const TensorView& DeviceBatch::operator[](const std::string& name) const {
  if (state_ == State::kEmpty) throw_error(ErrorCode::kInvalidArgument, "tensor '" + name + "' of an empty DeviceBatch");
  if (state_ == State::kReleased)
    throw_error(ErrorCode::kInvalidArgument, describe(epoch_, step_) + ": tensor '" + name + "' used after release()");
  return internal::tensor_named(tensors_, name, describe(epoch_, step_));
}

// --- Stager --------------------------------------------------------------------------

// The owned Loader's position as the consumer sees it. stoker-h2d takes batches ahead of
// the consumer, so the Loader's own state() runs ahead too; instead stoker-h2d records it
// right after each batch it takes (the one moment it is exact for that batch), and next()
// adopts the record of the batch it hands out. No schedule is re-derived here, so tokens'
// trimmed tails and mixtures resume exactly as the Loader would.
struct Stager::Position {
  std::mutex mu;
  std::deque<OrderState> staged;  // (mu) one per batch taken from the Loader, in order
  // The consumer's thread only:
  OrderState consumer;  // after the last batch handed out (or the run's start)
  uint64_t run_epoch = 0, run_batches = 0;
  std::optional<OrderState> pending_load;  // applied by the source's set_epoch
};

Stager::Stager(LoaderOptions lo, StagerOptions o) {
  internal::check_options(o);
  const StageBackend b = internal::resolve_backend(o.backend);
  const int dev = b == StageBackend::kCuda ? select_device(o.device, cuda_device_count()) : -1;
  if (b == StageBackend::kCuda) {
    if (o.numa_local_threads && !lo.gpu_pci_bus_id) lo.gpu_pci_bus_id = cuda_pci_bus_id(dev);
    if (o.pinned_host_slots && !lo.slot_allocator) lo.slot_allocator = pinned_slot_allocator(dev);
  }
  if (o.image_dtype != ElemType::kUint8 && lo.pixel_format != PixelFormat::kU8HWC)
    throw_error(ErrorCode::kInvalidArgument,
                "StagerOptions::image_dtype converts on the device: the loader must deliver uint8 HWC "
                "(LoaderOptions::pixel_format = kU8HWC)");
  const std::string host_memory = lo.slot_allocator ? lo.slot_allocator->name() : host_slot_allocator()->name();
  const uint64_t samples = lo.batch_size;
  const uint64_t max_tokens = lo.max_tokens;
  std::vector<BucketSize> buckets = resolve_buckets(lo.buckets);
  loader_ = std::make_unique<Loader>(std::move(lo));
  pos_ = std::make_unique<Position>();
  Loader* l = loader_.get();
  Position* p = pos_.get();
  StageSource src{[l, p] {
                    std::optional<Batch> b = l->next();
                    if (b) {
                      const OrderState after = l->state();  // stoker-h2d owns the Loader
                      std::lock_guard<std::mutex> lock(p->mu);
                      p->staged.push_back(after);
                    }
                    return b;
                  },
                  // On the consumer's thread with stoker-h2d stopped: the one moment the
                  // Loader may be repositioned, so a pending load_state() is applied here.
                  [l, p](uint64_t e) {
                    if (p->pending_load) l->load_state(*std::exchange(p->pending_load, std::nullopt));
                    else l->set_epoch(e);
                  }};
  core_ = std::make_shared<internal::StageCore>(internal::make_backend(b, dev), std::move(src), o, samples, host_memory,
                                                std::move(buckets), max_tokens);
  run_restarted();  // no thread runs yet
}

Stager::Stager(StageSource source, StagerOptions o) {
  internal::check_options(o);
  if (!source.next) throw_error(ErrorCode::kInvalidArgument, "Stager: the source has no next()");
  const StageBackend b = internal::resolve_backend(o.backend);
  const int dev = b == StageBackend::kCuda ? select_device(o.device, cuda_device_count()) : -1;
  core_ = std::make_shared<internal::StageCore>(internal::make_backend(b, dev), std::move(source), o, 0, "");
}

Stager::~Stager() {
  if (core_) core_->shutdown();  // threads stopped before the loader they call goes
  core_.reset();
  loader_.reset();
}

void Stager::run_restarted() {
  if (!pos_) return;
  {
    std::lock_guard<std::mutex> lock(pos_->mu);
    pos_->staged.clear();  // their batches were dropped with the run
  }
  pos_->consumer = loader_->state();
  pos_->run_epoch = loader_->epoch();
  pos_->run_batches = loader_->num_batches();
}

std::optional<DeviceBatch> Stager::next() {
  std::optional<DeviceBatch> b = core_->next();
  if (b && pos_) {
    std::lock_guard<std::mutex> lock(pos_->mu);
    // Batches reach the consumer in the order the Loader produced them, and the first
    // that fails to stage ends the run: the front record is this batch's.
    pos_->consumer = pos_->staged.front();
    pos_->staged.pop_front();
  }
  return b;
}

void Stager::set_epoch(uint64_t e) {
  core_->set_epoch(e);
  run_restarted();
}

namespace {
void need_loader(bool owned, const char* what) {
  if (!owned) throw_error(ErrorCode::kInvalidArgument, std::string("Stager::") + what + ": a raw source keeps its own position");
}
}  // namespace

OrderState Stager::state() const {
  need_loader(pos_ != nullptr, "state()");
  return pos_->consumer;
}

void Stager::load_state(const OrderState& s) {
  need_loader(pos_ != nullptr, "load_state()");
  s.check_matches(pos_->consumer.options(), pos_->consumer.total);  // before anything is dropped
  pos_->pending_load = s;
  try {
    core_->set_epoch(s.epoch);  // applies pending_load with stoker-h2d stopped
  } catch (...) {
    pos_->pending_load.reset();
    throw;
  }
  run_restarted();
}

uint64_t Stager::epoch() const {
  need_loader(pos_ != nullptr, "epoch()");
  return pos_->run_epoch;
}

uint64_t Stager::num_batches() const {
  need_loader(pos_ != nullptr, "num_batches()");
  return pos_->run_batches;
}

Loader* Stager::loader() noexcept { return loader_.get(); }
StageBackend Stager::backend() const noexcept { return core_->backend().kind(); }
int Stager::device() const noexcept { return core_->backend().device(); }
StagerStats Stager::stats() const { return core_->stats(); }

void StagerStats::visit(StatsVisitor& v) const {
  v.text("backend", backend);
  v.integer("device", device);
  v.count("device_slots", device_slots);
  v.count("slot_bytes", slot_bytes);
  v.text("host_memory", host_memory);
  v.count("batches", batches);
  v.count("bytes_copied", bytes_copied);
  v.count("host_released", host_released);
  v.figure("source_wait_s", source_wait_s);
  v.figure("slot_wait_s", slot_wait_s);
  v.figure("copy_busy_s", copy_busy_s);
  v.figure("device_wait_s", device_wait_s);
  v.figure("wall_s", wall_s);
  v.figure("consumer_wait_s", consumer_wait_s);
}

namespace internal {

Json to_json_value(const StagerStats& s) {
  JsonStatsWriter w;
  s.visit(w);
  return w.take();
}

}  // namespace internal

std::string StagerStats::to_json() const { return internal::json_text(internal::to_json_value(*this)); }

}  // namespace stoker
