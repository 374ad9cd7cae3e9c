// The library's log messages (stoker/log.h) routed to Python's `logging`: the package
// installs a handler (stoker/__init__.py hands records to the "stoker" logger).
//
// A message logged on a thread that holds the GIL is handed over at once. One logged on
// a library thread (stoker-io, a decoder) is queued and handed over by a thread of this
// module, stoker-log, which takes the GIL: the library thread never waits for the GIL,
// so a Python thread that holds it while joining or waiting on the library cannot
// deadlock with a message. At exit (atexit) the queue is flushed, the thread stopped and
// the stderr sink put back, before the interpreter goes away.
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "bindings.h"
#include "stoker/log.h"

namespace stoker::python {
namespace {


struct Router {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<LogLevel, std::string>> queue;
  bool stop = false;
  std::thread thread;
  pid_t thread_pid = 0;  // a forked child has no stoker-log thread: it starts its own
  PyObject* handler = nullptr;  // owned; read and changed with the GIL held
};

// Leaked: library threads may log while the process exits.
Router& router() {
  static Router* r = new Router;
  return *r;
}

// With the GIL held.
void deliver(LogLevel level, const std::string& message) {
  Router& r = router();
  if (!r.handler) return;
  try {
    py::handle(r.handler)(static_cast<int>(level), py::bytes(message).attr("decode")("utf-8", "replace"));
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("stoker log handler");
  }
}

// With the GIL held: what the queue holds, in order.
void drain() {
  Router& r = router();
  std::deque<std::pair<LogLevel, std::string>> batch;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    batch.swap(r.queue);
  }
  for (auto& [level, message] : batch) deliver(level, message);
}

void run_thread() {
  Router& r = router();
  std::unique_lock<std::mutex> lock(r.mu);
  for (;;) {
    r.cv.wait(lock, [&] { return r.stop || !r.queue.empty(); });
    if (r.queue.empty()) return;  // stopping, nothing left
    lock.unlock();
    {
      py::gil_scoped_acquire gil;
      drain();
    }
    lock.lock();
  }
}

void sink(LogLevel level, const std::string& message) {
  Router& r = router();
  if (PyGILState_Check()) {
    drain();  // earlier messages first
    deliver(level, message);
    return;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  r.queue.emplace_back(level, message);
  if (r.stop) return;  // being unrouted: the flush takes it
  if (r.thread_pid != ::getpid()) {
    if (r.thread.joinable()) r.thread.detach();  // a thread of the parent process: gone
    r.thread = std::thread(run_thread);
    r.thread_pid = ::getpid();
  }
  r.cv.notify_one();
}

// atexit, and before a new handler replaces the old one.
void unroute() {
  Router& r = router();
  set_log_sink({});
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.stop = true;
  }
  r.cv.notify_all();
  if (r.thread.joinable()) {
    if (r.thread_pid == ::getpid()) {
      py::gil_scoped_release nogil;  // the thread may be waiting for the GIL to deliver
      r.thread.join();
    } else {
      r.thread.detach();
    }
  }
  drain();
  Py_CLEAR(r.handler);
  std::lock_guard<std::mutex> lock(r.mu);
  r.stop = false;
  r.thread_pid = 0;
}

void route(py::object handler) {
  unroute();
  if (handler.is_none()) return;
  router().handler = handler.release().ptr();
  set_log_sink(sink);
}

LogLevel level_from_int(int level) {
  if (level < 0 || level > 3) throw py::value_error("log level must be 0 (error) .. 3 (debug), got " + std::to_string(level));
  return static_cast<LogLevel>(level);
}

}  // namespace

void init_log(py::module_& m) {
  m.def("_route_log", &route, py::arg("handler"),
        "Hands the library's log messages to handler(level, message), level 0 error .. 3 debug; None: back to "
        "stderr. The package routes them to logging.getLogger('stoker').");
  m.def("_unroute_log", &unroute, "Flushes queued messages and puts the stderr sink back (atexit).");
  m.def("_log_level", [] { return static_cast<int>(log_level()); },
        "The library's threshold (STOKER_LOG): 0 error .. 3 debug.");
  m.def("_set_log_level", [](int level) { set_log_level(level_from_int(level)); }, py::arg("level"),
        "Sets the library's threshold for the rest of the process (overrides STOKER_LOG).");
  m.def(
      "_log",
      [](int level, const std::string& message, bool from_library_thread) {
        const LogLevel l = level_from_int(level);
        if (!from_library_thread) return log_message(l, message);
        py::gil_scoped_release nogil;
        std::thread([&] { log_message(l, message); }).join();
      },
      py::arg("level"), py::arg("message"), py::arg("from_library_thread") = false,
      "Logs through the library's logger, from this thread or from a thread of the library's own (no GIL): "
      "what a message of the library goes through.");
}

}  // namespace stoker::python
