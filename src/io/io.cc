// Engine selection, IoBuffer, and aligned range planning.
#include "stoker/io.h"

#include <liburing.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "io/io_util.h"
#include "io/pread_engine.h"
#include "io/throttled_engine.h"
#include "io/uring_engine.h"
#include "stoker/error.h"
#include "util/log.h"
#include "util/enum_names.h"

namespace stoker {

IoEngine::~IoEngine() = default;

unsigned IoEngine::set_queue_limit(unsigned) { return 0; }

namespace {
// "io_uring" is accepted as well as "uring".
constexpr internal::EnumName<IoEngineKind> kIoEngineNames[] = {{IoEngineKind::kAuto, "auto"},
                                                               {IoEngineKind::kUring, "uring"},
                                                               {IoEngineKind::kPread, "pread"},
                                                               {IoEngineKind::kUring, "io_uring"}};
}  // namespace

const char* io_engine_kind_name(IoEngineKind kind) noexcept { return internal::enum_name(kIoEngineNames, kind, "?"); }
IoEngineKind io_engine_kind_from_name(const std::string& name) {
  return internal::enum_from_name(kIoEngineNames, name, "IO engine");
}

// ---- IoBuffer ------------------------------------------------------------------------

IoBuffer::IoBuffer(IoBuffer&& o) noexcept
    : data_(o.data_), size_(o.size_), slab_(std::move(o.slab_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

IoBuffer& IoBuffer::operator=(IoBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    slab_ = std::move(o.slab_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

IoBuffer::~IoBuffer() { reset(); }

void IoBuffer::reset() noexcept {
  if (data_) {
    if (slab_) {
      slab_->release(data_, size_);
    } else {
      std::free(data_);
    }
  }
  data_ = nullptr;
  size_ = 0;
  slab_.reset();
}

IoBuffer IoBuffer::aligned(size_t bytes, size_t alignment) {
  const size_t size = internal::round_up(bytes == 0 ? 1 : bytes, alignment);
  void* p = nullptr;
  if (::posix_memalign(&p, alignment, size) != 0) {
    throw_error(ErrorCode::kResourceExhausted,
                "cannot allocate an aligned IO buffer of " + std::to_string(size) + " bytes");
  }
  IoBuffer b;
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = size;
  return b;
}

// ---- engine selection ----------------------------------------------------------------

static void validate(const IoOptions& o) {
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    throw_error(ErrorCode::kInvalidArgument,
                "IoOptions::queue_depth must be 1..4096, got " + std::to_string(o.queue_depth));
  }
  if (o.pread_threads < 1 || o.pread_threads > 256) {
    throw_error(ErrorCode::kInvalidArgument, "IoOptions::pread_threads must be 1..256, got " +
                                                 std::to_string(o.pread_threads));
  }
  if (o.slab_bytes > (1ull << 30)) {
    throw_error(ErrorCode::kInvalidArgument,
                "IoOptions::slab_bytes must be at most 1 GiB (one registered buffer), got " +
                    std::to_string(o.slab_bytes));
  }
  if (!(o.limit_bytes_per_s >= 0) || o.limit_bytes_per_s == HUGE_VAL) {
    throw_error(ErrorCode::kInvalidArgument, "IoOptions::limit_bytes_per_s must be >= 0 and finite, got " +
                                                 std::to_string(o.limit_bytes_per_s));
  }
  if (!(o.read_latency_s >= 0) || o.read_latency_s > 60)
    throw_error(ErrorCode::kInvalidArgument,
                "IoOptions::read_latency_s must be in [0, 60], got " + std::to_string(o.read_latency_s));
}

static std::unique_ptr<IoEngine> make_unlimited_engine(const IoOptions& options) {
  IoEngineKind kind = options.engine;
  if (kind == IoEngineKind::kAuto) {
    if (const char* env = std::getenv("STOKER_IO"); env && *env) {
      try {
        kind = io_engine_kind_from_name(env);
      } catch (const Error& e) {
        throw_error(ErrorCode::kInvalidArgument, std::string("STOKER_IO: ") + e.what());
      }
    }
  }
  if (kind == IoEngineKind::kPread) return internal::make_pread_engine(options, "");

  int err = 0;
  auto e = internal::make_uring_engine(options, &err);
  if (e) return e;
  if (kind == IoEngineKind::kUring) {
    throw_error(ErrorCode::kUnavailable,
                internal::uring_refusal_text(err, options.queue_depth, ""));
  }
  const std::string reason = internal::uring_refusal_text(
      err, options.queue_depth,
      "the pread engine (" + std::to_string(options.pread_threads) + " threads)");
  internal::log_warn_once("uring", reason);
  return internal::make_pread_engine(options, reason);
}

std::unique_ptr<IoEngine> make_io_engine(const IoOptions& options) {
  validate(options);
  return internal::limit_io_rate(make_unlimited_engine(options), options);
}

std::string io_uring_unavailable_reason() {
  io_uring ring;
  int r = io_uring_queue_init(4, &ring, 0);
  if (r < 0) return internal::uring_refusal_text(-r, 4, "the pread engine");
  io_uring_queue_exit(&ring);
  return "";
}

// ---- planning ------------------------------------------------------------------------

static void check_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    throw_error(ErrorCode::kInvalidArgument,
                "alignment must be a power of two, got " + std::to_string(alignment));
  }
}

AlignedRange align_range(uint64_t offset, uint64_t len, uint64_t file_size, uint32_t alignment) {
  check_alignment(alignment);
  if (offset > file_size || len > file_size - offset) {
    throw_error(ErrorCode::kInvalidArgument,
                "record [" + std::to_string(offset) + ", +" + std::to_string(len) +
                    ") does not fit in a file of " + std::to_string(file_size) + " bytes");
  }
  const uint64_t a = alignment;
  const uint64_t start = offset & ~(a - 1);
  uint64_t end = internal::round_up(offset + len, a);
  end = std::min(end, internal::round_up(file_size, a));
  if (end == start && len == 0) end = start;  // empty record: nothing to read
  return AlignedRange{start, end - start, offset - start};
}

ReadPlan plan_reads(std::span<const RecordRange> records, const PlanOptions& options) {
  check_alignment(options.alignment);
  ReadPlan plan;
  plan.records.resize(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const RecordRange& rec = records[i];
    const AlignedRange ar = align_range(rec.offset, rec.length, rec.file_size, options.alignment);
    if (!plan.reads.empty() && options.max_request_bytes > 0) {
      ReadPlan::Read& cur = plan.reads.back();
      const uint64_t cur_end = cur.offset + cur.length;
      const uint64_t new_end = std::max(cur_end, ar.offset + ar.length);
      if (cur.file == rec.file && ar.offset >= cur.offset &&
          ar.offset <= cur_end + options.max_gap_bytes &&
          new_end - cur.offset <= options.max_request_bytes) {
        cur.length = new_end - cur.offset;
        ++cur.record_count;
        plan.records[i] = {static_cast<uint32_t>(plan.reads.size() - 1),
                           rec.offset - cur.offset};
        plan.max_read_bytes = std::max(plan.max_read_bytes, cur.length);
        continue;
      }
    }
    plan.reads.push_back({rec.file, ar.offset, ar.length, static_cast<uint32_t>(i), 1});
    plan.records[i] = {static_cast<uint32_t>(plan.reads.size() - 1), ar.skip};
    plan.max_read_bytes = std::max(plan.max_read_bytes, ar.length);
  }
  return plan;
}

}  // namespace stoker
