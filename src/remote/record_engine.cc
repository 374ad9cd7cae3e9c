#include "remote/record_engine.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "io/io_util.h"
#include "stoker/error.h"

namespace stoker::internal {

namespace {

using Clock = std::chrono::steady_clock;

class RemoteRecordEngine final : public IoEngine {
 public:
  RemoteRecordEngine(std::shared_ptr<RemoteStore> store, std::map<std::string, uint64_t> sizes, unsigned queue_depth,
                     std::shared_ptr<std::atomic<uint64_t>> wait_ns)
      : store_(std::move(store)), sizes_(std::move(sizes)), wait_ns_(std::move(wait_ns)) {
    if (queue_depth < 1 || queue_depth > 4096)
      throw_error(ErrorCode::kInvalidArgument, "queue_depth " + std::to_string(queue_depth) + " is not in 1..4096");
    const unsigned workers = std::min(4u, queue_depth);
    queue_depth_ = queue_depth;
    set_limit_locked(queue_depth, workers);
    for (unsigned i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
  }

  ~RemoteRecordEngine() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();  // a batch in flight writes into callers' buffers
  }

  uint32_t add_file(const std::string& name) override {
    auto it = sizes_.find(name);
    if (it == sizes_.end())
      throw_error(ErrorCode::kNotFound, store_->object_url(name) + ": not an object of the dataset's manifest");
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t id = 0; id < files_.size(); ++id)
      if (!files_[id].open) {
        files_[id] = File{name, it->second, true};
        return id;
      }
    files_.push_back(File{name, it->second, true});
    return static_cast<uint32_t>(files_.size() - 1);
  }

  void remove_file(uint32_t file) override {
    std::lock_guard<std::mutex> lock(mu_);
    check_file_locked(file);
    files_[file].open = false;
  }

  uint64_t file_size(uint32_t file) const override {
    std::lock_guard<std::mutex> lock(mu_);
    check_file_locked(file);
    return files_[file].size;
  }

  const std::string& file_path(uint32_t file) const override {
    std::lock_guard<std::mutex> lock(mu_);
    check_file_locked(file);
    return files_[file].name;
  }

