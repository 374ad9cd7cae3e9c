// make_throttled_engine: an IoEngine wrapper that releases requests to the inner engine
// at a limited byte rate (token bucket). Backs IoOptions::limit_bytes_per_s.
#include <algorithm>
#include <cerrno>
#include <deque>
#include <thread>

#include "io/latency_engine.h"
#include "io/throttled_engine.h"
#include "stoker/error.h"

namespace stoker::internal {
namespace {

using Clock = std::chrono::steady_clock;

class ThrottledEngine final : public IoEngine {
 public:
  ThrottledEngine(std::unique_ptr<IoEngine> inner, double rate)
      : inner_(std::move(inner)), rate_(rate), burst_(rate / 10), last_(Clock::now()) {}

  uint32_t add_file(const std::string& path) override { return inner_->add_file(path); }
  void remove_file(uint32_t f) override { inner_->remove_file(f); }
  uint64_t file_size(uint32_t f) const override { return inner_->file_size(f); }
  const std::string& file_path(uint32_t f) const override { return inner_->file_path(f); }

  void submit(std::span<const ReadRequest> reqs) override {
    for (const ReadRequest& r : reqs) inner_->file_path(r.file);  // validates ids
    for (const ReadRequest& r : reqs) queue_.push_back(r);
    release();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete,
              std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    size_t got = ready_.size();
    for (auto& c : ready_) out.push_back(std::move(c));
    ready_.clear();
    for (;;) {
      release();
      const auto now = Clock::now();
      if (got >= min_complete || inflight() == 0 || now >= deadline) {
        got += inner_->reap(out, 0, std::chrono::milliseconds(0));
        break;
      }
      auto until = deadline;
      if (!queue_.empty() && credit_ <= 0) {
        // Time until the bucket holds credit again.
        const auto need = std::chrono::duration<double>((-credit_ + 1) / rate_);
        until = std::min(until, now + std::chrono::duration_cast<Clock::duration>(need));
      }
      if (inner_->inflight() > 0) {
        const auto wait = std::chrono::ceil<std::chrono::milliseconds>(until - now);
        got += inner_->reap(out, std::min(min_complete - got, inner_->inflight()), wait);
      } else {
        std::this_thread::sleep_until(until);
      }
    }
    return got;
  }

  void cancel_all() override {
    for (const ReadRequest& r : queue_) {
      ReadCompletion c;
      c.tag = r.tag;
      c.result = -ECANCELED;
      c.error = "read cancelled before it was issued";
      ready_.push_back(std::move(c));
    }
    queue_.clear();
    inner_->cancel_all();
  }

  size_t inflight() const override { return inner_->inflight() + queue_.size() + ready_.size(); }
  IoStats stats() const override { return inner_->stats(); }
  unsigned set_queue_limit(unsigned n) override { return inner_->set_queue_limit(n); }
  bool direct() const override { return inner_->direct(); }
  IoBuffer alloc(size_t bytes) override { return inner_->alloc(bytes); }

 private:
  // Refills the bucket and hands the inner engine what the credit covers. Credit may go
  // negative by one request, so a request larger than the bucket still passes.
  void release() {
    const auto now = Clock::now();
    credit_ = std::min(burst_, credit_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
    std::vector<ReadRequest> batch;
    while (!queue_.empty() && credit_ > 0) {
      credit_ -= queue_.front().length;
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    if (!batch.empty()) inner_->submit(batch);
  }

  std::unique_ptr<IoEngine> inner_;
  double rate_;
  double burst_;
  double credit_ = 0;
  Clock::time_point last_;
  std::deque<ReadRequest> queue_;
  std::vector<ReadCompletion> ready_;
};

}  // namespace

std::unique_ptr<IoEngine> make_throttled_engine(std::unique_ptr<IoEngine> inner,
                                                double bytes_per_s) {
  if (!inner) throw_error(ErrorCode::kInvalidArgument, "make_throttled_engine: null inner engine");
  if (!(bytes_per_s > 0)) {
    throw_error(ErrorCode::kInvalidArgument,
                "throttle rate must be > 0 bytes/s, got " + std::to_string(bytes_per_s));
  }
  return std::make_unique<ThrottledEngine>(std::move(inner), bytes_per_s);
}

std::unique_ptr<IoEngine> limit_io_rate(std::unique_ptr<IoEngine> engine, const IoOptions& options) {
  if (options.read_latency_s > 0)
    engine = make_latency_engine(std::move(engine), options.read_latency_s, options.queue_depth);
  if (options.limit_bytes_per_s > 0) return make_throttled_engine(std::move(engine), options.limit_bytes_per_s);
  return engine;
}

}  // namespace stoker::internal
