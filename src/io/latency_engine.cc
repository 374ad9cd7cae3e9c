// make_latency_engine (latency_engine.h): reads go to the inner engine at once; each
// completion is held until its read's issue time plus the latency.
#include "io/latency_engine.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>

#include "io/io_util.h"
#include "stoker/error.h"

namespace stoker::internal {
namespace {

using Clock = std::chrono::steady_clock;

class LatencyEngine final : public IoEngine {
 public:
  LatencyEngine(std::unique_ptr<IoEngine> inner, double latency_s, unsigned depth)
      : inner_(std::move(inner)),
        latency_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(latency_s))),
        depth_(depth),
        limit_(depth) {}

  uint32_t add_file(const std::string& path) override { return inner_->add_file(path); }
  void remove_file(uint32_t f) override { inner_->remove_file(f); }
  uint64_t file_size(uint32_t f) const override { return inner_->file_size(f); }
  const std::string& file_path(uint32_t f) const override { return inner_->file_path(f); }

  void submit(std::span<const ReadRequest> reqs) override {
    for (const ReadRequest& r : reqs) inner_->file_path(r.file);  // validates ids
    for (const ReadRequest& r : reqs) queue_.push_back(r);
    issue();
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete, std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    size_t got = 0;
    for (;;) {
      collect(0, std::chrono::milliseconds(0));
      const auto now = Clock::now();
      // Hand back what is due (held_ is in completion order; dues differ by issue time).
      for (auto it = held_.begin(); it != held_.end();) {
        if (it->due > now && it->c.result != -ECANCELED) {
          ++it;
          continue;
        }
        due_.erase(it->c.tag);
        out.push_back(std::move(it->c));
        it = held_.erase(it);
        ++got;
      }
      issue();
      if (got >= min_complete || inflight() == 0 || now >= deadline) break;
      auto until = deadline;
      for (const Held& h : held_) until = std::min(until, h.due);
      if (inner_->inflight() > 0) {
        collect(1, std::max(std::chrono::ceil<std::chrono::milliseconds>(until - now), std::chrono::milliseconds(0)));
      } else {
        std::this_thread::sleep_until(until);
      }
    }
    return got;
  }

  void cancel_all() override {
    const auto now = Clock::now();
    for (const ReadRequest& r : queue_) {
      held_.push_back(Held{now, ReadCompletion{r.tag, -ECANCELED, "read cancelled before it was issued"}});
      due_.emplace(r.tag, now);
    }
    queue_.clear();
    waiting_.update(0);
    inner_->cancel_all();
  }

  size_t inflight() const override { return queue_.size() + due_.size(); }
  IoStats stats() const override {
    IoStats s = inner_->stats();
    s.queue_depth = depth_;
    s.queue_limit = limit_;
    s.queue_full_s = waiting_.seconds();
    s.max_inflight = max_issued_;
    return s;
  }
  unsigned set_queue_limit(unsigned n) override {
    limit_ = std::clamp(n, 1u, depth_);
    issue();
    return limit_;
  }
  bool direct() const override { return inner_->direct(); }
  IoBuffer alloc(size_t bytes) override { return inner_->alloc(bytes); }

 private:
  struct Held {
    Clock::time_point due;
    ReadCompletion c;
  };

  // The inner engine's completions (at least `min` when that many are in it) join held_.
  void collect(size_t min, std::chrono::milliseconds wait) {
    std::vector<ReadCompletion> done;
    inner_->reap(done, min, wait);
    for (auto& c : done) held_.push_back(Held{due_.at(c.tag), std::move(c)});
  }

  // Issues queued reads while fewer than the limit are out (issued, not handed back).
  void issue() {
    std::vector<ReadRequest> batch;
    const auto due = Clock::now() + latency_;
    while (!queue_.empty() && due_.size() < limit_) {
      batch.push_back(queue_.front());
      due_.emplace(queue_.front().tag, due);
      queue_.pop_front();
    }
    max_issued_ = std::max<unsigned>(max_issued_, static_cast<unsigned>(due_.size()));
    if (!batch.empty()) inner_->submit(batch);
    waiting_.update(queue_.size());
  }

  std::unique_ptr<IoEngine> inner_;
  Clock::duration latency_;
  unsigned depth_, limit_;
  std::deque<ReadRequest> queue_;                        // not issued yet
  std::unordered_map<uint64_t, Clock::time_point> due_;  // issued, not handed back: tag -> due
  std::vector<Held> held_;                               // completed by the inner engine, not due
  BusyClock waiting_;  // reads queued, waiting for the limit
  unsigned max_issued_ = 0;
};

}  // namespace

std::unique_ptr<IoEngine> make_latency_engine(std::unique_ptr<IoEngine> inner, double latency_s, unsigned queue_depth) {
  if (!inner) throw_error(ErrorCode::kInvalidArgument, "make_latency_engine: null inner engine");
  if (!(latency_s > 0) || latency_s > 60)
    throw_error(ErrorCode::kInvalidArgument, "read latency must be in (0, 60] s, got " + std::to_string(latency_s));
  return std::make_unique<LatencyEngine>(std::move(inner), latency_s, std::max(1u, queue_depth));
}

}  // namespace stoker::internal
