#include "io/pread_engine.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io/io_util.h"
#include "stoker/error.h"

namespace stoker::internal {
namespace {

class PreadEngine final : public IoEngine {
 public:
  PreadEngine(const IoOptions& o, std::string fallback_reason)
      : opts_(o), files_(o.direct), fallback_reason_(std::move(fallback_reason)) {
    if (opts_.slab_bytes) slab_ = std::make_shared<SlabAllocator>(opts_.slab_bytes);
    const unsigned n = std::max(1u, opts_.pread_threads);
    limit_ = n;
    workers_.reserve(n);
    for (unsigned t = 0; t < n; ++t) workers_.emplace_back([this, t] { work(t); });
  }

  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.clear();  // nobody will reap them; the buffers are the caller's
      stop_ = true;
    }
    work_cv_.notify_all();
    // A worker finishes the read it is doing (the kernel cannot be interrupted in a
    // pread of a regular file) and exits; only then may descriptors and slab go.
    for (auto& w : workers_) w.join();
  }

  uint32_t add_file(const std::string& path) override { return files_.add(path); }
  // No job names the file (the caller's promise), so no worker holds its descriptor.
  void remove_file(uint32_t file) override { files_.remove(file); }
  uint64_t file_size(uint32_t file) const override { return files_.at(file).size; }
  const std::string& file_path(uint32_t file) const override { return files_.at(file).path; }

  void submit(std::span<const ReadRequest> reqs) override {
    std::vector<Job> batch;
    batch.reserve(reqs.size());
    for (const ReadRequest& r : reqs) {
      const OpenFile& f = files_.at(r.file);
      if (r.buf == nullptr && r.length > 0) {
        throw_error(ErrorCode::kInvalidArgument, "read request with a null buffer for " + f.path);
      }
    }
    uint64_t unaligned_count = 0;
    for (const ReadRequest& r : reqs) {
      bool unaligned = false;
      Job j;
      j.req = r;
      j.fd = files_.fd_for(r, &unaligned);
      j.direct_fd = files_.at(r.file).direct && !unaligned;
      j.path = &files_.at(r.file).path;  // entries never move (deque)
      unaligned_count += unaligned;
      batch.push_back(j);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.unaligned_reads += unaligned_count;
      for (auto& j : batch) jobs_.push_back(j);
      update_inflight_locked();
    }
    if (batch.size() == 1) {
      work_cv_.notify_one();
    } else if (!batch.empty()) {
      work_cv_.notify_all();
    }
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete,
              std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    size_t got = 0;
    for (;;) {
      for (auto& c : done_) out.push_back(std::move(c));
      got += done_.size();
      done_.clear();
      if (got >= min_complete || jobs_.size() + running_ == 0) break;
      if (done_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        for (auto& c : done_) out.push_back(std::move(c));
        got += done_.size();
        done_.clear();
        break;
      }
    }
    update_inflight_locked();
    return got;
  }

  void cancel_all() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Job& j : jobs_) {
      ReadCompletion c;
      c.tag = j.req.tag;
      c.result = -ECANCELED;
      c.error = "read cancelled before it was issued";
      ++stats_.requests;
      ++stats_.cancelled;
      done_.push_back(std::move(c));
    }
    jobs_.clear();
    update_inflight_locked();
  }

  size_t inflight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size() + running_ + done_.size();
  }

  unsigned set_queue_limit(unsigned n) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = std::clamp(n, 1u, static_cast<unsigned>(workers_.size()));
    }
    work_cv_.notify_all();
    return limit_;
  }

  IoStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    IoStats s = stats_;
    s.busy_s = busy_.seconds();
    s.queue_full_s = waiting_.seconds();
    s.engine = "pread";
    s.direct = files_.direct();
    s.queue_depth = opts_.queue_depth;
    s.queue_limit = limit_;
    s.fallback_reason = fallback_reason_;
    if (!files_.reasons().empty()) {
      if (!s.fallback_reason.empty()) s.fallback_reason += "; ";
      s.fallback_reason += files_.reasons();
    }
    return s;
  }

  bool direct() const override { return files_.direct(); }

  IoBuffer alloc(size_t bytes) override { return alloc_from_slab(slab_, bytes); }

 private:
  struct Job {
    ReadRequest req;
    int fd = -1;
    bool direct_fd = false;
    const std::string* path = nullptr;
  };

  void update_inflight_locked() {
    const size_t n = jobs_.size() + running_;
    stats_.max_inflight = std::max<unsigned>(stats_.max_inflight, static_cast<unsigned>(n));
    busy_.update(n);
    waiting_.update(jobs_.size());  // queued, no worker free (or awake) to take them
  }

  void work(unsigned index) {
    const std::string name = "stoker-pread/" + std::to_string(index);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stop_ || (!jobs_.empty() && running_ < limit_); });
      if (stop_) return;
      Job j = jobs_.front();
      jobs_.pop_front();
      ++running_;
      update_inflight_locked();
      lock.unlock();

      uint64_t retries = 0, shorts = 0;
      const int64_t result = read_all(j, &retries, &shorts);
      ReadCompletion c;
      c.tag = j.req.tag;
      c.result = result;
      if (result < 0) {
        c.error = read_error_text(*j.path, j.req.offset, j.req.length, static_cast<int>(-result));
      }

      lock.lock();
      --running_;
      ++stats_.requests;
      stats_.retries += retries;
      stats_.short_reads += shorts;
      if (result >= 0) {
        stats_.bytes += static_cast<uint64_t>(result);
      } else {
        ++stats_.errors;
      }
      done_.push_back(std::move(c));
      update_inflight_locked();
      done_cv_.notify_all();
    }
  }

  // pread until the requested length, EOF or a real error.
  static int64_t read_all(const Job& j, uint64_t* retries, uint64_t* shorts) {
    if (j.fd < 0) return j.fd;  // the buffered descriptor could not be opened
    uint64_t done = 0;
    auto* buf = static_cast<uint8_t*>(j.req.buf);
    while (done < j.req.length) {
      const ssize_t n = ::pread(j.fd, buf + done, j.req.length - done,
                                static_cast<off_t>(j.req.offset + done));
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) {
          ++*retries;
          continue;
        }
        return -errno;
      }
      if (n == 0) break;  // EOF
      done += static_cast<uint64_t>(n);
      if (done < j.req.length) {
        // Off a block boundary, a direct read has hit EOF (see the uring engine).
        if (j.direct_fd && !is_aligned(done, kDirectAlignment)) break;
        ++*shorts;
      }
    }
    return static_cast<int64_t>(done);
  }

  IoOptions opts_;
  std::shared_ptr<SlabAllocator> slab_;
  FileTable files_;
  std::string fallback_reason_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> jobs_;
  std::vector<ReadCompletion> done_;
  size_t running_ = 0;
  unsigned limit_ = 1;  // workers reading at once (set_queue_limit; all of them until then)
  bool stop_ = false;
  IoStats stats_;
  BusyClock busy_;
  BusyClock waiting_;  // jobs queued, not taken by a worker yet
  std::vector<std::thread> workers_;  // last: joined in the destructor body
};

}  // namespace

std::unique_ptr<IoEngine> make_pread_engine(const IoOptions& options,
                                            std::string fallback_reason) {
  return std::make_unique<PreadEngine>(options, std::move(fallback_reason));
}

}  // namespace stoker::internal
