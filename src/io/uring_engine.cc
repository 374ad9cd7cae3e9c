#include "io/uring_engine.h"

#include <liburing.h>
#include <sys/resource.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "io/io_util.h"
#include "stoker/error.h"
#include "util/log.h"

namespace stoker::internal {
namespace {

constexpr uint64_t kCancelUserData = ~0ull;
constexpr unsigned kMaxRegisteredFiles = 4096;

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

/// Owns an io_uring instance; not live is the null state. Exiting the ring also
/// unregisters its files and buffers.
class UringRing {
 public:
  UringRing() noexcept { std::memset(&ring_, 0, sizeof ring_); }
  UringRing(const UringRing&) = delete;
  UringRing& operator=(const UringRing&) = delete;
  UringRing(UringRing&& o) noexcept : ring_(o.ring_), live_(o.live_) { o.live_ = false; }
  UringRing& operator=(UringRing&& o) noexcept {
    if (this != &o) {
      reset();
      ring_ = o.ring_;
      live_ = o.live_;
      o.live_ = false;
    }
    return *this;
  }
  ~UringRing() { reset(); }

  /// Returns 0 or -errno.
  int init(unsigned entries) {
    reset();
    io_uring_params p{};
    p.flags = IORING_SETUP_COOP_TASKRUN;
    int r = io_uring_queue_init_params(entries, &ring_, &p);
    if (r == -EINVAL) {  // kernels before 5.19 lack COOP_TASKRUN
      std::memset(&p, 0, sizeof p);
      r = io_uring_queue_init_params(entries, &ring_, &p);
    }
    if (r < 0) return r;
    live_ = true;
    return 0;
  }
  void reset() noexcept {
    if (live_) io_uring_queue_exit(&ring_);
    live_ = false;
  }
  io_uring* get() noexcept { return &ring_; }
  explicit operator bool() const noexcept { return live_; }

 private:
  io_uring ring_;
  bool live_ = false;
};

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoOptions& o) : opts_(o), files_(o.direct) {}

