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
// Devices. With stage "cuda" (device="cuda:N") the worker drives a Stager (stage.h) that
// owns the Loader (and gives it pinned host slots and NUMA-local threads): copies on the
// Stager's stream into a device ring; each batch is waited on torch's current stream
// (events, no host sync) and its tensors own the DeviceBatch, whose destructor records
// the slot's release on that stream. The Stager runs ahead of Python and knows where
// Python stands: state(), load_state(), epoch and len() are the Stager's. Stage "host"
// runs the same machinery on the CPU (tests).
//
// Threading: a Python Loader is driven by one Python thread at a time (like the C++
// Loader). next() waits with the GIL released, so a second thread could enter it (or
// set_epoch, load_state) meanwhile: that is refused with InvalidArgumentError, never
// interleaved. close() may come from any thread: it closes the C++ Loader first, so a
// next() waiting on another thread raises CancelledError (the loop fails, it does not
// end as a short epoch), waits for a direct try_next() in progress, then stops the
// worker. stats() is safe at any time.
//
// Processes: fork() copies the handle but none of its threads. A copy in a forked child
// raises UnavailableError on use (pid check) and is leaked, never joined, when freed.
// Options live in bind_loader_options.cc, tensor export in tensor_export.cc.
#include <pthread.h>
#include <unistd.h>
#include <pybind11/stl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include "bindings.h"
#include "loader_options.h"
#include "tensor_export.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/loader.h"
#include "stoker/order.h"
#include "stoker/stage.h"
#include "stoker/stats.h"
#include "stoker/shard.h"

namespace stoker::python {
namespace {

// ---- stats ----------------------------------------------------------------------

// A stats struct's visit() (stats.h) as a dict: measurements at full precision, none as
// None, groups as nested dicts. The network group's fetch_wait_frac and busy_frac are
// the JSON report's only: stats()["network"] keeps the keys it has always had.
class DictStatsWriter final : public StatsVisitor {
 public:
  DictStatsWriter() : open_{py::dict()} {}
  void count(const char* name, uint64_t v) override { put(name, py::int_(v)); }
  void integer(const char* name, int64_t v) override { put(name, py::int_(v)); }
  void figure(const char* name, double v) override { put(name, py::float_(v)); }
  void flag(const char* name, bool v) override { put(name, py::bool_(v)); }
  void text(const char* name, const std::string& v) override { put(name, py::str(v)); }
  void none(const char* name) override { put(name, py::none()); }
  void begin_group(const char* name) override {
    py::dict group;
    put(name, group);
    open_.push_back(group);
    names_.emplace_back(name);
  }
  void end_group() override {
    if (open_.size() < 2) return;
    open_.pop_back();
    names_.pop_back();
  }
  py::dict take() { return open_.front(); }

 private:
  void put(const char* name, py::object v) {
    if (names_.size() == 1 && names_[0] == "network" &&
        (std::string_view(name) == "fetch_wait_frac" || std::string_view(name) == "busy_frac"))
      return;
    open_.back()[name] = std::move(v);
  }
  std::vector<py::dict> open_;      // the root, then the groups begun and not ended
  std::vector<std::string> names_;  // the open groups' names
};

// ---- the handle ------------------------------------------------------------------

// What the Python thread and the "stoker-py" worker share. Owned jointly, so that a
// worker still inside Loader::next() at close() can finish on its own and destroy the
// loader itself (close() then returns without waiting for a slow batch).
struct Worker {
  std::unique_ptr<Loader> loader;  // unstaged mode
  std::unique_ptr<Stager> stager;  // staged mode; owns the Loader
  unsigned configured_slots = 0;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool requested = false;  // Python asked for a batch and has not collected it
  bool done = false;       // the worker finished that request
  std::optional<Batch> batch;
  std::optional<DeviceBatch> dbatch;  // staged mode's result
  std::exception_ptr error;
  OrderState state_before;  // state() when the pending request was made
  // The ring grew past its configured size (LoaderOptions::warning_sink, set on a loader
  // thread): Python raises one HeldBatchesWarning for it instead of the C++ stderr line.
  std::atomic<bool> grew{false};
  std::mutex grew_mu;
  std::string grew_msg;  // why (grew_mu)

