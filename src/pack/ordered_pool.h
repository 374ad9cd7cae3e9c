// Ordered parallel map for the packers: produce(i) runs on worker threads, consume(i,
// result) runs on the calling thread strictly in index order.
//
// This is what lets a packer read, validate, checksum and compress records on every
// core while the shard bytes come out in one deterministic order, identical whatever
// the thread count. At most `window` results are produced but not yet consumed, so
// memory stays bounded. An exception from produce(i) is rethrown on the calling
// thread when item i's turn comes (so the first failure in order is the one reported,
// deterministically); an exception from consume stops the workers. Workers are named
// "stoker-pack/N".
#pragma once

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace stoker::internal {

template <class T, class Produce, class Consume>
void ordered_parallel_for(size_t n, int threads, size_t window, Produce&& produce, Consume&& consume) {
  if (threads <= 1 || n <= 1) {
    for (size_t i = 0; i < n; ++i) {
      T value = produce(i);
      consume(i, std::move(value));
    }
    return;
  }
  window = std::max<size_t>(window, static_cast<size_t>(threads));
  struct Slot {
    std::optional<T> value;
    std::exception_ptr error;
    bool ready = false;
  };
  std::vector<Slot> slots(window);
  std::mutex mu;
  std::condition_variable cv_work, cv_ready;
  size_t next = 0, consumed = 0;
  bool stop = false;

  auto worker = [&] {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu);
      cv_work.wait(lock, [&] { return stop || next >= n || next < consumed + window; });
      if (stop || next >= n) return;
      const size_t i = next++;
      lock.unlock();
      Slot result;
      try {
        result.value.emplace(produce(i));
      } catch (...) {
        result.error = std::current_exception();
      }
      result.ready = true;
      lock.lock();
      slots[i % window] = std::move(result);
      cv_ready.notify_all();
    }
  };

  std::vector<std::thread> pool;
  auto shutdown = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv_work.notify_all();
    for (auto& t : pool) t.join();
    pool.clear();
  };
  try {
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(worker);
      std::string name = "stoker-pack/" + std::to_string(t);
      pthread_setname_np(pool.back().native_handle(), name.c_str());
    }
    for (size_t i = 0; i < n; ++i) {
      Slot slot;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv_ready.wait(lock, [&] { return slots[i % window].ready; });
        slot = std::move(slots[i % window]);
        slots[i % window] = Slot{};
        consumed = i + 1;
      }
      cv_work.notify_all();
      if (slot.error) std::rethrow_exception(slot.error);
      consume(i, std::move(*slot.value));
    }
  } catch (...) {
    shutdown();
    throw;
  }
  shutdown();
}

}  // namespace stoker::internal