  void submit(std::span<const ReadRequest> reqs) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const ReadRequest& r : reqs) {
        check_file_locked(r.file);
        if (!r.buf && r.length > 0) throw_error(ErrorCode::kInvalidArgument, "read request with a null buffer");
      }
      for (const ReadRequest& r : reqs) queue_.push_back(Pending{r, files_[r.file].name, files_[r.file].size});
      outstanding_ += reqs.size();
      waiting_.update(queue_.size());
    }
    work_cv_.notify_all();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    const size_t want = std::min(min_complete, outstanding_);
    if (done_.size() < want) {
      const auto t0 = Clock::now();
      done_cv_.wait_for(lock, timeout, [&] { return done_.size() >= want; });
      if (wait_ns_)
        wait_ns_->fetch_add(
            static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    }
    const size_t n = done_.size();
    for (auto& c : done_) out.push_back(std::move(c));
    done_.clear();
    outstanding_ -= n;
    return n;
  }

  void cancel_all() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Pending& p : queue_) {
      done_.push_back(ReadCompletion{p.req.tag, -ECANCELED, {}});
      ++stats_.cancelled;
      ++stats_.requests;
    }
    queue_.clear();
    waiting_.update(0);
    done_cv_.notify_all();
  }

  size_t inflight() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return outstanding_;
  }

  unsigned set_queue_limit(unsigned n) override {
    std::lock_guard<std::mutex> lock(mu_);
    set_limit_locked(n, static_cast<unsigned>(workers_.size()));
    return limit_;
  }

  IoStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    IoStats s = stats_;
    s.busy_s = busy_s_ + (in_flight_ > 0 ? std::chrono::duration<double>(Clock::now() - busy_since_).count() : 0);
    s.engine = "remote";
    s.queue_depth = queue_depth_;
    s.queue_limit = limit_;
    s.queue_full_s = waiting_.seconds();
    return s;
  }

  bool direct() const override { return false; }
  IoBuffer alloc(size_t bytes) override { return IoBuffer::aligned(std::max<size_t>(bytes, 1)); }

 private:
  struct File {
    std::string name;
    uint64_t size = 0;
    bool open = false;
  };
  struct Pending {
    ReadRequest req;
    std::string name;
    uint64_t size = 0;
  };

  // A few batches in flight at once: a batch ends with its slowest request, and the
  // others keep the connections busy meanwhile. Each worker's batch is its share of the
  // limit (within the store's connections).
  void set_limit_locked(unsigned n, unsigned workers) {
    limit_ = std::clamp(n, 1u, queue_depth_);
    batch_ = std::max(1u, std::min(limit_ / std::max(1u, workers), store_->options().connections));
  }

  void check_file_locked(uint32_t file) const {
    if (file >= files_.size() || !files_[file].open)
      throw_error(ErrorCode::kInvalidArgument, "IO engine: unknown file id " + std::to_string(file));
  }

  void work() {
    std::vector<Pending> batch;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        while (!queue_.empty() && batch.size() < batch_) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        if (in_flight_ == 0) busy_since_ = Clock::now();
        in_flight_ += batch.size();
        waiting_.update(queue_.size());
        stats_.max_inflight = std::max<unsigned>(stats_.max_inflight, static_cast<unsigned>(in_flight_));
      }
      fetch(batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        in_flight_ -= batch.size();
        if (in_flight_ == 0) busy_s_ += std::chrono::duration<double>(Clock::now() - busy_since_).count();
      }
      batch.clear();
    }
  }

  // The bytes of each read that the object holds (a read past its end is short, as a
  // file's would be).
  static uint64_t readable(const Pending& p) {
    return p.req.offset >= p.size ? 0 : std::min<uint64_t>(p.req.length, p.size - p.req.offset);
  }

  // Hands a read's completion to reap() at once (the others of its batch may still be
  // arriving).
  void complete(const Pending& p, int64_t result, std::string error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.requests;
      if (result < 0) ++stats_.errors;
      else stats_.bytes += static_cast<uint64_t>(result);
      done_.push_back(ReadCompletion{p.req.tag, result, std::move(error)});
    }
    done_cv_.notify_all();
  }

  void fetch(const std::vector<Pending>& batch) {
    auto range_of = [](const Pending& p) {
      return RemoteStore::Range{p.name, p.req.offset, std::span<uint8_t>(static_cast<uint8_t*>(p.req.buf), readable(p)),
                                "shard " + p.name, {}};
    };
    std::vector<bool> done(batch.size());
    std::vector<RemoteStore::Range> ranges;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (readable(batch[i]) == 0) {
        complete(batch[i], 0, {});
        done[i] = true;
        continue;
      }
      ranges.push_back(range_of(batch[i]));
      ranges.back().on_done = [this, &batch, &done, i] {
        complete(batch[i], static_cast<int64_t>(readable(batch[i])), {});
        done[i] = true;
      };
    }
    try {
      store_->read_many(ranges);
      return;
    } catch (const std::exception&) {
      // One failure cancels the others of the call: find which reads it was.
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (done[i]) continue;
      try {
        const RemoteStore::Range r = range_of(batch[i]);
        store_->read(r.name, r.offset, r.dst, r.what);
        complete(batch[i], static_cast<int64_t>(readable(batch[i])), {});
      } catch (const std::exception& e) {
        complete(batch[i], -EIO, e.what());
      }
    }
  }

  std::shared_ptr<RemoteStore> store_;
  const std::map<std::string, uint64_t> sizes_;
  std::shared_ptr<std::atomic<uint64_t>> wait_ns_;
  unsigned batch_ = 1;  // mu_
  unsigned queue_depth_ = 0, limit_ = 0;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Pending> queue_;
  std::vector<ReadCompletion> done_;
  std::vector<File> files_;
  size_t outstanding_ = 0;  // submitted, not reaped
  size_t in_flight_ = 0;    // taken by a worker, not done
  Clock::time_point busy_since_;
  double busy_s_ = 0;
  BusyClock waiting_;  // mu_: reads queued for the workers
  IoStats stats_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoEngine> make_remote_record_engine(std::shared_ptr<RemoteStore> store,
                                                    std::map<std::string, uint64_t> sizes, unsigned queue_depth,
                                                    std::shared_ptr<std::atomic<uint64_t>> wait_ns) {
  return std::make_unique<RemoteRecordEngine>(std::move(store), std::move(sizes), queue_depth, std::move(wait_ns));
}

}  // namespace stoker::internal
