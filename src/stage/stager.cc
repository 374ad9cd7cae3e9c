// The staging state machine: a ring of device slots, the stoker-h2d copy thread, the
// stoker-h2d-rel release thread, and the consumer contract of DeviceBatch.
//
// A device slot cycles through
//   free --(stoker-h2d: waits for its release event, takes a host batch, queues on the
//          copy stream: wait on the release event, copies, record the copy event)-->
//   staged (in ready_) --(next())--> handed out --(release(stream): release event
//          recorded on the consumer's stream)--> free.
// The slot is put back on the free list as soon as release() is called on the host.
// stoker-h2d (never the consumer) then waits on the host for the release event before
// it takes the next host batch, so a host batch is held only while its copy runs; the
// copy stream's own wait on the event is kept as the device-side ordering guarantee.
// A host batch is held from the copy's issue until its copy event completes; the release
// thread waits for copy events in issue order and drops each host batch right after,
// giving its slot back to the loader while stoker-h2d may be blocked in the source.
//
// Lock order: StageCore::mu_ only; it is never held while calling the source, the backend
// or destroying a DeviceBatch (whose lease takes mu_ to give its slot back).
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "stage/copy_backend.h"
#include "stoker/cpu.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/stage.h"
#include "util/json.h"
#include "util/tensor_lookup.h"

