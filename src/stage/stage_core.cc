// The staging state machine (stage_core.h): the ring, its two threads, and the device
// batches it hands out.
#include "stage/stage_core.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "stoker/cpu.h"
#include "stoker/error.h"

namespace stoker::internal {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

StageCore::StageCore(std::unique_ptr<CopyBackend> backend, StageSource source, StagerOptions opt,
                     uint64_t default_samples, std::string host_memory, std::vector<BucketSize> buckets,
                     uint64_t max_tokens)
    : backend_(std::move(backend)),
      source_(std::move(source)),
      opt_(opt),
      default_samples_(default_samples),
      host_memory_(std::move(host_memory)),
      buckets_(std::move(buckets)),
      max_tokens_(max_tokens) {
  slots_.resize(opt_.device_slots);
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].copy_ev = backend_->make_event();
    slots_[i].ready_ev = backend_->make_event();
    slots_[i].release_ev = backend_->make_event();
    free_.push_back(i);
  }
}

StageCore::~StageCore() {
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

// --- the consumer's side -------------------------------------------------------------

std::optional<DeviceBatch> StageCore::next() {
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

void StageCore::set_epoch(uint64_t e) {
  stop_threads();
  drop_ready();
  if (source_.set_epoch) source_.set_epoch(e);
  std::lock_guard<std::mutex> lock(mu_);
  run_over_ = false;
  async_error_ = nullptr;
}

void StageCore::shutdown() {
  stop_threads();
  drop_ready();
  std::lock_guard<std::mutex> lock(mu_);
  shut_ = true;
}

StagerStats StageCore::stats() const {
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

// --- a lease's side ------------------------------------------------------------------

void StageCore::give_back(size_t slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }
  cv_.notify_all();
}

void StageCore::wait_slot(size_t slot, const std::vector<ConvJob>& jobs, void* stream, bool first) {
  Slot& s = slots_[slot];
  if (!first) {
    backend_->stream_wait(stream, jobs.empty() ? *s.copy_ev : *s.ready_ev);
    return;
  }
  backend_->stream_wait(stream, *s.copy_ev);
  if (jobs.empty()) return;
  for (const ConvJob& j : jobs) {
    if (j.kind == ConvJob::Kind::kImage)
      backend_->convert_image(static_cast<const uint8_t*>(j.src), j.n, j.h, j.w, j.dst_type, opt_.mean, opt_.std,
                              j.dst, stream);
    else
      backend_->widen_tokens(j.src, j.src_type, j.count, static_cast<int64_t*>(j.dst), stream);
  }
  backend_->stream_record(stream, *s.ready_ev);
}

void StageCore::release_slot(size_t slot, void* stream) { backend_->stream_record(stream, *slots_[slot].release_ev); }

// --- the threads ---------------------------------------------------------------------

void StageCore::start_locked() {
  stop_ = false;
  copy_done_ = false;
  started_ = true;
  if (started_at_ == Clock::time_point{}) started_at_ = Clock::now();  // the figures add up across epochs
  copy_thread_ = std::thread([this] { copy_loop(); });
  release_thread_ = std::thread([this] { release_loop(); });
}

void StageCore::stop_threads() {
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

void StageCore::drop_ready() {
  std::deque<Item> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(ready_);
  }
  dropped.clear();  // leases give their slots back (taking mu_)
}

void StageCore::deliver(Item it) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(it));
  }
  cv_.notify_all();
}

void StageCore::deliver_error(std::exception_ptr err) {
  Item it;
  it.kind = Item::kError;
  // Moved, not copied: the consumer must hold the only reference, or the exception
  // object could be freed on this thread while it is being read on the other.
  it.error = std::move(err);
  deliver(std::move(it));
}

