// The Loader as Python sees it: _stoker.Loader wraps stoker::Loader and hands batches
// out as dicts of zero-copy tensors.
//
// Waiting. stoker::Loader::next() blocks with no timeout, which would leave Ctrl-C
// unanswered until the batch is ready. A batch that is ready already is taken on the
// Python thread (Loader::try_next, no waiting); for one still to come, each Python
// Loader owns one worker thread ("stoker-py") that calls next() on request and parks the
// result in a one-element mailbox; the binding waits on the mailbox in 50 ms chunks with
// the GIL released and runs PyErr_CheckSignals (GIL held) between chunks. The worker
// only ever fetches the batch Python asked for (no read-ahead of its own), so the slots
// Python holds plus the loader's ring are all the memory there is, and state() stays
// exact. A request interrupted by KeyboardInterrupt stays pending: the next next()
// returns its batch, so nothing is skipped. close() (or the last reference going) gives
// a running request one second; past that the worker finishes it on its own and
// destroys the loader, so Ctrl-C never waits for a slow batch.
//
// Lifetime. Every exported tensor (DLPack capsule or numpy base) owns a copy of the
// batch's SlotLease; the slot is reused only when the last tensor is freed, on any
// thread, after the Loader too. When the caller holds every slot, the C++ loader grows
// its ring; we see that in stats().slots and raise one stoker.HeldBatchesWarning.
//
// Devices. With stage "cuda" (device="cuda:N") the worker drives a Stager (stage.h) over
// our own Loader instead: pinned host slots, copies on the Stager's stream into a device
// ring; each batch is waited on torch's current stream (events, no host sync) and its
// tensors own the DeviceBatch, whose destructor records the slot's release on that
// stream. The Stager runs ahead of Python, so state() is derived from the run's start
// and the batches Python received. Stage "host" runs the same machinery on the CPU
// (tests).
//
// Threading: a Python Loader is driven by one Python thread at a time (like the C++
// Loader); the GIL serialises its methods. stats() is safe at any time.
#include <pthread.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "bindings.h"
#include "dlpack.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/loader.h"
#include "stoker/order.h"
#include "stoker/stage.h"
#include "stoker/shard.h"