  // The worker thread's body.
  static void run(std::shared_ptr<Worker> w) {
    pthread_setname_np(pthread_self(), "stoker-py");
    std::unique_lock<std::mutex> lock(w->mu);
    for (;;) {
      w->cv.wait(lock, [&] { return w->stop || (w->requested && !w->done); });
      if (w->stop) break;
      lock.unlock();
      std::optional<Batch> b;
      std::optional<DeviceBatch> d;
      std::exception_ptr e;
      try {
        if (w->stager) d = w->stager->next();
        else b = w->loader->next();
      } catch (...) {
        e = std::current_exception();
      }
      lock.lock();
      w->batch = std::move(b);
      w->dbatch = std::move(d);
      w->error = e;
      w->done = true;
      w->cv.notify_all();
    }
    // Stopped: drop what is left here, off the Python thread.
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
      so.backend = stage_backend_from_name(popt.stage);
      so.device = popt.device;
      so.device_slots = popt.device_slots;
      device_slots_ = popt.device_slots;
    }
    if (popt.pin_memory && !staged_) {
      if (cuda_device_count() == 0)
        throw_error(ErrorCode::kUnavailable, "pin_memory=True needs a CUDA device to pin for (" +
                                                 cuda_unavailable_reason() +
                                                 "); without one, leave it False: host tensors are then "
                                                 "ordinary pageable memory");
      const int dev = select_device(popt.device, cuda_device_count());
      if (!opt.slot_allocator) opt.slot_allocator = pinned_slot_allocator(dev);
      if (!opt.gpu_pci_bus_id) opt.gpu_pci_bus_id = cuda_pci_bus_id(dev);
    }
    {
      Worker* wp = w_.get();  // owns the loader, so outlives the sink
      opt.warning_sink = [wp](const std::string& msg) {
        std::lock_guard<std::mutex> lock(wp->grew_mu);
        wp->grew_msg = msg;
        wp->grew = true;
      };
      py::gil_scoped_release nogil;
      if (staged_) {
        w_->stager = std::make_unique<Stager>(std::move(opt), so);
        loader_ = w_->stager->loader();
      } else {
        w_->loader = std::make_unique<Loader>(std::move(opt));
        loader_ = w_->loader.get();
      }
      w_->configured_slots = loader_->options().slots;  // the count used when 0 asked for the default
    }
    num_batches_ = staged_ ? w_->stager->num_batches() : loader_->num_batches();
    worker_ = std::thread(&Worker::run, w_);
  }

  ~PyLoader() {
    if (forked()) {
      // A copy made by fork(): the worker and loader threads (and whatever their mutexes
      // guarded) exist only in the parent. Joining or locking here would hang, so leak
      // the handles; the parent's Loader is untouched.
      new std::shared_ptr<Worker>(std::move(w_));
      new std::thread(std::move(worker_));
      return;
    }
    shutdown();
  }

  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;

  void close() {
    if (forked()) {  // a fork's copy: nothing of it runs here (see ~PyLoader)
      loader_ = nullptr;
      return;
    }
    shutdown();
  }

  py::object next() {
    check_open();
    ConsumerGuard guard(*this, "next()");
    const std::shared_ptr<Worker> keep = w_;  // close() on another thread drops w_ meanwhile
    Worker& w = *keep;
    Loader* const loader = loader_;
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
          DirectCall direct(direct_calls_);  // close() waits for it before the loader may go
          py::gil_scoped_release nogil;  // the first call of a run starts its threads
          b = loader->try_next(&would_wait);
        }
        if (!would_wait) {
          if (!b) return py::none();
          py::dict out = export_batch(*b, converter_);
          b.reset();  // the tensors hold the lease now
          warn_if_grown(w);
          return out;
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(w.mu);
      if (!w.requested) {
        w.state_before = current_state();  // the worker is idle: safe to read
        w.requested = true;
        w.done = false;
        w.cv.notify_all();
      }
    }
    wait_done(w);
    if (!loader_)  // closed meanwhile: the loop fails rather than end as a short epoch
      throw_error(ErrorCode::kCancelled, "the Loader was closed (close() on another thread) while next() waited for a batch");
    if (staged_) return next_staged(w);
    std::unique_lock<std::mutex> lock(w.mu);
    // A plain Batch, not an optional: GCC 12 warns (falsely) about a moved optional here.
    const bool have = w.batch.has_value();
    Batch batch;
    if (have) batch = std::move(*w.batch);
    w.batch.reset();
    std::exception_ptr error = std::exchange(w.error, nullptr);
    w.requested = w.done = false;
    lock.unlock();
    if (error) std::rethrow_exception(error);  // stoker::Error -> stoker.*Error (bind_errors.cc)
    if (!have) return py::none();
    py::dict out = export_batch(batch, converter_);
    batch = Batch();  // the tensors hold the lease now
    warn_if_grown(w);
    return out;
  }

