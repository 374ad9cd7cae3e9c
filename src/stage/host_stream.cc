// HostStream: an in-order task queue on one named thread.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "stoker/cpu.h"
#include "stage/host_stream.h"

namespace stoker {

struct HostStream::Impl {
  std::mutex mu;
  std::condition_variable cv;       // work queued, stop
  std::condition_variable idle_cv;  // a task finished
  std::deque<std::function<void()>> tasks;
  uint64_t enqueued = 0, finished = 0;
  bool stop = false;
  std::exception_ptr error;
  std::thread worker;

  void run(const std::string& name) {
    pin_and_name_this_thread({}, name);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !tasks.empty(); });
      if (tasks.empty()) return;  // stop and drained
      auto task = std::move(tasks.front());
      tasks.pop_front();
      lock.unlock();
      std::exception_ptr e;
      try {
        task();
      } catch (...) {
        e = std::current_exception();
      }
      task = nullptr;  // drop captures outside the lock
      lock.lock();
      if (e && !error) error = std::move(e);
      ++finished;
      idle_cv.notify_all();
    }
  }
};

HostStream::HostStream(std::string thread_name) : impl_(std::make_unique<Impl>()) {
  Impl* s = impl_.get();
  s->worker = std::thread([s, name = std::move(thread_name)] { s->run(name); });
}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

void HostStream::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->tasks.push_back(std::move(task));
    ++impl_->enqueued;
  }
  impl_->cv.notify_one();
}

void HostStream::synchronize() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const uint64_t target = impl_->enqueued;
  impl_->idle_cv.wait(lock, [&] { return impl_->finished >= target; });
  if (impl_->error) {
    std::exception_ptr e = impl_->error;
    impl_->error = nullptr;
    std::rethrow_exception(e);
  }
}

}  // namespace stoker
