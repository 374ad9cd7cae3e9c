// HostStream: the host backend's stand-in for a CUDA stream. Internal: the host
// backend's copy thread runs on one, and the library's tests and `stoker bench stage`
// pass one as the `stream` argument of DeviceBatch::wait/release and convert_image to
// rehearse asynchronous consumers without a GPU. Users of the host backend pass nullptr.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace stoker {

/// An in-order work queue run by one thread: what a CUDA stream is to the GPU. Tasks run
/// in enqueue order; the first exception a task throws is kept and rethrown by
/// synchronize(). The destructor runs what is queued, then joins. Thread-safe. A task
/// must not drop the last DeviceBatch of a Stager that was waited on this same stream
/// (the ring's teardown would wait for this stream's later release record).
class HostStream {
 public:
  explicit HostStream(std::string thread_name = "stoker-hstream");
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  void enqueue(std::function<void()> task);
  /// Blocks until every task enqueued before the call has run; rethrows a task's error.
  void synchronize();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
