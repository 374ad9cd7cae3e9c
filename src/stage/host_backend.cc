// The host copy backend: memcpy on a HostStream, generation-counting host events.
//
// An event's state is shared with the tasks that will complete or wait on it, so a task
// still queued on some consumer's HostStream never touches a destroyed event.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "stage/copy_backend.h"
#include "stoker/error.h"
#include "util/convert.h"

namespace stoker::internal {
namespace {

struct HostEventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // generations handed out by record
  uint64_t completed = 0;  // highest generation completed

  uint64_t mark() {
    std::lock_guard<std::mutex> lock(mu);
    return ++recorded;
  }
  uint64_t current() {
    std::lock_guard<std::mutex> lock(mu);
    return recorded;
  }
  void complete(uint64_t g) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (g > completed) completed = g;
    }
    cv.notify_all();
  }
  void wait_for(uint64_t g) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return completed >= g; });
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu);
    return completed >= recorded;
  }
};

class HostEvent final : public Event {
 public:
  std::shared_ptr<HostEventState> st = std::make_shared<HostEventState>();
};

HostEventState& state_of(Event& e) { return *static_cast<HostEvent&>(e).st; }
std::shared_ptr<HostEventState> shared_of(Event& e) { return static_cast<HostEvent&>(e).st; }

// Runs `fn` on `stream` (a HostStream*), or right now when it is null.
template <class F>
void on_stream(void* stream, F&& fn) {
  if (stream) static_cast<HostStream*>(stream)->enqueue(std::forward<F>(fn));
  else fn();
}

class HostBackend final : public CopyBackend {
 public:
  StageBackend kind() const noexcept override { return StageBackend::kHost; }
  int device() const noexcept override { return -1; }

  void* alloc_slot(size_t bytes) override {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0)
      throw_error(ErrorCode::kResourceExhausted,
                  "stage: cannot allocate a device slot of " + std::to_string(bytes) + " bytes (host backend)");
    return p;
  }
  void free_slot(void* p) noexcept override { std::free(p); }
  std::unique_ptr<Event> make_event() override { return std::make_unique<HostEvent>(); }

  void copy_wait(Event& e) override {
    auto st = shared_of(e);
    const uint64_t g = st->current();
    copy_.enqueue([st, g] { st->wait_for(g); });
  }
  void copy_async(void* dst, const void* src, size_t bytes) override {
    copy_.enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void copy_pause(double seconds) override {
    copy_.enqueue([seconds] { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); });
  }
  void copy_record(Event& e) override {
    auto st = shared_of(e);
    const uint64_t g = st->mark();
    copy_.enqueue([st, g] { st->complete(g); });
  }

  void stream_wait(void* stream, Event& e) override {
    auto st = shared_of(e);
    const uint64_t g = st->current();
    on_stream(stream, [st, g] { st->wait_for(g); });
  }
  void stream_record(void* stream, Event& e) override {
    auto st = shared_of(e);
    const uint64_t g = st->mark();
    on_stream(stream, [st, g] { st->complete(g); });
  }

  bool query(Event& e) override { return state_of(e).done(); }
  void sync(Event& e) override {
    HostEventState& st = state_of(e);
    st.wait_for(st.current());
  }

  void convert_image(const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type, const float mean[3],
                     const float std[3], void* dst, void* stream) override {
    const float m[3] = {mean[0], mean[1], mean[2]}, s[3] = {std[0], std[1], std[2]};
    // Argument checks happen now, on the caller's thread, not inside the queued task.
    internal::check_image_output_type(dst_type);
    on_stream(stream, [=] {
      const float mm[3] = {m[0], m[1], m[2]}, ss[3] = {s[0], s[1], s[2]};
      internal::convert_image_cpu(src, n, h, w, dst_type, mm, ss, dst);
    });
  }
  void widen_tokens(const void* src, ElemType src_type, int64_t count, int64_t* dst, void* stream) override {
    internal::check_token_type(src_type);
    on_stream(stream, [=] { internal::widen_tokens_cpu(src, src_type, count, dst); });
  }

 private:
  HostStream copy_{"stoker-h2d-copy"};
};

}  // namespace

std::unique_ptr<CopyBackend> make_host_backend() { return std::make_unique<HostBackend>(); }

}  // namespace stoker::internal
