// make_faulty_engine (see fault_engine.h): the fault plan drawn per request, and the
// wrapper engine that applies it.
#include <cerrno>
#include <deque>
#include <thread>
#include <unordered_map>

#include "io/io_util.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "util/fault_engine.h"

namespace stoker {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t request_hash(const FaultPlan& plan, const ReadRequest& r, uint64_t salt) {
  uint64_t h = splitmix64(plan.seed ^ salt);
  h = splitmix64(h ^ r.file);
  h = splitmix64(h ^ r.offset);
  h = splitmix64(h ^ r.length);
  return splitmix64(h ^ r.tag);
}

using Clock = std::chrono::steady_clock;

class FaultyEngine final : public IoEngine {
 public:
  FaultyEngine(std::unique_ptr<IoEngine> inner, FaultPlan plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {
    const double sum = plan_.fail_rate + plan_.short_rate + plan_.delay_rate + plan_.corrupt_rate;
    if (plan_.fail_rate < 0 || plan_.short_rate < 0 || plan_.delay_rate < 0 ||
        plan_.corrupt_rate < 0 || sum > 1.0 + 1e-9) {
      throw_error(ErrorCode::kInvalidArgument,
                  "FaultPlan rates must be >= 0 and sum to at most 1, sum is " +
                      std::to_string(sum));
    }
  }

  uint32_t add_file(const std::string& path) override { return inner_->add_file(path); }
  void remove_file(uint32_t f) override { inner_->remove_file(f); }
  uint64_t file_size(uint32_t f) const override { return inner_->file_size(f); }
  const std::string& file_path(uint32_t f) const override { return inner_->file_path(f); }

  void submit(std::span<const ReadRequest> reqs) override {
    std::vector<ReadRequest> pass;
    pass.reserve(reqs.size());
    for (const ReadRequest& r : reqs) inner_->file_path(r.file);  // validates ids
    for (const ReadRequest& r : reqs) {
      const FaultKind k = fault_for(plan_, r);
      if (k == FaultKind::kFail) {
        ReadCompletion c;
        c.tag = r.tag;
        c.result = -EIO;
        c.error = internal::read_error_text(inner_->file_path(r.file), r.offset, r.length, EIO) +
                  " [injected fault]";
        ready_.push_back(std::move(c));
        continue;
      }
      const uint64_t id = next_id_++;
      pending_.emplace(id, Pending{r, k});
      ReadRequest fwd = r;
      fwd.tag = id;
      pass.push_back(fwd);
    }
    if (!pass.empty()) inner_->submit(pass);
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete,
              std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    size_t got = 0;
    std::vector<ReadCompletion> tmp;
    for (;;) {
      got += take_ready(out);
      if (got >= min_complete) break;
      if (inner_->inflight() == 0 && delayed_.empty()) break;
      auto now = Clock::now();
      if (now >= deadline) break;
      auto until = deadline;
      for (auto& d : delayed_) until = std::min(until, d.due);
      tmp.clear();
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(until - now) +
                        std::chrono::milliseconds(until > now ? 1 : 0);
      inner_->reap(tmp, inner_->inflight() ? 1 : 0, wait);
      if (!inner_->inflight() && tmp.empty() && !delayed_.empty()) {
        std::this_thread::sleep_until(until);
      }
      for (auto& c : tmp) apply(std::move(c));
    }
    return got;
  }

  void cancel_all() override { inner_->cancel_all(); }
  size_t inflight() const override {
    return inner_->inflight() + ready_.size() + delayed_.size();
  }
  IoStats stats() const override { return inner_->stats(); }
  unsigned set_queue_limit(unsigned n) override { return inner_->set_queue_limit(n); }
  bool direct() const override { return inner_->direct(); }
  IoBuffer alloc(size_t bytes) override { return inner_->alloc(bytes); }

 private:
  struct Pending {
    ReadRequest req;
    FaultKind kind;
  };
  struct Delayed {
    Clock::time_point due;
    ReadCompletion c;
  };

  size_t take_ready(std::vector<ReadCompletion>& out) {
    size_t n = ready_.size();
    for (auto& c : ready_) out.push_back(std::move(c));
    ready_.clear();
    const auto now = Clock::now();
    for (auto it = delayed_.begin(); it != delayed_.end();) {
      if (it->due <= now) {
        out.push_back(std::move(it->c));
        it = delayed_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  void apply(ReadCompletion c) {
    auto it = pending_.find(c.tag);
    if (it == pending_.end()) return;  // not ours: cannot happen, the inner engine echoes tags
    const Pending p = it->second;
    pending_.erase(it);
    c.tag = p.req.tag;
    switch (p.kind) {
      case FaultKind::kShort:
        if (c.result > 0) c.result /= 2;
        break;
      case FaultKind::kCorrupt:
        if (c.result > 0) {
          static_cast<uint8_t*>(p.req.buf)[corrupt_index(plan_, p.req,
                                                         static_cast<uint64_t>(c.result))] ^= 0xFF;
        }
        break;
      case FaultKind::kDelay:
        delayed_.push_back({Clock::now() + plan_.delay, std::move(c)});
        return;
      default:
        break;
    }
    ready_.push_back(std::move(c));
  }

  std::unique_ptr<IoEngine> inner_;
  FaultPlan plan_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<ReadCompletion> ready_;
  std::deque<Delayed> delayed_;
};

}  // namespace

const char* fault_kind_name(FaultKind kind) noexcept {
  switch (kind) {
    case FaultKind::kNone: return "none";
    case FaultKind::kFail: return "fail";
    case FaultKind::kShort: return "short";
    case FaultKind::kDelay: return "delay";
    case FaultKind::kCorrupt: return "corrupt";
  }
  return "?";
}

FaultKind fault_for(const FaultPlan& plan, const ReadRequest& req) {
  if (plan.only && !plan.only(req)) return FaultKind::kNone;
  const double u = static_cast<double>(request_hash(plan, req, 1) >> 11) * 0x1.0p-53;
  double edge = plan.fail_rate;
  if (u < edge) return FaultKind::kFail;
  edge += plan.short_rate;
  if (u < edge) return FaultKind::kShort;
  edge += plan.corrupt_rate;
  if (u < edge) return FaultKind::kCorrupt;
  edge += plan.delay_rate;
  if (u < edge) return FaultKind::kDelay;
  return FaultKind::kNone;
}

uint64_t corrupt_index(const FaultPlan& plan, const ReadRequest& req, uint64_t result) {
  return result == 0 ? 0 : request_hash(plan, req, 2) % result;
}

std::unique_ptr<IoEngine> make_faulty_engine(std::unique_ptr<IoEngine> inner, FaultPlan plan) {
  if (!inner) throw_error(ErrorCode::kInvalidArgument, "make_faulty_engine: null inner engine");
  return std::make_unique<FaultyEngine>(std::move(inner), std::move(plan));
}

}  // namespace stoker