namespace stoker {
namespace internal {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// How one tensor of the source's batches lives in a device slot.
struct TensorPlan {
  enum class Conv { kNone, kImage, kWiden };
  std::string name;
  ElemType dtype = ElemType::kUint8;
  size_t rank = 0;
  std::vector<int64_t> sample_shape;  // shape[1:]
  size_t sample_bytes = 0;            // bytes of one sample (rank 0: of the whole tensor)
  size_t offset = 0, capacity = 0;    // the copied bytes
  Conv conv = Conv::kNone;
  ElemType out_dtype = ElemType::kUint8;
  size_t out_offset = 0, out_capacity = 0;  // the converted tensor
  // Text, byte strings and variable-length arrays stay on the host: their size changes
  // from batch to batch, and the device has no use for strings. The device batch keeps
  // a copy of them.
  bool host = false;
};

struct ConvJob {
  TensorPlan::Conv kind = TensorPlan::Conv::kNone;
  const void* src = nullptr;
  void* dst = nullptr;
  ElemType src_type = ElemType::kUint8, dst_type = ElemType::kUint8;
  int64_t n = 0, h = 0, w = 0, count = 0;
};

}  // namespace

class StageCore : public std::enable_shared_from_this<StageCore> {
 public:
  StageCore(std::unique_ptr<CopyBackend> backend, StageSource source, StagerOptions opt, uint64_t default_samples,
            std::string host_memory)
      : backend_(std::move(backend)),
        source_(std::move(source)),
        opt_(opt),
        default_samples_(default_samples),
        host_memory_(std::move(host_memory)) {
    slots_.resize(opt_.device_slots);
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].copy_ev = backend_->make_event();
      slots_[i].ready_ev = backend_->make_event();
      slots_[i].release_ev = backend_->make_event();
      free_.push_back(i);
    }
  }

  ~StageCore() {
    shutdown();
    // Work a consumer queued before releasing (conversions, its kernels) must be done
    // before the memory goes; for CUDA cudaFree would also wait.
    for (Slot& s : slots_) {
      try {
        backend_->sync(*s.copy_ev);
        backend_->sync(*s.ready_ev);
        backend_->sync(*s.release_ev);
      } catch (...) {
      }
      if (s.mem) backend_->free_slot(s.mem);
      s.mem = nullptr;
    }
  }

  CopyBackend& backend() noexcept { return *backend_; }

  std::optional<DeviceBatch> next() {
    const auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    if (shut_) throw_error(ErrorCode::kCancelled, "stager: next() after shutdown");
    if (run_over_) return std::nullopt;
    if (!started_) start_locked();
    cv_.wait(lock, [&] { return !ready_.empty() || async_error_; });
    consumer_wait_s_ += seconds_since(t0);
    if (async_error_) {
      run_over_ = true;
      std::rethrow_exception(std::exchange(async_error_, nullptr));
    }
    Item it = std::move(ready_.front());
    ready_.pop_front();
    if (it.kind == Item::kEnd) {
      run_over_ = true;
      return std::nullopt;
    }
    if (it.kind == Item::kError) {
      run_over_ = true;
      lock.unlock();
      std::rethrow_exception(it.error);
    }
    slots_[it.slot].handed_out = Clock::now();
    slots_[it.slot].handed_copy = slots_[it.slot].copies;
    return std::optional<DeviceBatch>(std::move(it.batch));
  }

  void set_epoch(uint64_t e) {
    stop_threads();
    drop_ready();
    if (source_.set_epoch) source_.set_epoch(e);
    std::lock_guard<std::mutex> lock(mu_);
    run_over_ = false;
    async_error_ = nullptr;
  }

  /// Stops the threads, drops staged batches (breaking their leases' cycle back to us).
  void shutdown() {
    stop_threads();
    drop_ready();
    std::lock_guard<std::mutex> lock(mu_);
    shut_ = true;
  }

  void give_back(size_t slot) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(slot);
    }
    cv_.notify_all();
  }

  void wait_slot(size_t slot, const std::vector<ConvJob>& jobs, void* stream, bool first) {
    Slot& s = slots_[slot];
    if (!first) {
      backend_->stream_wait(stream, jobs.empty() ? *s.copy_ev : *s.ready_ev);
      return;
    }
    backend_->stream_wait(stream, *s.copy_ev);
    if (jobs.empty()) return;
    for (const ConvJob& j : jobs) {
      if (j.kind == TensorPlan::Conv::kImage)
        backend_->convert_image(static_cast<const uint8_t*>(j.src), j.n, j.h, j.w, j.dst_type, opt_.mean, opt_.std,
                                j.dst, stream);
      else
        backend_->widen_tokens(j.src, j.src_type, j.count, static_cast<int64_t*>(j.dst), stream);
    }
    backend_->stream_record(stream, *s.ready_ev);
  }

  void release_slot(size_t slot, void* stream) { backend_->stream_record(stream, *slots_[slot].release_ev); }

  StagerStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    StagerStats s;
    s.backend = stage_backend_name(backend_->kind());
    s.device = backend_->device();
    s.device_slots = static_cast<unsigned>(slots_.size());
    s.slot_bytes = slot_bytes_;
    s.host_memory = host_memory_;
    s.batches = batches_;
    s.bytes_copied = bytes_copied_;
    s.host_released = host_released_;
    s.source_wait_s = source_wait_s_;
    s.slot_wait_s = slot_wait_s_;
    s.copy_busy_s = copy_busy_s_;
    s.device_wait_s = device_wait_s_;
    s.wall_s = started_at_ == Clock::time_point{} ? 0 : std::chrono::duration<double>(Clock::now() - started_at_).count();
    s.consumer_wait_s = consumer_wait_s_;
    return s;
  }

 private:
  struct Slot {
    void* mem = nullptr;
    std::unique_ptr<Event> copy_ev, ready_ev, release_ev;
    // Guarded by mu_: copies issued into it, and when the latest handed-out one went.
    uint64_t copies = 0, handed_copy = 0;
    Clock::time_point handed_out{};
  };
  struct Item {
    enum Kind { kBatch, kEnd, kError } kind = kEnd;
    size_t slot = 0;  // kBatch
    DeviceBatch batch;
    std::exception_ptr error;
  };
  struct InFlight {
    size_t slot = 0;
    Batch host;
    Clock::time_point issued;
    uint64_t copy_no = 0;  // the slot's copy count when issued
  };

  void start_locked() {
    stop_ = false;
    copy_done_ = false;
    started_ = true;
    if (started_at_ == Clock::time_point{}) started_at_ = Clock::now();  // the figures add up across epochs
    copy_thread_ = std::thread([this] { copy_loop(); });
    release_thread_ = std::thread([this] { release_loop(); });
  }

  void stop_threads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) return;
      stop_ = true;
    }
    cv_.notify_all();
    if (copy_thread_.joinable()) copy_thread_.join();
    if (release_thread_.joinable()) release_thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    started_ = false;
  }

  void drop_ready() {
    std::deque<Item> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped.swap(ready_);
    }
    dropped.clear();  // leases give their slots back (taking mu_)
  }

  void deliver(Item it) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(it));
    }
    cv_.notify_all();
  }

  void copy_loop() {
    pin_and_name_this_thread({}, "stoker-h2d");
    std::exception_ptr bind_error;
    try {
      backend_->bind_thread();
    } catch (...) {
      bind_error = std::current_exception();
    }
    if (bind_error) {
      Item it;
      it.kind = Item::kError;
      it.error = std::move(bind_error);
      deliver(std::move(it));
      finish_copy_loop();
      return;
    }
    for (;;) {
      size_t slot = 0;
      {
        const auto t0 = Clock::now();
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
        slot_wait_s_ += seconds_since(t0);
        if (stop_) break;
        slot = free_.front();
        free_.pop_front();
      }
      // Take a host batch only once the slot's last reader is done (the release event),
      // so the copy starts right away and the loader's slot is held for the copy alone:
      // queuing the copy behind the event instead would hold host slots for whole kernel
      // times and starve (or grow) the loader's ring.
      {
        const auto t0 = Clock::now();
        std::exception_ptr err;
        try {
          backend_->sync(*slots_[slot].release_ev);
        } catch (...) {
          err = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          slot_wait_s_ += seconds_since(t0);
        }
        if (err) {
          give_back(slot);
          Item it;
          it.kind = Item::kError;
          it.error = std::move(err);
          deliver(std::move(it));
          break;
        }
      }
      std::optional<Batch> hb;
      std::exception_ptr err;
      const auto t0 = Clock::now();
      try {
        hb = source_.next();
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        source_wait_s_ += seconds_since(t0);
      }
      if (err || !hb) {
        give_back(slot);
        Item it;
        it.kind = err ? Item::kError : Item::kEnd;
        // Moved, not copied: the consumer must hold the only reference, or the exception
        // object could be freed on this thread while it is being read on the other.
        it.error = std::move(err);
        deliver(std::move(it));
        break;
      }
      if (!stage(slot, std::move(*hb))) break;
    }
    finish_copy_loop();
  }

  void finish_copy_loop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      copy_done_ = true;
    }
    cv_.notify_all();
  }

  // Copies `hb` into `slot` and queues the device batch; false (after delivering the
  // error) when that failed.
  bool stage(size_t slot, Batch hb) {
    bool issued = false, owned = false;
    std::exception_ptr err;
    try {
      if (plan_.empty()) make_plan(hb);
      check(hb);
      Slot& s = slots_[slot];
      size_t bytes = 0;
      issued = true;
      backend_->copy_wait(*s.release_ev);
      for (size_t i = 0; i < plan_.size(); ++i) {
        const TensorView& t = hb.tensors()[i];
        if (plan_[i].host) continue;
        backend_->copy_async(static_cast<uint8_t*>(s.mem) + plan_[i].offset, t.data, t.bytes());
        bytes += t.bytes();
      }
      if (opt_.copy_limit_bytes_per_s > 0) backend_->copy_pause(static_cast<double>(bytes) / opt_.copy_limit_bytes_per_s);
      backend_->copy_record(*s.copy_ev);
      const auto issued = Clock::now();
      DeviceBatch db = make_batch(slot, hb);  // owns the slot from here on
      owned = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++batches_;
        bytes_copied_ += bytes;
        const uint64_t copy_no = ++s.copies;
        inflight_.push_back(InFlight{slot, std::move(hb), issued, copy_no});
        Item it;
        it.kind = Item::kBatch;
        it.slot = slot;
        it.batch = std::move(db);
        ready_.push_back(std::move(it));
      }
      cv_.notify_all();
      return true;
    } catch (...) {
      err = std::current_exception();
    }
    // Delivered after the handler ended, so the consumer holds the last reference to the
    // exception object (libstdc++'s refcount is invisible to TSan).
    if (issued) {
      // Copies already queued may still read the host batch: let them land first.
      try {
        backend_->copy_record(*slots_[slot].copy_ev);
        backend_->sync(*slots_[slot].copy_ev);
      } catch (...) {
      }
    }
    hb = Batch();
    if (!owned) give_back(slot);
    Item it;
    it.kind = Item::kError;
    it.error = std::move(err);
    deliver(std::move(it));
    return false;
  }

  void make_plan(const Batch& hb) {
    uint64_t samples = opt_.max_batch_samples ? opt_.max_batch_samples : default_samples_;
    if (!samples) {
      for (const TensorView& t : hb.tensors())
        if (!t.shape.empty()) samples = std::max<uint64_t>(samples, static_cast<uint64_t>(t.shape[0]));
      if (!samples) samples = 1;
    }
    std::vector<TensorPlan> plan;
    size_t off = 0;
    for (const TensorView& t : hb.tensors()) {
      TensorPlan p;
      p.name = t.name;
      p.dtype = t.dtype;
      p.rank = t.shape.size();
      if (t.kind != TensorKind::kDense) {
        p.host = true;
        if (!t.shape.empty()) p.sample_shape.assign(t.shape.begin() + 1, t.shape.end());
        plan.push_back(std::move(p));
        continue;
      }
      size_t per = elem_size(t.dtype);
      if (!t.shape.empty()) {
        p.sample_shape.assign(t.shape.begin() + 1, t.shape.end());
        for (int64_t d : p.sample_shape) per *= static_cast<size_t>(d);
        p.sample_bytes = per;
        p.capacity = per * samples;
      } else {
        p.sample_bytes = p.capacity = elem_size(t.dtype);
      }
      p.offset = off;
      off += align_up(p.capacity);
      if (opt_.image_dtype != ElemType::kUint8 && t.name == "image") {
        if (t.dtype != ElemType::kUint8 || t.shape.size() != 4 || t.shape[3] != 3)
          throw_error(ErrorCode::kInvalidArgument,
                      std::string("stager: image conversion needs uint8 {N, H, W, 3} images (the loader's "
                                  "PixelFormat::kU8HWC); got ") +
                          elem_type_name(t.dtype) + " of rank " + std::to_string(t.shape.size()));
        p.conv = TensorPlan::Conv::kImage;
        p.out_dtype = opt_.image_dtype;
      } else if (opt_.widen_tokens && (t.name == "tokens" || t.name == "targets") && t.dtype != ElemType::kInt64) {
        if (t.dtype != ElemType::kUint16 && t.dtype != ElemType::kUint32 && t.dtype != ElemType::kInt32)
          throw_error(ErrorCode::kInvalidArgument,
                      std::string("stager: cannot widen ") + elem_type_name(t.dtype) + " '" + t.name + "'");
        p.conv = TensorPlan::Conv::kWiden;
        p.out_dtype = ElemType::kInt64;
      }
      if (p.conv != TensorPlan::Conv::kNone) {
        p.out_offset = off;
        p.out_capacity = p.capacity / elem_size(p.dtype) * elem_size(p.out_dtype);
        off += align_up(p.out_capacity);
      }
      plan.push_back(std::move(p));
    }
    const size_t bytes = std::max<size_t>(off, kAlign);
    // Allocated once: the addresses stay the same for every epoch.
    for (Slot& s : slots_) s.mem = backend_->alloc_slot(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    plan_ = std::move(plan);
    samples_ = samples;
    slot_bytes_ = bytes;
  }

  void check(const Batch& hb) const {
    auto where = [&] {
      return "stager: batch (epoch " + std::to_string(hb.epoch()) + ", step " + std::to_string(hb.step()) + ")";
    };
    if (hb.tensors().size() != plan_.size())
      throw_error(ErrorCode::kInvalidArgument, where() + " has " + std::to_string(hb.tensors().size()) +
                                                   " tensors, the first batch had " + std::to_string(plan_.size()));
    for (size_t i = 0; i < plan_.size(); ++i) {
      const TensorView& t = hb.tensors()[i];
      const TensorPlan& p = plan_[i];
      if (t.device != -1)
        throw_error(ErrorCode::kInvalidArgument, where() + ": tensor '" + t.name + "' is not in host memory");
      if (t.name != p.name || t.dtype != p.dtype || t.shape.size() != p.rank ||
          (p.rank && !std::equal(t.shape.begin() + 1, t.shape.end(), p.sample_shape.begin())))
        throw_error(ErrorCode::kInvalidArgument,
                    where() + ": tensor '" + t.name + "' differs in name, type or sample shape from the first batch's '" +
                        p.name + "'");
      if (p.host) continue;
      if (t.bytes() > p.capacity)
        throw_error(ErrorCode::kInvalidArgument,
                    where() + ": tensor '" + t.name + "' has " + std::to_string(t.shape.empty() ? 1 : t.shape[0]) +
                        " samples; device slots hold " + std::to_string(samples_) +
                        " (StagerOptions::max_batch_samples)");
      if (t.bytes() && !t.data)
        throw_error(ErrorCode::kInvalidArgument, where() + ": tensor '" + t.name + "' has no data");
    }
  }

  DeviceBatch make_batch(size_t slot, const Batch& hb);

  void release_loop() {
    pin_and_name_this_thread({}, "stoker-h2d-rel");
    try {
      backend_->bind_thread();
    } catch (...) {
    }
    // Copies land in issue order (one stream): each kept the stream busy from its issue,
    // or from the previous landing when it queued behind that one, to its own landing.
    Clock::time_point last_landed{};
    for (;;) {
      InFlight f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !inflight_.empty() || copy_done_; });
        if (inflight_.empty()) return;
        f = std::move(inflight_.front());
        inflight_.pop_front();
      }
      std::exception_ptr err;
      try {
        backend_->sync(*slots_[f.slot].copy_ev);
      } catch (...) {
        err = std::current_exception();
      }
      const auto landed = Clock::now();
      f.host = Batch();  // the host slot goes back to the loader
      const bool failed = err != nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        copy_busy_s_ += std::chrono::duration<double>(landed - std::max(f.issued, last_landed)).count();
        last_landed = landed;
        // Handed out before it landed: the consumer's stream waited for the rest.
        const Slot& sl = slots_[f.slot];
        if (sl.handed_copy == f.copy_no && sl.handed_out < landed)
          device_wait_s_ += std::chrono::duration<double>(landed - sl.handed_out).count();
        ++host_released_;
        if (err && !async_error_) async_error_ = std::move(err);
        err = nullptr;
      }
      if (failed) cv_.notify_all();
    }
  }

  std::unique_ptr<CopyBackend> backend_;
  StageSource source_;
  const StagerOptions opt_;
  const uint64_t default_samples_;
  const std::string host_memory_;

  std::vector<Slot> slots_;          // fixed size; mem set once by make_plan
  std::vector<TensorPlan> plan_;     // written once by stoker-h2d before any batch exists
  uint64_t samples_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // slot freed, item ready, in-flight copy, stop
  std::deque<size_t> free_;
  std::deque<Item> ready_;
  std::deque<InFlight> inflight_;
  std::exception_ptr async_error_;
  bool started_ = false, stop_ = false, copy_done_ = false, run_over_ = false, shut_ = false;
  std::thread copy_thread_, release_thread_;

  size_t slot_bytes_ = 0;
  uint64_t batches_ = 0, bytes_copied_ = 0, host_released_ = 0;
  double source_wait_s_ = 0, slot_wait_s_ = 0, consumer_wait_s_ = 0, copy_busy_s_ = 0, device_wait_s_ = 0;
  Clock::time_point started_at_{};
};