  /// Returns 0 or -errno of io_uring_queue_init.
  int init() {
    if (opts_.slab_bytes) slab_ = std::make_shared<SlabAllocator>(opts_.slab_bytes);
    ops_.resize(opts_.queue_depth);
    limit_ = opts_.queue_depth;
    for (unsigned i = opts_.queue_depth; i-- > 0;) free_ops_.push_back(i);
    int r = ring_.init(opts_.queue_depth);
    if (r < 0) return r;
    // No io_uring_register_ring_fd: the registered ring index is per task, so a ring
    // registered by the constructing thread fails with EINVAL when the loader's
    // stoker-io thread (or the next epoch's) submits.

    rlimit nofile{};
    unsigned slots = kMaxRegisteredFiles;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < slots) {
      slots = static_cast<unsigned>(nofile.rlim_cur);
    }
    r = io_uring_register_files_sparse(ring_.get(), slots);
    if (r == 0) {
      file_slots_ = slots;
    } else {
      files_.add_reason("io_uring file registration refused (" + errno_text(-r) +
                        "); reads pass plain descriptors instead");
    }
    if (slab_) {
      iovec iov{slab_->base(), slab_->size()};
      r = io_uring_register_buffers(ring_.get(), &iov, 1);
      if (r == 0) {
        fixed_buffers_ = true;
      } else {
        rlimit ml{};
        getrlimit(RLIMIT_MEMLOCK, &ml);
        std::string limit = ml.rlim_cur == RLIM_INFINITY
                                ? std::string("unlimited")
                                : std::to_string(ml.rlim_cur >> 10) + " KiB";
        const std::string msg =
            "io_uring fixed buffers refused: registering the " +
            std::to_string(slab_->size() >> 20) + " MiB IO slab failed: " + errno_text(-r) +
            (r == -ENOMEM ? " -- RLIMIT_MEMLOCK (" + limit + ") is below the slab size" : "") +
            "; reads into the slab use plain IORING_OP_READ instead; to enable fixed "
            "buffers raise the memlock limit (ulimit -l unlimited, docker --ulimit "
            "memlock=-1) or lower IoOptions::slab_bytes";
        files_.add_reason(msg);
        log_warn_once("fixedbuf", msg);
      }
    }
    return 0;
  }

  ~UringEngine() override {
    // Every read the kernel holds may still write into a caller's buffer or the slab:
    // cancel, then wait for each completion before the members (ring first, then the
    // files, then the slab) go away.
    try {
      cancel_all();
    } catch (...) {
    }
    while (in_kernel_ > 0 || cancels_in_kernel_ > 0) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{1, 0};
      int r = io_uring_wait_cqe_timeout(ring_.get(), &cqe, &ts);
      if (r == -ETIME || r == -EINTR) continue;
      if (r < 0) break;  // the ring is unusable; io_uring_queue_exit waits for the rest
      try {
        std::vector<ReadCompletion> sink;
        drain(sink);
        submit_prepared();
      } catch (...) {
        break;
      }
    }
  }

  uint32_t add_file(const std::string& path) override {
    const uint32_t id = files_.add(path);
    OpenFile& f = files_.at(id);
    // Slot `id` holds our own descriptor, which stays open (and so cannot be reused for
    // another file) until remove_file, which clears the slot before closing it (no read
    // of the file is in flight then): a registered slot never points at a file it was
    // not registered for. Unaligned requests of a direct file use its buffered
    // descriptor, unregistered.
    if (id < file_slots_) {
      int fd = f.fd.get();
      int r = io_uring_register_files_update(ring_.get(), id, &fd, 1);
      if (r == 1) {
        if (registered_.size() <= id) registered_.resize(id + 1, false);
        registered_[id] = true;
      }
    }
    return id;
  }

  void remove_file(uint32_t file) override {
    files_.at(file);  // validates the id
    if (file < registered_.size() && registered_[file]) {
      int none = -1;
      const int r = io_uring_register_files_update(ring_.get(), file, &none, 1);
      if (r < 0) throw errno_error("clearing io_uring file slot " + std::to_string(file), -r);
      registered_[file] = false;
    }
    files_.remove(file);
  }

  uint64_t file_size(uint32_t file) const override { return files_.at(file).size; }
  const std::string& file_path(uint32_t file) const override { return files_.at(file).path; }

  void submit(std::span<const ReadRequest> reqs) override {
    for (const ReadRequest& r : reqs) {
      files_.at(r.file);  // validates the id
      if (r.buf == nullptr && r.length > 0) {
        throw_error(ErrorCode::kInvalidArgument, "read request with a null buffer for " +
                                                     files_.at(r.file).path);
      }
    }
    for (const ReadRequest& r : reqs) queued_.push_back(r);
    pump();
  }

  unsigned set_queue_limit(unsigned n) override {
    limit_ = std::clamp(n, 1u, opts_.queue_depth);
    pump();
    return limit_;
  }

  size_t reap(std::vector<ReadCompletion>& out, size_t min_complete,
              std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const size_t start = out.size();
    for (auto& c : ready_) out.push_back(std::move(c));
    ready_.clear();
    for (;;) {
      drain(out);
      pump();
      for (auto& c : ready_) out.push_back(std::move(c));
      ready_.clear();
      if (out.size() - start >= min_complete || in_kernel_ == 0) break;
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) break;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      __kernel_timespec ts{ns / 1000000000, ns % 1000000000};
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe_timeout(ring_.get(), &cqe, &ts);
      if (r < 0 && r != -ETIME && r != -EINTR && r != -EAGAIN) {
        throw errno_error("io_uring_wait_cqe", -r);
      }
    }
    busy_.update(inflight());
    return out.size() - start;
  }

  void cancel_all() override {
    for (const ReadRequest& r : queued_) finish_cancelled(r.tag);
    queued_.clear();
    for (uint32_t i : resubmit_) {
      finish_cancelled(ops_[i].req.tag);
      free_ops_.push_back(i);
    }
    resubmit_.clear();
    for (uint32_t i = 0; i < ops_.size(); ++i) {
      if (!ops_[i].in_kernel || ops_[i].cancel_sent) continue;
      io_uring_sqe* sqe = get_sqe();
      if (!sqe) break;  // the ring is broken; the destructor still waits
      io_uring_prep_cancel64(sqe, i, 0);
      io_uring_sqe_set_data64(sqe, kCancelUserData);
      ops_[i].cancel_sent = true;
      ++cancels_in_kernel_;
      ++prepared_;
    }
    submit_prepared();
    busy_.update(inflight());
  }

  size_t inflight() const override {
    return queued_.size() + resubmit_.size() + in_kernel_ + ready_.size();
  }

  IoStats stats() const override {
    IoStats s = stats_;
    s.busy_s = busy_.seconds();
    s.queue_full_s = waiting_.seconds();
    s.engine = "uring";
    s.direct = files_.direct();
    s.fixed_buffers = fixed_buffers_;
    s.registered_files = file_slots_ > 0;
    s.queue_depth = opts_.queue_depth;
    s.queue_limit = limit_;
    s.fallback_reason = files_.reasons();
    return s;
  }

  bool direct() const override { return files_.direct(); }

  IoBuffer alloc(size_t bytes) override { return alloc_from_slab(slab_, bytes); }

 private:
  struct Op {
    ReadRequest req;
    uint64_t done = 0;
    int fd = -1;
    bool fixed_file = false;
    bool direct_fd = false;
    bool in_kernel = false;
    bool cancel_sent = false;
  };

  io_uring_sqe* get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (!sqe) {
      submit_prepared();
      sqe = io_uring_get_sqe(ring_.get());
    }
    return sqe;
  }

  void submit_prepared() {
    while (prepared_ > 0) {
      int r = io_uring_submit(ring_.get());
      if (r >= 0) {
        prepared_ -= std::min<unsigned>(prepared_, static_cast<unsigned>(r));
        if (r == 0) break;
      } else if (r == -EINTR) {
        continue;
      } else if (r == -EAGAIN || r == -EBUSY) {
        break;  // the kernel is short of resources: the SQEs stay queued for the next call
      } else {
        throw errno_error("io_uring_submit", -r);
      }
    }
  }

  // Starts (or restarts) op i: the rest of its range into the rest of its buffer.
  void prep(uint32_t i, io_uring_sqe* sqe) {
    Op& op = ops_[i];
    uint8_t* buf = static_cast<uint8_t*>(op.req.buf) + op.done;
    const uint64_t off = op.req.offset + op.done;
    const unsigned len = static_cast<unsigned>(op.req.length - op.done);
    const int fd = op.fixed_file ? static_cast<int>(op.req.file) : op.fd;
    if (fixed_buffers_ && slab_->contains(buf, len)) {
      io_uring_prep_read_fixed(sqe, fd, buf, len, off, 0);
      ++stats_.fixed_reads;
    } else {
      io_uring_prep_read(sqe, fd, buf, len, off);
    }
    if (op.fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, i);
    op.in_kernel = true;
    op.cancel_sent = false;
    ++in_kernel_;
    ++prepared_;
  }

  // Moves retries and queued requests into free slots and submits them in one call.
  void pump() {
    for (;;) {
      if (!resubmit_.empty()) {
        io_uring_sqe* sqe = get_sqe();
        if (!sqe) break;
        const uint32_t i = resubmit_.front();
        resubmit_.pop_front();
        prep(i, sqe);
        continue;
      }
      if (queued_.empty() || free_ops_.empty() || in_kernel_ >= limit_) break;
      const ReadRequest r = queued_.front();
      if (r.length == 0) {
        queued_.pop_front();
        record(r, 0, 0, ready_);
        continue;
      }
      bool unaligned = false;
      const int fd = files_.fd_for(r, &unaligned);
      if (fd < 0) {
        queued_.pop_front();
        record(r, 0, fd, ready_);
        continue;
      }
      io_uring_sqe* sqe = get_sqe();
      if (!sqe) break;
      queued_.pop_front();
      const uint32_t i = free_ops_.back();
      free_ops_.pop_back();
      Op& op = ops_[i];
      op = Op{};
      op.req = r;
      if (unaligned) ++stats_.unaligned_reads;
      op.fd = fd;
      op.direct_fd = files_.at(r.file).direct && !unaligned;
      op.fixed_file = !unaligned && r.file < registered_.size() && registered_[r.file];
      prep(i, sqe);
    }
    stats_.max_inflight = std::max<unsigned>(stats_.max_inflight, in_kernel_);
    submit_prepared();
    busy_.update(inflight());
    waiting_.update(queued_.size());
  }

  void drain(std::vector<ReadCompletion>& out) {
    io_uring_cqe* cqes[64];
    for (;;) {
      unsigned n = io_uring_peek_batch_cqe(ring_.get(), cqes, 64);
      if (n == 0) break;
      for (unsigned k = 0; k < n; ++k) handle(cqes[k], out);
      io_uring_cq_advance(ring_.get(), n);
    }
  }

  void handle(io_uring_cqe* cqe, std::vector<ReadCompletion>& out) {
    const uint64_t ud = io_uring_cqe_get_data64(cqe);
    if (ud == kCancelUserData) {
      --cancels_in_kernel_;
      return;
    }
    const uint32_t i = static_cast<uint32_t>(ud);
    Op& op = ops_[i];
    op.in_kernel = false;
    --in_kernel_;
    const int res = cqe->res;
    if (res == -EINTR || res == -EAGAIN) {
      if (op.cancel_sent) return complete(i, -ECANCELED, out);
      ++stats_.retries;
      resubmit_.push_back(i);
      return;
    }
    if (res < 0) return complete(i, res, out);
    if (res == 0) return complete(i, static_cast<int64_t>(op.done), out);  // EOF
    op.done += static_cast<uint64_t>(res);
    if (op.done >= op.req.length) return complete(i, static_cast<int64_t>(op.done), out);
    // A direct read that stops off a block boundary has hit EOF: the rest cannot be read
    // direct (and does not exist).
    if (op.direct_fd && !is_aligned(op.done, kDirectAlignment)) {
      return complete(i, static_cast<int64_t>(op.done), out);
    }
    if (op.cancel_sent) return complete(i, static_cast<int64_t>(op.done), out);
    ++stats_.short_reads;
    resubmit_.push_back(i);
  }

  void complete(uint32_t i, int64_t result, std::vector<ReadCompletion>& out) {
    record(ops_[i].req, ops_[i].done, result, out);
    free_ops_.push_back(i);
  }

  void record(const ReadRequest& r, uint64_t done, int64_t result,
              std::vector<ReadCompletion>& out) {
    ReadCompletion c;
    c.tag = r.tag;
    c.result = result;
    ++stats_.requests;
    if (result >= 0) {
      stats_.bytes += static_cast<uint64_t>(result);
    } else {
      if (result == -ECANCELED) {
        ++stats_.cancelled;
      } else {
        ++stats_.errors;
      }
      c.error = read_error_text(files_.at(r.file).path, r.offset + done, r.length - done,
                                static_cast<int>(-result));
    }
    out.push_back(std::move(c));
  }

  void finish_cancelled(uint64_t tag) {
    ReadCompletion c;
    c.tag = tag;
    c.result = -ECANCELED;
    c.error = "read cancelled before it was issued";
    ++stats_.requests;
    ++stats_.cancelled;
    ready_.push_back(std::move(c));
  }

  IoOptions opts_;
  // Member order matters: the ring (declared last) is destroyed first, which
  // unregisters files and buffers; then descriptors close; then the slab is unmapped
  // (once no IoBuffer holds it).
  std::shared_ptr<SlabAllocator> slab_;
  FileTable files_;
  std::vector<bool> registered_;  // file id -> its registered slot holds our fd
  unsigned file_slots_ = 0;
  bool fixed_buffers_ = false;
  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
  std::deque<ReadRequest> queued_;
  std::deque<uint32_t> resubmit_;
  std::vector<ReadCompletion> ready_;
  unsigned in_kernel_ = 0;
  unsigned limit_ = 0;  // reads in the kernel at most (set_queue_limit; queue_depth until then)
  unsigned cancels_in_kernel_ = 0;  // cancel and nop SQEs whose CQEs are still due
  unsigned prepared_ = 0;           // SQEs prepared, not yet submitted
  IoStats stats_;
  BusyClock busy_;
  BusyClock waiting_;  // reads queued here, waiting for room in the kernel's queue
  UringRing ring_;
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(const IoOptions& options, int* err) {
  auto e = std::make_unique<UringEngine>(options);
  int r = e->init();
  if (r < 0) {
    *err = -r;
    return nullptr;
  }
  *err = 0;
  return e;
}