namespace stoker::python {
namespace {

// ---- options ----------------------------------------------------------------------

struct PyLoaderOptions {
  LoaderOptions o;
  double io_limit_bytes_per_s = 0;  // > 0: throttle reads (tests, --io-limit-mbps)
  // Staging (stage.h): "none" (host tensors straight from the loader's slots), "cuda"
  // (device tensors from a Stager's device ring) or "host" (the Stager's host backend:
  // the same ring/event machinery with memcpy; for tests on machines without a GPU).
  std::string stage = "none";
  int device = -1;            // CUDA ordinal for "cuda"; -1: LOCAL_RANK, else 0
  unsigned device_slots = 3;  // the Stager's ring
};

const std::pair<const char*, PixelFormat> kPixelFormats[] = {
    {"u8_hwc", PixelFormat::kU8HWC},   {"u8_chw", PixelFormat::kU8CHW},   {"f32_chw", PixelFormat::kF32CHW},
    {"f16_chw", PixelFormat::kF16CHW}, {"f32_hwc", PixelFormat::kF32HWC}, {"f16_hwc", PixelFormat::kF16HWC},
};

const std::pair<const char*, ElemType> kTokenTypes[] = {
    {"uint16", ElemType::kUint16}, {"uint32", ElemType::kUint32}, {"int32", ElemType::kInt32}, {"int64", ElemType::kInt64}};

template <class T, size_t N>
T from_name(const std::pair<const char*, T> (&table)[N], const std::string& s, const char* what) {
  std::string names;
  for (auto& [n, v] : table) {
    if (s == n) return v;
    names += names.empty() ? "" : ", ";
    names += n;
  }
  throw_error(ErrorCode::kInvalidArgument, std::string(what) + " '" + s + "' is not one of " + names);
}
template <class T, size_t N>
std::string to_name(const std::pair<const char*, T> (&table)[N], T v) {
  for (auto& [n, x] : table)
    if (x == v) return n;
  return "?";
}

// ---- DLPack / numpy export ---------------------------------------------------------

struct ManagedCtx {
  DLManagedTensor managed{};
  std::shared_ptr<void> lease;  // a SlotLease, or a staged DeviceBatch
  std::vector<int64_t> shape, strides;
};

void dl_deleter(DLManagedTensor* self) { delete static_cast<ManagedCtx*>(self->manager_ctx); }

void dl_capsule_destructor(PyObject* cap) {
  // Consumed capsules were renamed "used_dltensor": the consumer owns (and deletes) it.
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m && m->deleter) m->deleter(m);
  PyErr_Restore(t, v, tb);
}

DLDataType dl_type(ElemType t) {
  switch (t) {
    case ElemType::kUint8: return {kDLUInt, 8, 1};
    case ElemType::kUint16: return {kDLUInt, 16, 1};
    case ElemType::kUint32: return {kDLUInt, 32, 1};
    case ElemType::kInt32: return {kDLInt, 32, 1};
    case ElemType::kInt64: return {kDLInt, 64, 1};
    case ElemType::kFloat16: return {kDLFloat, 16, 1};
    case ElemType::kBFloat16: return {kDLBfloat, 16, 1};
    case ElemType::kFloat32: return {kDLFloat, 32, 1};
    case ElemType::kInt8: return {kDLInt, 8, 1};
    case ElemType::kInt16: return {kDLInt, 16, 1};
    case ElemType::kFloat64: return {kDLFloat, 64, 1};
    case ElemType::kBool: return {kDLBool, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

// A "dltensor" capsule viewing `v`, owning a copy of `lease`.
py::capsule to_dlpack(const TensorView& v, std::shared_ptr<void> lease) {
  auto* ctx = new ManagedCtx;
  ctx->lease = std::move(lease);
  ctx->shape = v.shape;
  ctx->strides = row_major_strides(v.shape);
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = v.data;
  t.device = v.device < 0 ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, v.device};
  t.ndim = static_cast<int32_t>(v.shape.size());
  t.dtype = dl_type(v.dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = dl_deleter;
  PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", dl_capsule_destructor);
  if (!cap) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

py::dtype numpy_dtype(ElemType t) {
  switch (t) {
    case ElemType::kUint8: return py::dtype("uint8");
    case ElemType::kUint16: return py::dtype("uint16");
    case ElemType::kUint32: return py::dtype("uint32");
    case ElemType::kInt32: return py::dtype("int32");
    case ElemType::kInt64: return py::dtype("int64");
    case ElemType::kFloat16: return py::dtype("float16");
    case ElemType::kFloat32: return py::dtype("float32");
    case ElemType::kInt8: return py::dtype("int8");
    case ElemType::kInt16: return py::dtype("int16");
    case ElemType::kFloat64: return py::dtype("float64");
    case ElemType::kBool: return py::dtype("bool");
    case ElemType::kBFloat16: break;
  }
  throw_error(ErrorCode::kInvalidArgument,
              std::string("numpy has no ") + elem_type_name(t) + " type; use torch output for this format");
}

py::array to_numpy(const TensorView& v, const std::shared_ptr<SlotLease>& lease) {
  if (v.device >= 0) throw_error(ErrorCode::kInvalidArgument, "numpy output needs host tensors (device='cpu')");
  py::dtype dt = numpy_dtype(v.dtype);
  std::vector<py::ssize_t> shape(v.shape.begin(), v.shape.end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : row_major_strides(v.shape)) strides.push_back(static_cast<py::ssize_t>(s * elem_size(v.dtype)));
  py::capsule base(new std::shared_ptr<SlotLease>(lease),
                   [](void* p) { delete static_cast<std::shared_ptr<SlotLease>*>(p); });
  return py::array(dt, shape, strides, v.data, base);
}

// ---- the handle ------------------------------------------------------------------

// What the Python thread and the "stoker-py" worker share. Owned jointly, so that a
// worker still inside Loader::next() at close() can finish on its own and destroy the
// loader itself (close() then returns without waiting for a slow batch).
struct Worker {
  std::unique_ptr<Loader> loader;
  std::unique_ptr<Stager> stager;  // staged mode; drives `loader` from its stoker-h2d thread
  unsigned configured_slots = 0;
  std::optional<OrderState> pending_load;  // staged mode: applied by the source's set_epoch

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool requested = false;  // Python asked for a batch and has not collected it
  bool done = false;       // the worker finished that request
  std::optional<Batch> batch;
  std::optional<DeviceBatch> dbatch;  // staged mode's result
  std::exception_ptr error;
  OrderState state_before;  // loader state when the pending request was made
  bool grew = false;        // the ring grew past its configured size

  // The worker thread's body.
  static void run(std::shared_ptr<Worker> w) {
    pthread_setname_np(pthread_self(), "stoker-py");
    bool grew_seen = false;
    std::unique_lock<std::mutex> lock(w->mu);
    for (;;) {
      w->cv.wait(lock, [&] { return w->stop || (w->requested && !w->done); });
      if (w->stop) break;
      lock.unlock();
      std::optional<Batch> b;
      std::optional<DeviceBatch> d;
      std::exception_ptr e;
      bool grew = false;
      try {
        if (w->stager) {
          d = w->stager->next();
        } else {
          b = w->loader->next();
          if (b && !grew_seen) grew = grew_seen = w->loader->stats().slots > w->configured_slots;
        }
      } catch (...) {
        e = std::current_exception();
      }
      lock.lock();
      if (grew) w->grew = true;
      w->batch = std::move(b);
      w->dbatch = std::move(d);
      w->error = e;
      w->done = true;
      w->cv.notify_all();
    }
    // Stopped: drop what is left here, off the Python thread; the stager (which calls
    // the loader) before the loader.
    std::optional<Batch> b = std::move(w->batch);
    w->batch.reset();
    std::optional<DeviceBatch> d = std::move(w->dbatch);
    w->dbatch.reset();
    std::unique_ptr<Stager> st = std::move(w->stager);
    std::unique_ptr<Loader> l = std::move(w->loader);
    lock.unlock();
    b.reset();
    d.reset();
    st.reset();
    l.reset();  // joins the loader's threads
  }
};

class PyLoader {
 public:
  // converter: called with each tensor's DLPack capsule (torch.utils.dlpack.from_dlpack);
  // None: numpy arrays.
  // stream: staged mode, returns the consumer's stream as an int (cudaStream_t; torch's
  // current stream) that batches are ordered on; None: the host backend's "run now".
  PyLoader(const PyLoaderOptions& popt, py::object converter, py::object stream)
      : converter_(std::move(converter)), stream_fn_(std::move(stream)), w_(std::make_shared<Worker>()) {
    LoaderOptions opt = popt.o;
    staged_ = popt.stage != "none";
    StagerOptions so;
    if (staged_) {
      if (converter_.is_none())
        throw_error(ErrorCode::kInvalidArgument, "staged (device) batches are torch tensors: numpy output needs "
                                                 "device='cpu'");
      if (popt.stage == "cuda") so.backend = StageBackend::kCuda;
      else if (popt.stage == "host") so.backend = StageBackend::kHost;
      else throw_error(ErrorCode::kInvalidArgument, "stage '" + popt.stage + "' is not one of none, cuda, host");
      so.device = popt.device;
      so.device_slots = popt.device_slots;
      so.max_batch_samples = opt.batch_size;
      if (so.backend == StageBackend::kCuda && cuda_device_count() > 0) {
        const int dev = select_device(popt.device, cuda_device_count());
        if (!opt.slot_allocator) opt.slot_allocator = pinned_slot_allocator(dev);  // truly async copies
        if (!opt.gpu_pci_bus_id) opt.gpu_pci_bus_id = cuda_pci_bus_id(dev);
      }
      device_slots_ = popt.device_slots;
    }
    if (popt.io_limit_bytes_per_s > 0) {
      const double limit = popt.io_limit_bytes_per_s;
      auto inner_wrap = opt.wrap_io;
      opt.wrap_io = [limit, inner_wrap](std::unique_ptr<IoEngine> e) {
        if (inner_wrap) e = inner_wrap(std::move(e));
        return make_throttled_engine(std::move(e), limit);
      };
    }
    {
      py::gil_scoped_release nogil;
      w_->loader = std::make_unique<Loader>(std::move(opt));
      w_->configured_slots = w_->loader->options().slots;  // the count used when 0 asked for the default
      if (staged_) {
        // A raw source over our own Loader (not Stager's owned one), so that resuming
        // can load_state() it: the Stager calls set_epoch on this thread with its
        // stoker-h2d thread stopped, and a pending state is applied there instead.
        Worker* w = w_.get();  // owns the Stager, so outlives these functions
        StageSource src;
        src.next = [w] { return w->loader->next(); };
        src.set_epoch = [w](uint64_t e) {
          if (w->pending_load) {
            const OrderState s = *w->pending_load;
            w->pending_load.reset();
            w->loader->load_state(s);
          } else {
            w->loader->set_epoch(e);
          }
        };
        w_->stager = std::make_unique<Stager>(std::move(src), so);
      }
    }
    loader_ = w_->loader.get();
    run_start_ = loader_->state();  // nothing runs yet: safe
    num_batches_ = loader_->num_batches();
    worker_ = std::thread(&Worker::run, w_);
  }

  ~PyLoader() { shutdown(); }

  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;

  void close() { shutdown(); }

  py::object next() {
    check_open();
    Worker& w = *w_;
    if (!staged_) {
      // A batch that is ready is taken here: handing it through the worker would cost
      // two thread switches per batch, a real share of a small machine's CPU at token
      // batch rates. Only a batch still to wait for goes to the worker (Ctrl-C stays
      // answered), and none while an interrupted request is still pending there.
      bool idle;
      {
        std::lock_guard<std::mutex> lock(w.mu);
        idle = !w.requested;
      }
      if (idle) {
        bool would_wait = false;
        std::optional<Batch> b;
        {
          py::gil_scoped_release nogil;  // the first call of a run starts its threads
          b = loader_->try_next(&would_wait);
        }
        if (!would_wait) {
          if (!b) return py::none();
          py::dict out = export_batch(*b);
          b.reset();  // the tensors hold the lease now
          return out;
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(w.mu);
      if (!w.requested) {
        // The worker is idle: safe to read (staged: stoker-h2d owns it; see state()).
        if (!staged_) w.state_before = loader_->state();
        w.requested = true;
        w.done = false;
        w.cv.notify_all();
      }
    }
    wait_done();
    if (staged_) return next_staged();
    std::unique_lock<std::mutex> lock(w.mu);
    // A plain Batch, not an optional: GCC 12 warns (falsely) about a moved optional here.
    const bool have = w.batch.has_value();
    Batch batch;
    if (have) batch = std::move(*w.batch);
    w.batch.reset();
    std::exception_ptr error = std::exchange(w.error, nullptr);
    w.requested = w.done = false;
    const bool grew = w.grew;
    lock.unlock();
    if (error) std::rethrow_exception(error);  // stoker::Error -> stoker.*Error (errors.cc)
    if (!have) return py::none();
    py::dict out = export_batch(batch);
    batch = Batch();  // the tensors hold the lease now
    if (grew && !warned_) {
      warned_ = true;
      const std::string msg =
          "stoker: the caller holds all " + std::to_string(w.configured_slots) +
          " batch slots of this Loader (e.g. list(loader)); the ring grows so loading goes on, and memory now "
          "grows with the batches kept. Drop batches (or tensors) you no longer need to keep it bounded.";
      if (PyErr_WarnEx(held_batches_warning(), msg.c_str(), 2) != 0) throw py::error_already_set();
    }
    return out;
  }

  void set_epoch(uint64_t e) {
    check_open();
    drop_pending();
    if (staged_) {
      w_->stager->set_epoch(e);
      run_start_.epoch = e;
      run_start_.consumed = 0;
      delivered_ = 0;
      num_batches_ = schedule().num_batches();
      return;
    }
    loader_->set_epoch(e);
    num_batches_ = loader_->num_batches();
  }
  uint64_t epoch() const {
    check_open();
    return staged_ ? run_start_.epoch : loader_->epoch();
  }

  // Cached whenever the worker is idle (it is fixed for a run), so len(loader) never
  // waits for an interrupted request still running.
  uint64_t num_batches() const {
    check_open();
    return num_batches_;
  }
  uint64_t epoch_samples() const {
    check_open();
    return loader_->epoch_samples();
  }

  std::string state() {
    check_open();
    if (staged_) {
      // stoker-h2d runs ahead of Python, so the loader's own state counts batches staged,
      // not consumed: derive it from where the run started and what Python received.
      OrderState s = run_start_;
      s.consumed = schedule().consumed_after(delivered_);
      return s.serialize();
    }
    std::lock_guard<std::mutex> lock(w_->mu);
    // A request in flight (or done but not collected) has not been handed to Python:
    // the state is the one from before it.
    return w_->requested ? w_->state_before.serialize() : loader_->state().serialize();
  }

  void load_state(const std::string& text) {
    check_open();
    OrderState s = OrderState::parse(text);
    if (staged_) {
      s.check_matches(run_start_.options(), run_start_.total);
      drop_pending();
      w_->pending_load = s;
      w_->stager->set_epoch(s.epoch);  // applies pending_load on this thread
      run_start_ = s;
      delivered_ = 0;
      num_batches_ = schedule().num_batches();
      return;
    }
    drop_pending();
    loader_->load_state(s);
    num_batches_ = loader_->num_batches();
  }

  std::string stats_json() const {
    check_open();
    LoaderStats s = loader_->stats();
    if (staged_) {
      // Staged, the copy stream is a stage too and the trainer waits on the Stager.
      record_verdict(s, diagnose(FeedFigures::from(s, w_->stager->stats())));
    }
    return s.to_json();
  }
  std::string stage_stats_json() const {
    check_open();
    return staged_ ? w_->stager->stats().to_json() : std::string();
  }
  std::string stats_summary() const {
    check_open();
    return loader_->stats().summary();
  }
  std::vector<std::string> class_names() const {
    check_open();
    return loader_->class_names();
  }
  int rank() const {
    check_open();
    return loader_->rank();
  }
  int world_size() const {
    check_open();
    return loader_->world_size();
  }
  unsigned configured_slots() const { return w_->configured_slots; }
  bool closed() const { return loader_ == nullptr; }

 private:
  void check_open() const {
    if (!loader_) throw_error(ErrorCode::kInvalidArgument, "this Loader is closed");
  }

  // Waits (GIL released, 50 ms at a time, signals checked in between) until no
  // request is running on the worker.
  void wait_done() {
    for (;;) {
      bool idle;
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lock(w_->mu);
        idle = w_->cv.wait_for(lock, std::chrono::milliseconds(50),
                               [&] { return !w_->requested || w_->done; });
      }
      if (idle) return;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  // Waits for a pending request and throws its batch (or error) away.
  void drop_pending() {
    wait_done();
    std::lock_guard<std::mutex> lock(w_->mu);
    std::optional<Batch> b(std::move(w_->batch));  // dropped after the lock is released
    w_->batch.reset();
    std::optional<DeviceBatch> d(std::move(w_->dbatch));  // never waited: its slot is just freed
    w_->dbatch.reset();
    w_->error = nullptr;
    w_->requested = w_->done = false;
  }

  void shutdown() {
    if (!worker_.joinable()) return;
    loader_ = nullptr;
    auto stop = [&] {
      std::unique_lock<std::mutex> lock(w_->mu);
      // A request still running (e.g. after Ctrl-C) gets a moment to finish; past
      // that the worker is left to finish it and tear the loader down on its own, so
      // closing never waits for a slow batch.
      w_->cv.wait_for(lock, std::chrono::seconds(1), [&] { return !w_->requested || w_->done; });
      const bool busy = w_->requested && !w_->done;
      w_->stop = true;
      w_->cv.notify_all();
      lock.unlock();
      if (busy) worker_.detach();
      else worker_.join();
      w_.reset();
    };
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      stop();
    } else {
      stop();
    }
  }

  RankSchedule schedule() const {
    const LoaderOptions& o = loader_->options();
    return RankSchedule(run_start_.total, o.batch_size, static_cast<uint32_t>(loader_->world_size()),
                        static_cast<uint32_t>(loader_->rank()), o.drop_last, run_start_.consumed);
  }

  py::object next_staged() {
    Worker& w = *w_;
    std::unique_lock<std::mutex> lock(w.mu);
    const bool have = w.dbatch.has_value();
    DeviceBatch db;
    if (have) db = std::move(*w.dbatch);
    w.dbatch.reset();
    std::exception_ptr error = std::exchange(w.error, nullptr);
    w.requested = w.done = false;
    lock.unlock();
    if (error) std::rethrow_exception(error);
    if (!have) return py::none();
    delivered_++;
    return export_device(std::move(db));
  }

  // Orders the batch on the consumer's stream, then hands its tensors out zero-copy; each
  // owns the DeviceBatch, whose destructor records the slot's release on that stream when
  // the last tensor is freed. When Python would then hold every device slot (the Stager
  // could never make the next batch), the batch is cloned instead and its slot released
  // at once, with one warning.
  py::dict export_device(DeviceBatch db) {
    void* stream = nullptr;
    if (!stream_fn_.is_none()) stream = reinterpret_cast<void*>(stream_fn_().cast<uintptr_t>());
    db.wait(stream);
    auto live = live_;
    live->fetch_add(1);
    std::shared_ptr<DeviceBatch> holder(new DeviceBatch(std::move(db)), [live](DeviceBatch* p) {
      delete p;
      live->fetch_sub(1);
    });
    const bool copy = live->load() >= static_cast<int>(device_slots_);
    py::dict out;
    for (const TensorView& v : holder->tensors()) {
      if (v.kind != TensorKind::kDense) {  // host copies the device batch owns
        export_ragged(out, v, holder->size(), [&](const TensorView& x) {
          py::object t = converter_(to_dlpack(x, holder));
          return copy ? t.attr("clone")() : t;
        });
        continue;
      }
      py::object t = converter_(to_dlpack(v, holder));
      if (copy) t = t.attr("clone")();
      out[py::str(v.name)] = t;
    }
    if (copy) {
      holder.reset();
      if (!warned_) {
        warned_ = true;
        const std::string msg = "stoker: the caller holds " + std::to_string(device_slots_ - 1) + " of the " +
                                std::to_string(device_slots_) +
                                " device batch slots (e.g. list(loader)); further batches are handed out as copies "
                                "while that lasts, and memory grows with the batches kept.";
        if (PyErr_WarnEx(held_batches_warning(), msg.c_str(), 2) != 0) throw py::error_already_set();
      }
    }
    return out;
  }

  // Text and byte strings as lists of str / bytes; a variable-length array as its values
  // [sum of n_i, *inner] plus `name.offsets` [B + 1] (sample i: values[offsets[i]:offsets[i+1]]).
  template <typename Tensor>
  static void export_ragged(py::dict& out, const TensorView& v, uint64_t n, Tensor&& tensor) {
    if (v.kind == TensorKind::kRagged) {
      out[py::str(v.name)] = tensor(v);
      TensorView offs;
      offs.name = v.name + ".offsets";
      offs.data = const_cast<int64_t*>(v.offsets);
      offs.shape = {static_cast<int64_t>(n + 1)};
      offs.dtype = ElemType::kInt64;
      out[py::str(offs.name)] = tensor(offs);
      return;
    }
    const auto* bytes = static_cast<const char*>(v.data);
    py::list items;
    for (uint64_t i = 0; i < n; ++i) {
      const char* p = bytes + v.offsets[i];
      const auto len = static_cast<py::ssize_t>(v.offsets[i + 1] - v.offsets[i]);
      if (v.kind == TensorKind::kText)
        items.append(py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(p, len, "replace")));
      else
        items.append(py::bytes(p, static_cast<size_t>(len)));
    }
    out[py::str(v.name)] = items;
  }

  py::dict export_batch(const Batch& b) {
    py::dict out;
    auto lease = b.share_lease();
    auto tensor = [&](const TensorView& v) -> py::object {
      if (converter_.is_none()) return to_numpy(v, lease);
      return converter_(to_dlpack(v, lease));
    };
    for (const TensorView& v : b.tensors()) {
      if (v.kind == TensorKind::kDense) {
        out[py::str(v.name)] = tensor(v);
        continue;
      }
      export_ragged(out, v, b.size(), tensor);
    }
    return out;
  }

  py::object converter_;
  py::object stream_fn_;
  bool staged_ = false;
  unsigned device_slots_ = 0;
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);  // staged batches Python holds
  OrderState run_start_;   // where the current run started (staged mode's state())
  uint64_t delivered_ = 0;  // batches handed to Python in this run (staged mode)
  std::shared_ptr<Worker> w_;
  Loader* loader_ = nullptr;  // w_->loader while open; null once closed
  uint64_t num_batches_ = 0;
  bool warned_ = false;       // HeldBatchesWarning raised (Python thread only)
  std::thread worker_;        // last: started after everything it uses exists
};

}  // namespace

void init_loader(py::module_& m) {
  py::class_<FieldTransform> ft(m, "FieldTransform", "How one field becomes part of a batch (see include/stoker/loader.h).");
  py::enum_<FieldTransform::Kind>(ft, "Kind")
      .value("RANDOM_RESIZED_CROP", FieldTransform::Kind::kRandomResizedCrop)
      .value("CENTER_CROP", FieldTransform::Kind::kCenterCrop)
      .value("FOLLOW", FieldTransform::Kind::kFollow)
      .value("AS_STORED", FieldTransform::Kind::kAsStored);
  ft.def(py::init<>())
      .def_readwrite("kind", &FieldTransform::kind)
      .def_readwrite("size", &FieldTransform::size)
      .def_readwrite("scale_min", &FieldTransform::scale_min)
      .def_readwrite("scale_max", &FieldTransform::scale_max)
      .def_readwrite("ratio_min", &FieldTransform::ratio_min)
      .def_readwrite("ratio_max", &FieldTransform::ratio_max)
      .def_readwrite("flip_prob", &FieldTransform::flip_prob)
      .def_readwrite("resize", &FieldTransform::resize)
      .def_readwrite("follow", &FieldTransform::follow)
      .def_property(
          "interpolation",
          [](const FieldTransform& f) { return std::string(f.interpolation == Interpolation::kNearest ? "nearest" : "antialiased"); },
          [](FieldTransform& f, const std::string& v) {
            if (v == "nearest") f.interpolation = Interpolation::kNearest;
            else if (v == "antialiased" || v == "bilinear") f.interpolation = Interpolation::kAntialiased;
            else throw_error(ErrorCode::kInvalidArgument, "interpolation must be 'nearest' or 'antialiased', got '" + v + "'");
          })
      .def_readwrite("channels", &FieldTransform::channels);

  py::class_<PyLoaderOptions> o(m, "LoaderOptions", "Options of a Loader (see include/stoker/loader.h).");
  o.def(py::init<>())
      .def_property(
          "fields", [](const PyLoaderOptions& x) { return x.o.fields; },
          [](PyLoaderOptions& x, const std::map<std::string, FieldTransform>& v) { x.o.fields = v; })
      .def_property(
          "path", [](const PyLoaderOptions& x) { return x.o.path; },
          [](PyLoaderOptions& x, const std::string& v) { x.o.path = v; })
      .def_property(
          "batch_size", [](const PyLoaderOptions& x) { return x.o.batch_size; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.batch_size = v; })
      .def_property(
          "transform", [](const PyLoaderOptions& x) { return x.o.transform; },
          [](PyLoaderOptions& x, const ImageTransform& v) { x.o.transform = v; })
      .def_property(
          "pixel_format", [](const PyLoaderOptions& x) { return to_name(kPixelFormats, x.o.pixel_format); },
          [](PyLoaderOptions& x, const std::string& v) {
            x.o.pixel_format = from_name(kPixelFormats, v, "pixel_format");
          })
      .def_property(
          "mean", [](const PyLoaderOptions& x) { return std::vector<float>(x.o.mean, x.o.mean + 3); },
          [](PyLoaderOptions& x, const std::vector<float>& v) {
            if (v.size() != 3) throw_error(ErrorCode::kInvalidArgument, "mean needs 3 values");
            std::copy(v.begin(), v.end(), x.o.mean);
          })
      .def_property(
          "std", [](const PyLoaderOptions& x) { return std::vector<float>(x.o.std, x.o.std + 3); },
          [](PyLoaderOptions& x, const std::vector<float>& v) {
            if (v.size() != 3) throw_error(ErrorCode::kInvalidArgument, "std needs 3 values");
            std::copy(v.begin(), v.end(), x.o.std);
          })
      .def_property(
          "targets", [](const PyLoaderOptions& x) { return x.o.targets; },
          [](PyLoaderOptions& x, bool v) { x.o.targets = v; })
      .def_property(
          "token_dtype",
          [](const PyLoaderOptions& x) {
            return x.o.token_type_is_stored ? std::string("stored") : to_name(kTokenTypes, x.o.token_type);
          },
          [](PyLoaderOptions& x, const std::string& v) {
            if (v == "stored") {
              x.o.token_type_is_stored = true;
            } else {
              x.o.token_type = from_name(kTokenTypes, v, "token_dtype");
              x.o.token_type_is_stored = false;
            }
          })
      .def_property(
          "order", [](const PyLoaderOptions& x) { return std::string(order_kind_name(x.o.order.kind)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.order.kind = parse_order_kind(v); })
      .def_property(
          "seed", [](const PyLoaderOptions& x) { return x.o.order.seed; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.order.seed = v; })
      .def_property(
          "chunk_size", [](const PyLoaderOptions& x) { return x.o.order.chunk_size; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.order.chunk_size = v; })
      .def_property(
          "window_chunks", [](const PyLoaderOptions& x) { return x.o.order.window_chunks; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.order.window_chunks = v; })
      .def_property(
          "drop_last", [](const PyLoaderOptions& x) { return x.o.drop_last; },
          [](PyLoaderOptions& x, bool v) { x.o.drop_last = v; })
      .def_property(
          "rank", [](const PyLoaderOptions& x) { return x.o.rank; },
          [](PyLoaderOptions& x, int v) { x.o.rank = v; })
      .def_property(
          "world_size", [](const PyLoaderOptions& x) { return x.o.world_size; },
          [](PyLoaderOptions& x, int v) { x.o.world_size = v; })
      .def_property(
          "threads", [](const PyLoaderOptions& x) { return x.o.threads; },
          [](PyLoaderOptions& x, unsigned v) { x.o.threads = v; })
      .def_property(
          "slots", [](const PyLoaderOptions& x) { return x.o.slots; },
          [](PyLoaderOptions& x, unsigned v) { x.o.slots = v; })
      .def_property(
          "grow_when_held", [](const PyLoaderOptions& x) { return x.o.grow_when_held; },
          [](PyLoaderOptions& x, bool v) { x.o.grow_when_held = v; })
      .def_property(
          "on_error", [](const PyLoaderOptions& x) { return std::string(on_error_name(x.o.on_error)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.on_error = on_error_from_name(v); })
      .def_property(
          "io_engine", [](const PyLoaderOptions& x) { return std::string(io_engine_kind_name(x.o.io.engine)); },
          [](PyLoaderOptions& x, const std::string& v) { x.o.io.engine = io_engine_kind_from_name(v); })
      .def_property(
          "io_direct", [](const PyLoaderOptions& x) { return x.o.io.direct; },
          [](PyLoaderOptions& x, bool v) { x.o.io.direct = v; })
      .def_property(
          "io_queue_depth", [](const PyLoaderOptions& x) { return x.o.io.queue_depth; },
          [](PyLoaderOptions& x, unsigned v) { x.o.io.queue_depth = v; })
      .def_readwrite("io_limit_bytes_per_s", &PyLoaderOptions::io_limit_bytes_per_s)
      .def_readwrite("stage", &PyLoaderOptions::stage)
      .def_readwrite("device", &PyLoaderOptions::device)
      .def_readwrite("device_slots", &PyLoaderOptions::device_slots)
      .def_property(
          "max_record_bytes", [](const PyLoaderOptions& x) { return x.o.max_record_bytes; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.max_record_bytes = v; })
      .def_property(
          "cache_dir", [](const PyLoaderOptions& x) { return x.o.cache_dir; },
          [](PyLoaderOptions& x, std::string v) { x.o.cache_dir = std::move(v); })
      .def_property(
          "cache_limit", [](const PyLoaderOptions& x) { return x.o.cache_limit; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.cache_limit = v; })
      .def_property(
          "cache_prefetch", [](const PyLoaderOptions& x) { return x.o.cache_prefetch; },
          [](PyLoaderOptions& x, unsigned v) { x.o.cache_prefetch = v; })
      .def_property(
          "remote_connections", [](const PyLoaderOptions& x) { return x.o.remote.connections; },
          [](PyLoaderOptions& x, unsigned v) { x.o.remote.connections = v; })
      .def_property(
          "remote_part_bytes", [](const PyLoaderOptions& x) { return x.o.remote.part_bytes; },
          [](PyLoaderOptions& x, uint64_t v) { x.o.remote.part_bytes = v; })
      .def_property(
          "remote_profile", [](const PyLoaderOptions& x) { return x.o.remote.aws_profile; },
          [](PyLoaderOptions& x, std::string v) { x.o.remote.aws_profile = std::move(v); })
      .def_property(
          "gpu_pci_bus_id", [](const PyLoaderOptions& x) { return x.o.gpu_pci_bus_id; },
          [](PyLoaderOptions& x, std::optional<std::string> v) { x.o.gpu_pci_bus_id = std::move(v); });

  py::class_<PyLoader>(m, "Loader", "Native loader handle; use stoker.Loader.")
      .def(py::init([](const PyLoaderOptions& o, py::object converter, py::object stream) {
             return std::make_unique<PyLoader>(o, std::move(converter), std::move(stream));
           }),
           py::arg("options"), py::arg("converter"), py::arg("stream") = py::none())
      .def("next", &PyLoader::next,
           "The next batch as {name: tensor}, or None at the end of the epoch. Waits with the GIL released; "
           "Ctrl-C interrupts the wait (the batch is then returned by the following call).")
      .def("set_epoch", &PyLoader::set_epoch, py::arg("epoch"))
      .def_property_readonly("epoch", &PyLoader::epoch)
      .def("num_batches", &PyLoader::num_batches)
      .def_property_readonly("epoch_samples", &PyLoader::epoch_samples)
      .def("state", &PyLoader::state, "The order state (one line) after the batches handed out so far.")
      .def("load_state", &PyLoader::load_state, py::arg("state"))
      .def("stats_json", &PyLoader::stats_json)
      .def("stats_summary", &PyLoader::stats_summary)
      .def("stage_stats_json", &PyLoader::stage_stats_json, "The Stager's figures (JSON), or '' when not staged.")
      .def("class_names", &PyLoader::class_names)
      .def_property_readonly("rank", &PyLoader::rank)
      .def_property_readonly("world_size", &PyLoader::world_size)
      .def_property_readonly("configured_slots", &PyLoader::configured_slots)
      .def_property_readonly("closed", &PyLoader::closed)
      .def("close", &PyLoader::close, "Stops the loader's threads; further calls raise.");
}

}  // namespace stoker::python