/// A handed-out device slot. Its destruction puts the slot back on the free list.
class DeviceSlotLease {
 public:
  DeviceSlotLease(std::shared_ptr<StageCore> core, size_t slot, std::vector<ConvJob> jobs)
      : core_(std::move(core)), slot_(slot), jobs_(std::move(jobs)) {}
  ~DeviceSlotLease() { core_->give_back(slot_); }
  DeviceSlotLease(const DeviceSlotLease&) = delete;
  DeviceSlotLease& operator=(const DeviceSlotLease&) = delete;

  void wait(void* stream, bool first) { core_->wait_slot(slot_, jobs_, stream, first); }
  void release(void* stream) { core_->release_slot(slot_, stream); }

 private:
  std::shared_ptr<StageCore> core_;
  size_t slot_;
  std::vector<ConvJob> jobs_;
};

DeviceBatch StageCore::make_batch(size_t slot, const Batch& hb) {
  uint8_t* mem = static_cast<uint8_t*>(slots_[slot].mem);
  const int dev = backend_->device();
  std::vector<TensorView> views;
  std::vector<ConvJob> jobs;
  std::vector<std::shared_ptr<std::vector<uint8_t>>> host_copies;
  for (size_t i = 0; i < plan_.size(); ++i) {
    const TensorView& t = hb.tensors()[i];
    const TensorPlan& p = plan_[i];
    TensorView v;
    v.name = t.name;
    if (p.host) {
      // A copy the device batch owns: the host batch goes back to its ring once the
      // copies have landed, before the device batch is used.
      const uint64_t n = hb.size();
      auto keep = std::make_shared<std::vector<uint8_t>>(t.bytes() + (n + 1) * sizeof(int64_t));
      auto* offsets = reinterpret_cast<int64_t*>(keep->data());
      std::memcpy(offsets, t.offsets, (n + 1) * sizeof(int64_t));
      if (t.bytes()) std::memcpy(keep->data() + (n + 1) * sizeof(int64_t), t.data, t.bytes());
      v = t;
      v.offsets = offsets;
      v.data = keep->data() + (n + 1) * sizeof(int64_t);
      host_copies.push_back(std::move(keep));
      views.push_back(std::move(v));
      continue;
    }
    v.device = dev;
    v.shape = t.shape;
    v.dtype = t.dtype;
    v.data = mem + p.offset;
    if (p.conv == TensorPlan::Conv::kImage) {
      ConvJob j;
      j.kind = p.conv;
      j.src = mem + p.offset;
      j.dst = mem + p.out_offset;
      j.dst_type = p.out_dtype;
      j.n = t.shape[0];
      j.h = t.shape[1];
      j.w = t.shape[2];
      jobs.push_back(j);
      v.data = j.dst;
      v.dtype = p.out_dtype;
      v.shape = {t.shape[0], 3, t.shape[1], t.shape[2]};
    } else if (p.conv == TensorPlan::Conv::kWiden) {
      ConvJob j;
      j.kind = p.conv;
      j.src = mem + p.offset;
      j.dst = mem + p.out_offset;
      j.src_type = t.dtype;
      j.dst_type = ElemType::kInt64;
      j.count = t.numel();
      jobs.push_back(j);
      v.data = j.dst;
      v.dtype = ElemType::kInt64;
    }
    views.push_back(std::move(v));
  }
  DeviceBatch b;
  b.tensors_ = std::move(views);
  b.host_copies_ = std::move(host_copies);
  b.lease_ = std::make_shared<DeviceSlotLease>(shared_from_this(), slot, std::move(jobs));
  b.epoch_ = hb.epoch();
  b.step_ = hb.step();
  b.size_ = hb.size();
  b.device_ = dev;
  b.state_ = DeviceBatch::State::kReady;
  return b;
}

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
  loader_ = std::make_unique<Loader>(std::move(lo));
  Loader* l = loader_.get();
  run_start_ = l->state();  // no thread runs yet
  // set_epoch runs on the consumer's thread with stoker-h2d stopped: the one moment the
  // Loader may be repositioned, so a pending load_state() is applied there.
  StageSource src{[l] { return l->next(); },
                  [this, l](uint64_t e) {
                    if (pending_load_) l->load_state(*std::exchange(pending_load_, std::nullopt));
                    else l->set_epoch(e);
                  }};
  core_ = std::make_shared<internal::StageCore>(internal::make_backend(b, dev), std::move(src), o, samples, host_memory);
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

