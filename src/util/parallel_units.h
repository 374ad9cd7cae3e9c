// A pass over numbered units of work on a few threads, for one-off passes at open
// (bucket sizes, token counts) that need no pool of their own.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace stoker::internal {

/// fn(unit, state) for units [0, n), on up to `threads` threads (the caller's among
/// them), each unit taken by the next thread free; `state` is a State of that thread's
/// own (scratch buffers). The first exception stops the taking of units and is rethrown
/// once every thread has joined.
template <class State, class Fn>
void parallel_units(size_t n, unsigned threads, Fn&& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr failed;
  auto work = [&] {
    State state{};
    for (size_t u; (u = next.fetch_add(1)) < n;) {
      try {
        fn(u, state);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed) failed = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min<size_t>(threads, n); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace stoker::internal