std::string uring_refusal_text(int err, unsigned entries, const std::string& instead) {
  std::string by;
  std::string fix;
  switch (err) {
    case EPERM:
      by = "a seccomp filter (Docker's and Podman's default profiles block io_uring) or "
           "the sysctl kernel.io_uring_disabled";
      fix = "run the container with a seccomp profile that allows io_uring_setup, "
            "io_uring_enter and io_uring_register (e.g. --security-opt seccomp=unconfined) "
            "and set kernel.io_uring_disabled=0";
      break;
    case ENOSYS:
      by = "the kernel (built without io_uring, or older than 5.6) or a seccomp filter "
           "that answers ENOSYS";
      fix = "use Linux 5.10 or newer with CONFIG_IO_URING=y, and a seccomp profile that "
            "allows the io_uring syscalls";
      break;
    case ENOMEM: {
      rlimit ml{};
      getrlimit(RLIMIT_MEMLOCK, &ml);
      by = "RLIMIT_MEMLOCK (" +
           (ml.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                         : std::to_string(ml.rlim_cur >> 10) + " KiB") +
           "), too low for the ring on kernels before 5.12, or memory pressure";
      fix = "raise the memlock limit (ulimit -l unlimited; docker --ulimit memlock=-1) or "
            "lower IoOptions::queue_depth";
      break;
    }
    default:
      by = "the kernel";
      fix = "check dmesg and the kernel's io_uring support";
      break;
  }
  std::string s = "io_uring refused: io_uring_queue_init(" + std::to_string(entries) +
                  ") failed: " + errno_text(err) + ", refused by " + by;
  s += instead.empty() ? std::string("; no fallback was allowed (io_uring was forced)")
                       : "; using " + instead + " instead";
  s += "; to enable the io_uring fast path: " + fix;
  return s;
}

}  // namespace stoker::internal