std::optional<DeviceBatch> Stager::next() {
  std::optional<DeviceBatch> b = core_->next();
  if (b) ++delivered_;
  return b;
}

void Stager::set_epoch(uint64_t e) {
  core_->set_epoch(e);
  run_start_.epoch = e;
  run_start_.consumed = 0;
  delivered_ = 0;
}

OrderState Stager::state() const {
  if (!loader_) throw_error(ErrorCode::kInvalidArgument, "Stager::state(): a raw source keeps its own position");
  const LoaderOptions& o = loader_->options();
  OrderState s = run_start_;
  s.consumed = RankSchedule(s.total, o.batch_size, static_cast<uint32_t>(loader_->world_size()),
                            static_cast<uint32_t>(loader_->rank()), o.drop_last, s.consumed)
                   .consumed_after(delivered_);
  return s;
}

void Stager::load_state(const OrderState& s) {
  if (!loader_) throw_error(ErrorCode::kInvalidArgument, "Stager::load_state(): a raw source keeps its own position");
  s.check_matches(run_start_.options(), run_start_.total);  // before anything is dropped
  pending_load_ = s;
  try {
    core_->set_epoch(s.epoch);  // applies pending_load_ with stoker-h2d stopped
  } catch (...) {
    pending_load_.reset();
    throw;
  }
  run_start_ = s;
  delivered_ = 0;
}
Loader* Stager::loader() noexcept { return loader_.get(); }
StageBackend Stager::backend() const noexcept { return core_->backend().kind(); }
int Stager::device() const noexcept { return core_->backend().device(); }
StagerStats Stager::stats() const { return core_->stats(); }

namespace internal {

Json to_json_value(const StagerStats& s) {
  return Json{{"backend", s.backend},
              {"device", s.device},
              {"device_slots", s.device_slots},
              {"slot_bytes", s.slot_bytes},
              {"host_memory", s.host_memory},
              {"batches", s.batches},
              {"bytes_copied", s.bytes_copied},
              {"host_released", s.host_released},
              {"source_wait_s", figure(s.source_wait_s)},
              {"slot_wait_s", figure(s.slot_wait_s)},
              {"copy_busy_s", figure(s.copy_busy_s)},
              {"device_wait_s", figure(s.device_wait_s)},
              {"wall_s", figure(s.wall_s)},
              {"consumer_wait_s", figure(s.consumer_wait_s)}};
}

}  // namespace internal

std::string StagerStats::to_json() const { return internal::json_text(internal::to_json_value(*this)); }

}  // namespace stoker