template <class F>
std::exception_ptr StageCore::timed(double& waited, F&& f) {
  const auto t0 = Clock::now();
  std::exception_ptr err;
  try {
    f();
  } catch (...) {
    err = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  waited += seconds_since(t0);
  return err;
}

void StageCore::copy_loop() {
  pin_and_name_this_thread({}, "stoker-h2d");
  std::exception_ptr bind_error;
  try {
    backend_->bind_thread();
  } catch (...) {
    bind_error = std::current_exception();
  }
  if (bind_error) {
    deliver_error(std::move(bind_error));
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
    if (std::exception_ptr err = timed(slot_wait_s_, [&] { backend_->sync(*slots_[slot].release_ev); })) {
      give_back(slot);
      deliver_error(std::move(err));
      break;
    }
    std::optional<Batch> hb;
    if (std::exception_ptr err = timed(source_wait_s_, [&] { hb = source_.next(); })) {
      give_back(slot);
      deliver_error(std::move(err));
      break;
    }
    if (!hb) {
      give_back(slot);
      deliver(Item{});  // the end of the run
      break;
    }
    if (!stage(slot, std::move(*hb))) break;
  }
  finish_copy_loop();
}

void StageCore::finish_copy_loop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    copy_done_ = true;
  }
  cv_.notify_all();
}

// Copies `hb` into `slot` and queues the device batch; false (after delivering the
// error) when that failed.
bool StageCore::stage(size_t slot, Batch hb) {
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
    const auto issued_at = Clock::now();
    DeviceBatch db = make_batch(slot, hb);  // owns the slot from here on
    owned = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++batches_;
      bytes_copied_ += bytes;
      const uint64_t copy_no = ++s.copies;
      inflight_.push_back(InFlight{slot, std::move(hb), issued_at, copy_no});
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
  deliver_error(std::move(err));
  return false;
}

void StageCore::make_plan(const Batch& hb) {
  uint64_t samples = opt_.max_batch_samples ? opt_.max_batch_samples : default_samples_;
  if (!samples) {
    for (const TensorView& t : hb.tensors())
      if (!t.shape.empty()) samples = std::max<uint64_t>(samples, static_cast<uint64_t>(t.shape[0]));
    if (!samples) samples = 1;
  }
  // A bucketed batch: the first batch's bucket, and the most pixels any bucket has.
  const TensorView* bucket = hb.find("bucket");
  BucketSize first{};
  int64_t most = 0;
  if (!buckets_.empty() && bucket && bucket->numel() > 0) {
    first = buckets_.at(static_cast<size_t>(*static_cast<const int64_t*>(bucket->data)));
    for (const BucketSize& b : buckets_) most = std::max<int64_t>(most, int64_t{b.height} * b.width);
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
      // Bucket-shaped: an image [H, W, C] or [C, H, W], a clip [T, H, W, 3] or [clips, T, H, W, 3].
      const auto& ss = p.sample_shape;
      bool bucket_shaped = false;
      for (size_t d = 0; most && ss.size() >= 3 && d + 1 < ss.size(); ++d)
        bucket_shaped = bucket_shaped || (ss[d] == first.height && ss[d + 1] == first.width);
      if (bucket_shaped) {
        p.varying = true;
        per = per / (static_cast<size_t>(first.height) * first.width) * static_cast<size_t>(most);
      }
      p.sample_bytes = per;
      p.capacity = per * samples;
      if (max_tokens_) {
        p.varying = true;
        p.capacity = elem_size(t.dtype) * max_tokens_;
      }
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
      p.conv = ConvJob::Kind::kImage;
      p.out_dtype = opt_.image_dtype;
    } else if (opt_.widen_tokens && (t.name == "tokens" || t.name == "targets") && t.dtype != ElemType::kInt64) {
      if (t.dtype != ElemType::kUint16 && t.dtype != ElemType::kUint32 && t.dtype != ElemType::kInt32)
        throw_error(ErrorCode::kInvalidArgument,
                    std::string("stager: cannot widen ") + elem_type_name(t.dtype) + " '" + t.name + "'");
      p.conv = ConvJob::Kind::kWiden;
      p.out_dtype = ElemType::kInt64;
    }
    if (p.conv != ConvJob::Kind::kNone) {
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

void StageCore::check(const Batch& hb) const {
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
        (p.rank && !p.varying && !std::equal(t.shape.begin() + 1, t.shape.end(), p.sample_shape.begin())))
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
    if (p.conv == ConvJob::Kind::kImage) {
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
    } else if (p.conv == ConvJob::Kind::kWiden) {
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

void StageCore::release_loop() {
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

}  // namespace stoker::internal