  // One HeldBatchesWarning per Loader once its ring grew (the C++ side stays silent).
  void warn_if_grown(Worker& w) {
    if (warned_ || !w.grew.load()) return;
    warned_ = true;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(w.grew_mu);
      why = w.grew_msg;
    }
    if (why.find("held by the caller") == std::string::npos) {  // a long run of skipped samples
      if (PyErr_WarnEx(PyExc_RuntimeWarning, ("stoker: " + why).c_str(), 2) != 0) throw py::error_already_set();
      return;
    }
    const std::string msg =
        "stoker: the caller holds all " + std::to_string(w.configured_slots) +
        " batch slots of this Loader (e.g. list(loader)); the ring grows so loading goes on, and memory now "
        "grows with the batches kept. Drop batches (or tensors) you no longer need to keep it bounded.";
    if (PyErr_WarnEx(held_batches_warning(), msg.c_str(), 2) != 0) throw py::error_already_set();
  }

  void set_epoch(uint64_t e) {
    check_open();
    ConsumerGuard guard(*this, "set_epoch()");
    drop_pending();
    if (staged_) {
      w_->stager->set_epoch(e);
      num_batches_ = w_->stager->num_batches();
      return;
    }
    loader_->set_epoch(e);
    num_batches_ = loader_->num_batches();
  }
  uint64_t epoch() const {
    check_open();
    return staged_ ? w_->stager->epoch() : loader_->epoch();
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
    std::lock_guard<std::mutex> lock(w_->mu);
    // A request in flight (or done but not collected) has not been handed to Python:
    // the state is the one from before it.
    return w_->requested ? w_->state_before.serialize() : current_state().serialize();
  }

  void load_state(const std::string& text) {
    check_open();
    ConsumerGuard guard(*this, "load_state()");
    const OrderState s = OrderState::parse(text);
    {
      wait_done(*w_);  // the worker is idle: the state may be read
      std::lock_guard<std::mutex> lock(w_->mu);
      const OrderState now = w_->requested ? w_->state_before : current_state();
      s.check_matches(now.options(), now.total);  // refused: a pending batch is kept
    }
    drop_pending();
    if (staged_) {
      w_->stager->load_state(s);
      num_batches_ = w_->stager->num_batches();
      return;
    }
    loader_->load_state(s);
    num_batches_ = loader_->num_batches();
  }

  // The figures as a dict (LoaderStats::visit, the description its JSON is made from
  // too), "summary": the one line made from the same LoaderStats, so the dict's evidence
  // and the summary always agree, and "stage": the Stager's figures when staged.
  py::dict stats() const {
    check_open();
    std::optional<StagedFeed> staged;
    if (staged_) staged = diagnose_staged(*w_->stager);
    const LoaderStats s = staged ? staged->loader : loader_->stats();
    DictStatsWriter d;
    s.visit(d);
    py::dict out = d.take();
    out["summary"] = s.summary();
    py::dict tune = out["tune"];  // the same dict object: the history joins it
    tune["history"] = py::cast(s.tune.changes);
    if (staged) {
      DictStatsWriter g;
      staged->stager.visit(g);
      out["stage"] = g.take();
    }
    return out;
  }
  std::vector<std::string> class_names() const {
    check_open();
    return loader_->class_names();
  }
  std::string schema() const {
    check_open();
    return loader_->schema().to_string();
  }
  uint64_t generation() const {
    check_open();
    return loader_->generation();
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
    if (forked())
      throw_error(ErrorCode::kUnavailable,
                  "this stoker.Loader was created in process " + std::to_string(pid_) + " and is used in process " +
                      std::to_string(::getpid()) +
                      ", a fork of it: its threads do not exist here. Create the Loader in the process that "
                      "iterates it (e.g. in the DataLoader worker, or after the fork), or use the 'spawn' start "
                      "method (multiprocessing.set_start_method('spawn'), DataLoader(multiprocessing_context='spawn'))");
    if (!loader_) throw_error(ErrorCode::kInvalidArgument, "this Loader is closed");
  }
  bool forked() const { return ::getpid() != pid_; }

  // Marks a consumer call (GIL held on entry and exit); a second one from another
  // thread, while the first waits with the GIL released, is refused.
  class ConsumerGuard {
   public:
    ConsumerGuard(PyLoader& l, const char* what) : l_(l) {
      if (l_.in_call_)
        throw_error(ErrorCode::kInvalidArgument,
                    std::string(what) + " while another thread is inside this Loader's next(), set_epoch() or "
                                        "load_state(): a Loader is iterated by one thread at a time (use one "
                                        "Loader per thread)");
      l_.in_call_ = true;
    }
    ~ConsumerGuard() { l_.in_call_ = false; }
    ConsumerGuard(const ConsumerGuard&) = delete;
    ConsumerGuard& operator=(const ConsumerGuard&) = delete;

   private:
    PyLoader& l_;
  };
  // Counts a try_next() running on the Python thread without the worker.
  struct DirectCall {
    explicit DirectCall(std::atomic<int>& n) : n_(n) { n_++; }
    ~DirectCall() { n_--; }
    std::atomic<int>& n_;
  };

  // Waits (GIL released, 50 ms at a time, signals checked in between) until no
  // request is running on the worker.
  static void wait_done(Worker& w) {
    for (;;) {
      bool idle;
      {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lock(w.mu);
        idle = w.cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return !w.requested || w.done; });
      }
      if (idle) return;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  // Waits for a pending request and throws its batch (or error) away.
  void drop_pending() {
    wait_done(*w_);
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
    Loader* const loader = loader_;
    loader_ = nullptr;
    auto stop = [&] {
      // A next() on another thread (its wait, or the worker's request) fails with
      // CancelledError now, and a direct try_next() finishes before the loader may go.
      loader->close();
      while (direct_calls_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
      // w_ stays: a next() on another thread may still read it (its own copy keeps it
      // alive too); the loader itself is gone with the worker.
    };
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      stop();
    } else {
      stop();
    }
  }

  // Where Python stands; read only while the worker is idle.
  OrderState current_state() const { return staged_ ? w_->stager->state() : loader_->state(); }

  py::object next_staged(Worker& w) {
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

  py::object converter_;
  py::object stream_fn_;
  bool staged_ = false;
  unsigned device_slots_ = 0;
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);  // staged batches Python holds
  std::shared_ptr<Worker> w_;
  Loader* loader_ = nullptr;  // w_->loader while open; null once closed
  uint64_t num_batches_ = 0;
  bool warned_ = false;       // HeldBatchesWarning raised (Python thread only)
  bool in_call_ = false;      // a consumer call runs (ConsumerGuard; read and written with the GIL held)
  std::atomic<int> direct_calls_{0};  // try_next() calls in progress (DirectCall)
  const pid_t pid_ = ::getpid();  // a fork's copy must not touch the threads (check_open)
  std::thread worker_;        // last: started after everything it uses exists
};

}  // namespace

void init_loader(py::module_& m) {
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
      .def("stats", &PyLoader::stats,
           "LoaderStats as a dict (plus 'stage': the Stager's figures when staged, and 'summary': "
           "LoaderStats::summary() of the same figures).")
      .def("class_names", &PyLoader::class_names)
      .def_property_readonly("schema", &PyLoader::schema,
                             "The dataset's schema as the manifest writes it (\"jpg:image cls:int64\"); a "
                             "mixture: its first source's")
      .def_property_readonly("generation", &PyLoader::generation,
                             "The manifest generation of the dataset opened (0: a mixture).")
      .def_property_readonly("rank", &PyLoader::rank)
      .def_property_readonly("world_size", &PyLoader::world_size)
      .def_property_readonly("configured_slots", &PyLoader::configured_slots)
      .def_property_readonly("closed", &PyLoader::closed)
      .def("close", &PyLoader::close, "Stops the loader's threads; further calls raise.");
}

}  // namespace stoker::python
