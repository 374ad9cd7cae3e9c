// Staging on the host backend: the ring/slot/event state machine, the consumer contract,
// the conversion references. Runs everywhere (and under TSan): no GPU needed.
#include "stoker/stage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stage/host_stream.h"
#include "util/convert.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::error_code_of;

// The byte at position i of sample j of batch `step` (of epoch `epoch`).
uint8_t pattern(uint64_t epoch, uint64_t step, uint64_t j, uint64_t i) {
  return static_cast<uint8_t>((epoch * 131 + step * 31 + j * 7 + i * 13 + (i >> 8)) & 0xFF);
}

// Synthetic host batches from a small ring, like the Loader's: next() blocks until a
// slot is free; a slot comes back when the last lease on it is dropped. Counts leases.
class RingSource {
 public:
  struct Config {
    uint64_t batches = 40;
    uint64_t batch_size = 4;
    uint64_t last_batch_size = 3;  // a partial final batch
    size_t row_bytes = 4096;
    unsigned host_slots = 3;
    int64_t fail_at_step = -1;     // throw kDataLoss instead of this batch
  };

  explicit RingSource(Config c) : c_(c), ring_(std::make_shared<Ring>()) {
    for (unsigned i = 0; i < c_.host_slots; ++i) {
      ring_->bufs.emplace_back(c_.batch_size * (c_.row_bytes + 8));
      ring_->free.push_back(i);
    }
  }

  StageSource source() {
    return StageSource{[this] { return next(); }, [this](uint64_t e) {
                         epoch_ = e;
                         step_ = 0;
                       }};
  }

  std::optional<Batch> next() {
    if (step_ == c_.batches) return std::nullopt;
    if (static_cast<int64_t>(step_) == c_.fail_at_step)
      throw Error(ErrorCode::kDataLoss, "synthetic corrupt record in batch " + std::to_string(step_));
    size_t id;
    {
      std::unique_lock<std::mutex> lock(ring_->mu);
      ring_->cv.wait(lock, [&] { return !ring_->free.empty(); });
      id = ring_->free.front();
      ring_->free.pop_front();
      ++ring_->outstanding;
    }
    const uint64_t n = step_ + 1 == c_.batches ? c_.last_batch_size : c_.batch_size;
    uint8_t* mem = ring_->bufs[id].data();
    for (uint64_t j = 0; j < n; ++j)
      for (size_t i = 0; i < c_.row_bytes; ++i) mem[j * c_.row_bytes + i] = pattern(epoch_, step_, j, i);
    int64_t* index = reinterpret_cast<int64_t*>(mem + c_.batch_size * c_.row_bytes);
    for (uint64_t j = 0; j < n; ++j) index[j] = static_cast<int64_t>(step_ * 1000 + j);
    std::vector<TensorView> t(2);
    t[0] = TensorView{"data", mem, {static_cast<int64_t>(n), static_cast<int64_t>(c_.row_bytes)}, ElemType::kUint8, -1};
    t[1] = TensorView{"index", index, {static_cast<int64_t>(n)}, ElemType::kInt64, -1};
    Batch b(std::move(t), std::make_shared<Lease>(ring_, id), epoch_, step_, n);
    ++step_;
    return b;
  }

  int outstanding() const {
    std::lock_guard<std::mutex> lock(ring_->mu);
    return ring_->outstanding;
  }

 private:
  struct Ring {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<uint8_t>> bufs;
    std::deque<size_t> free;
    int outstanding = 0;
  };
  class Lease final : public SlotLease {
   public:
    Lease(std::shared_ptr<Ring> r, size_t id) : r_(std::move(r)), id_(id) {}
    ~Lease() override {
      {
        std::lock_guard<std::mutex> lock(r_->mu);
        r_->free.push_back(id_);
        --r_->outstanding;
      }
      r_->cv.notify_all();
    }

   private:
    std::shared_ptr<Ring> r_;
    size_t id_;
  };

  Config c_;
  std::shared_ptr<Ring> ring_;
  uint64_t epoch_ = 0, step_ = 0;
};

StagerOptions host_options(unsigned slots) {
  StagerOptions o;
  o.backend = StageBackend::kHost;
  o.device_slots = slots;
  return o;
}

// Checks the bytes of a batch against the pattern; returns "" or what differs. Takes
// plain pointers, as a kernel would: it may run after the batch object was released.
struct Snapshot {
  const uint8_t* data = nullptr;
  const int64_t* index = nullptr;
  int64_t rows = 0;
  uint64_t epoch = 0, step = 0, size = 0;
};

Snapshot snapshot(const DeviceBatch& b) {
  const TensorView& d = b["data"];
  return Snapshot{static_cast<const uint8_t*>(d.data), static_cast<const int64_t*>(b["index"].data), d.shape[0],
                  b.epoch(), b.step(), b.size()};
}

std::string check_bytes(const Snapshot& s, size_t row_bytes) {
  if (s.rows != static_cast<int64_t>(s.size)) return "data has the wrong batch dimension";
  for (uint64_t j = 0; j < s.size; ++j) {
    for (size_t i = 0; i < row_bytes; ++i)
      if (s.data[j * row_bytes + i] != pattern(s.epoch, s.step, j, i))
        return "byte " + std::to_string(i) + " of sample " + std::to_string(j) + " of step " + std::to_string(s.step);
    if (s.index[j] != static_cast<int64_t>(s.step * 1000 + j)) return "index differs";
  }
  return "";
}

std::string check_bytes(const DeviceBatch& b, size_t row_bytes) { return check_bytes(snapshot(b), row_bytes); }

// --- every batch once, in order, bytes intact: device slots 1..8 x consumer kinds ------

struct RingCase {
  unsigned device_slots;
  bool host_stream;  // consumer work on a HostStream (async) or on the calling thread
};

class StageRingTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(StageRingTest, EveryBatchOnceInOrderBytesIntactUnderRandomConsumerDelays) {
  const RingCase rc = GetParam();
  RingSource::Config cfg;
  cfg.row_bytes = 16 << 10;  // copies take long enough for a missing wait to show
  RingSource src(cfg);
  std::mutex mu;
  std::vector<uint64_t> seen;
  std::vector<std::string> problems;
  {
    Stager st(src.source(), host_options(rc.device_slots));
    EXPECT_EQ(st.backend(), StageBackend::kHost);
    EXPECT_EQ(st.device(), -1);
    std::unique_ptr<HostStream> hs;
    if (rc.host_stream) hs = std::make_unique<HostStream>("test-consumer");
    void* stream = hs.get();
    std::mt19937 rng(rc.device_slots * 2 + rc.host_stream);
    while (auto b = st.next()) {
      b->wait(stream);
      const unsigned delay_us = rng() % 400;
      // The "kernel": sleeps (a slot refilled too early would be overwritten meanwhile),
      // then checks the bytes it reads through the pointers it was given.
      auto kernel = [&, delay_us, snap = snapshot(*b), row = cfg.row_bytes] {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        std::string why = check_bytes(snap, row);
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(snap.step);
        if (!why.empty()) problems.push_back(why);
      };
      if (hs) hs->enqueue(kernel);
      else kernel();
      b->release(stream);  // the slot is refilled only after the kernel has run
    }
    EXPECT_FALSE(st.next().has_value());  // stays at the end
    if (hs) hs->synchronize();
    const StagerStats s = st.stats();
    EXPECT_EQ(s.batches, cfg.batches);
    EXPECT_EQ(s.backend, "host");
    EXPECT_EQ(s.device_slots, rc.device_slots);
  }
  ASSERT_EQ(seen.size(), cfg.batches);
  for (uint64_t k = 0; k < cfg.batches; ++k) EXPECT_EQ(seen[k], k);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(src.outstanding(), 0);  // every host batch went back to its ring
}

std::vector<RingCase> ring_cases() {
  std::vector<RingCase> v;
  for (unsigned s = 1; s <= 8; ++s) {
    v.push_back({s, false});
    v.push_back({s, true});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(SlotsAndStreams, StageRingTest, ::testing::ValuesIn(ring_cases()),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           return "slots" + std::to_string(i.param.device_slots) +
                                  (i.param.host_stream ? "_stream" : "_sync");
                         });

// --- the consumer contract's misuse errors --------------------------------------------

TEST(StageContract, ReleaseBeforeWaitIsInvalidArgument) {
  RingSource src({});
  Stager st(src.source(), host_options(2));
  auto b = st.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(error_code_of([&] { b->release(nullptr); }), ErrorCode::kInvalidArgument);
  // Still usable the right way round.
  b->wait(nullptr);
  EXPECT_EQ(check_bytes(*b, 4096), "");
  b->release(nullptr);
}

TEST(StageContract, DoubleReleaseIsInvalidArgument) {
  RingSource src({});
  Stager st(src.source(), host_options(2));
  auto b = st.next();
  ASSERT_TRUE(b);
  b->wait(nullptr);
  b->release(nullptr);
  EXPECT_TRUE(b->released());
  EXPECT_EQ(error_code_of([&] { b->release(nullptr); }), ErrorCode::kInvalidArgument);
}

TEST(StageContract, UseAfterReleaseIsInvalidArgument) {
  RingSource src({});
  Stager st(src.source(), host_options(2));
  auto b = st.next();
  ASSERT_TRUE(b);
  b->wait(nullptr);
  b->release(nullptr);
  EXPECT_EQ(error_code_of([&] { (void)(*b)["data"]; }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { b->wait(nullptr); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(b->find("data"), nullptr);
}

TEST(StageContract, EmptyBatchAndUnknownFieldAreInvalidArgument) {
  DeviceBatch empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(error_code_of([&] { empty.wait(nullptr); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { empty.release(nullptr); }), ErrorCode::kInvalidArgument);
  RingSource src({});
  Stager st(src.source(), host_options(2));
  auto b = st.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(error_code_of([&] { (void)(*b)["image"]; }), ErrorCode::kInvalidArgument);
  DeviceBatch moved = std::move(*b);
  EXPECT_FALSE(b->valid());
  EXPECT_TRUE(moved.valid());
}

TEST(StageContract, DroppedBatchesFreeTheirSlots) {
  // Two device slots, twenty batches, none waited on or released: dropping each (never
  // waited) or letting the destructor release it (waited) must keep the ring moving.
  RingSource::Config cfg;
  cfg.batches = 20;
  RingSource src(cfg);
  Stager st(src.source(), host_options(2));
  uint64_t n = 0;
  while (auto b = st.next()) {
    if (n % 2) b->wait(nullptr);
    EXPECT_EQ(b->step(), n);
    ++n;
  }
  EXPECT_EQ(n, cfg.batches);
}

// --- lifetime --------------------------------------------------------------------------

TEST(StageLifetime, DestructionWithCopiesInFlightNeitherHangsNorLeaks) {
  RingSource::Config cfg;
  cfg.batches = 1000;
  cfg.row_bytes = 256 << 10;  // 1 MiB batches: copies are in flight when we stop
  cfg.host_slots = 4;
  RingSource src(cfg);
  std::optional<DeviceBatch> kept;
  {
    Stager st(src.source(), host_options(4));
    kept = st.next();
    ASSERT_TRUE(kept);
    auto second = st.next();  // more copies queued behind it
    ASSERT_TRUE(second);
  }  // stops stoker-h2d, waits for in-flight copies, gives host batches back
  EXPECT_EQ(src.outstanding(), 0);
  // A batch handed out outlives the Stager: its slot memory is still there.
  kept->wait(nullptr);
  EXPECT_EQ(check_bytes(*kept, cfg.row_bytes), "");
  kept->release(nullptr);
}

TEST(StageLifetime, ImmediateDestructionAfterStartDoesNotHang) {
  for (int i = 0; i < 20; ++i) {
    RingSource::Config cfg;
    cfg.batches = 100;
    RingSource src(cfg);
    {
      Stager st(src.source(), host_options(1 + i % 4));
      if (i % 2) (void)st.next();
    }
    EXPECT_EQ(src.outstanding(), 0);
  }
}

// --- epochs, errors, shapes -------------------------------------------------------------

TEST(StageEpochs, SetEpochRestartsAndSlotAddressesAreStable) {
  RingSource::Config cfg;
  cfg.batches = 12;
  RingSource src(cfg);
  Stager st(src.source(), host_options(3));
  std::set<void*> addr0, addr1;
  for (int k = 0; k < 5; ++k) {  // part of epoch 0
    auto b = st.next();
    ASSERT_TRUE(b);
    addr0.insert(b->tensors()[0].data);
  }
  st.set_epoch(1);
  uint64_t k = 0;
  while (auto b = st.next()) {
    b->wait(nullptr);
    EXPECT_EQ(b->epoch(), 1u);
    EXPECT_EQ(b->step(), k++);
    EXPECT_EQ(check_bytes(*b, cfg.row_bytes), "");
    addr1.insert(b->tensors()[0].data);
    b->release(nullptr);
  }
  EXPECT_EQ(k, cfg.batches);
  EXPECT_EQ(addr0.size(), 3u);
  EXPECT_EQ(addr0, addr1);  // the ring was allocated once
}

TEST(StageErrors, SourceErrorReachesTheConsumerInOrder) {
  RingSource::Config cfg;
  cfg.fail_at_step = 3;
  RingSource src(cfg);
  Stager st(src.source(), host_options(2));
  for (uint64_t k = 0; k < 3; ++k) {
    auto b = st.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->step(), k);
  }
  try {
    (void)st.next();
    FAIL() << "the source's error was not rethrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("batch 3"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(st.next().has_value());
}

TEST(StageErrors, BatchLargerThanTheSlotIsInvalidArgument) {
  RingSource::Config cfg;
  RingSource src(cfg);
  StagerOptions o = host_options(2);
  o.max_batch_samples = 2;  // the source delivers 4
  Stager st(src.source(), o);
  EXPECT_EQ(error_code_of([&] { (void)st.next(); }), ErrorCode::kInvalidArgument);
}

TEST(StageErrors, BadOptionsAreInvalidArgument) {
  RingSource src({});
  StagerOptions o = host_options(0);
  EXPECT_EQ(error_code_of([&] { Stager st(src.source(), o); }), ErrorCode::kInvalidArgument);
  o = host_options(65);
  EXPECT_EQ(error_code_of([&] { Stager st(src.source(), o); }), ErrorCode::kInvalidArgument);
  o = host_options(2);
  o.image_dtype = ElemType::kInt32;
  EXPECT_EQ(error_code_of([&] { Stager st(src.source(), o); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { Stager st(StageSource{}, host_options(2)); }), ErrorCode::kInvalidArgument);
}

TEST(StageDevices, CudaBackendWithoutADeviceIsUnavailable) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(cuda_unavailable_reason().empty());
  RingSource src({});
  StagerOptions o = host_options(2);
  o.backend = StageBackend::kCuda;
  EXPECT_EQ(error_code_of([&] { Stager st(src.source(), o); }), ErrorCode::kUnavailable);
  o.backend = StageBackend::kAuto;
  Stager st(src.source(), o);
  EXPECT_EQ(st.backend(), StageBackend::kHost);
  EXPECT_EQ(std::string(pinned_slot_allocator(0)->name()), "host");
  EXPECT_FALSE(cuda_pci_bus_id(0).has_value());
}

TEST(StageDevices, SelectDeviceFollowsRequestThenLocalRankThenZero) {
  const char* old = std::getenv("LOCAL_RANK");
  const std::string saved = old ? old : "";
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(select_device(-1, 4), 0);
  EXPECT_EQ(select_device(2, 4), 2);
  EXPECT_EQ(error_code_of([] { select_device(4, 4); }), ErrorCode::kInvalidArgument);
  setenv("LOCAL_RANK", "3", 1);
  EXPECT_EQ(select_device(-1, 4), 3);
  EXPECT_EQ(select_device(1, 4), 1);   // an explicit device wins
  EXPECT_EQ(select_device(-1, 1), 0);  // one visible device per rank
  EXPECT_EQ(select_device(-1, 0), 3);  // no CUDA: the number is kept (host backend ignores it)
  EXPECT_EQ(error_code_of([] { select_device(-1, 2); }), ErrorCode::kInvalidArgument);
  setenv("LOCAL_RANK", "x1", 1);
  EXPECT_EQ(error_code_of([] { select_device(-1, 4); }), ErrorCode::kInvalidArgument);
  if (old) setenv("LOCAL_RANK", saved.c_str(), 1);
  else unsetenv("LOCAL_RANK");
  EXPECT_EQ(stage_backend_from_name("host"), StageBackend::kHost);
  EXPECT_EQ(error_code_of([] { stage_backend_from_name("gpu"); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker

namespace stoker {
namespace {

class NoopLease final : public SlotLease {};

TEST(StageConvert, StagerConvertsImagesAndWidensTokensOnTheConsumerStream) {
  const int64_t n = 3, h = 5, w = 7, L = 9;
  const std::vector<uint8_t> img = testing::random_bytes(static_cast<size_t>(n * h * w * 3), 11);
  std::vector<uint16_t> tok(static_cast<size_t>(n * L));
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<uint16_t>(65535 - i * 977);
  for (ElemType dt : {ElemType::kFloat32, ElemType::kFloat16, ElemType::kBFloat16}) {
    SCOPED_TRACE(elem_type_name(dt));
    uint64_t step = 0;
    StageSource src;
    src.next = [&]() -> std::optional<Batch> {
      if (step == 4) return std::nullopt;
      std::vector<TensorView> t(2);
      t[0] = TensorView{"image", const_cast<uint8_t*>(img.data()), {n, h, w, 3}, ElemType::kUint8, -1};
      t[1] = TensorView{"tokens", tok.data(), {n, L}, ElemType::kUint16, -1};
      return Batch(std::move(t), std::make_shared<NoopLease>(), 0, step++, n);
    };
    StagerOptions o;
    o.backend = StageBackend::kHost;
    o.image_dtype = dt;
    o.mean[1] = 0.25f;
    o.std[2] = 0.5f;
    o.widen_tokens = true;
    Stager st(src, o);
    std::vector<uint8_t> want(static_cast<size_t>(n * h * w * 3) * elem_size(dt));
    internal::convert_image_cpu(img.data(), n, h, w, dt, o.mean, o.std, want.data());
    HostStream hs("test-consumer");
    uint64_t got = 0;
    while (auto b = st.next()) {
      b->wait(&hs);
      const TensorView& im = (*b)["image"];
      const TensorView& tk = (*b)["tokens"];
      EXPECT_EQ(im.dtype, dt);
      EXPECT_EQ(im.shape, (std::vector<int64_t>{n, 3, h, w}));
      EXPECT_EQ(tk.dtype, ElemType::kInt64);
      EXPECT_EQ(tk.shape, (std::vector<int64_t>{n, L}));
      hs.synchronize();  // the conversions ran on the stream
      EXPECT_EQ(std::memcmp(im.data, want.data(), want.size()), 0);
      const int64_t* t64 = static_cast<const int64_t*>(tk.data);
      for (size_t i = 0; i < tok.size(); ++i) ASSERT_EQ(t64[i], tok[i]) << i;
      b->release(&hs);
      ++got;
    }
    EXPECT_EQ(got, 4u);
  }
}

TEST(StageConvert, FreeFunctionsRunOnAHostStreamOrNow) {
  const std::vector<uint8_t> img = testing::random_bytes(2 * 3 * 4 * 3, 5);
  const float mean[3] = {0.1f, 0.2f, 0.3f}, sd[3] = {0.7f, 0.8f, 0.9f};
  TensorView v{"image", const_cast<uint8_t*>(img.data()), {2, 3, 4, 3}, ElemType::kUint8, -1};
  std::vector<float> a(img.size()), b(img.size());
  internal::convert_image_cpu(img.data(), 2, 3, 4, ElemType::kFloat32, mean, sd, a.data());
  HostStream hs;
  convert_image(v, ElemType::kFloat32, mean, sd, b.data(), &hs);
  hs.synchronize();
  EXPECT_EQ(a, b);
  std::fill(b.begin(), b.end(), 0.f);
  convert_image(v, ElemType::kFloat32, mean, sd, b.data(), nullptr);
  EXPECT_EQ(a, b);
  TensorView bad = v;
  bad.shape = {2, 3, 4, 4};
  EXPECT_EQ(error_code_of([&] { convert_image(bad, ElemType::kFloat32, mean, sd, b.data(), nullptr); }),
            ErrorCode::kInvalidArgument);
  const uint16_t t[4] = {1, 2, 3, 60000};
  int64_t out[4] = {};
  widen_tokens(TensorView{"tokens", const_cast<uint16_t*>(t), {2, 2}, ElemType::kUint16, -1}, out, nullptr);
  EXPECT_EQ(out[3], 60000);
}

TEST(StageStreams, HostStreamRunsInOrderAndRethrowsOnSynchronize) {
  HostStream hs;
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) hs.enqueue([&order, i] { order.push_back(i); });
  hs.enqueue([] { throw Error(ErrorCode::kIoError, "task failed"); });
  hs.enqueue([&order] { order.push_back(50); });
  EXPECT_EQ(error_code_of([&] { hs.synchronize(); }), ErrorCode::kIoError);
  ASSERT_EQ(order.size(), 51u);
  for (int i = 0; i <= 50; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  hs.synchronize();  // the error was reported once
}

// --- with a real Loader ---------------------------------------------------------------

TEST(StageLoader, StagedBatchesEqualTheLoadersAndTokensWiden) {
  testing::TempDir tmp;
  const std::string dir = tmp.str("tokens");
  testing::write_token_dataset(dir, 40000, 16, 8);
  LoaderOptions lo = testing::token_options(dir);
  lo.batch_size = 32;
  lo.targets = true;
  std::vector<std::vector<uint16_t>> want_tokens;
  std::vector<std::vector<int64_t>> want_index;
  {
    Loader l(lo);
    while (auto b = l.next()) {
      const auto& t = (*b)["tokens"];
      const auto* p = static_cast<const uint16_t*>(t.data);
      want_tokens.emplace_back(p, p + t.numel());
      const auto& ix = (*b)["index"];
      const auto* q = static_cast<const int64_t*>(ix.data);
      want_index.emplace_back(q, q + ix.numel());
    }
  }
  ASSERT_GT(want_tokens.size(), 3u);
  StagerOptions so;
  so.backend = StageBackend::kHost;
  so.device_slots = 2;
  so.widen_tokens = true;
  Stager st(lo, so);
  ASSERT_NE(st.loader(), nullptr);
  HostStream hs;
  size_t k = 0;
  while (auto b = st.next()) {
    ASSERT_LT(k, want_tokens.size());
    b->wait(&hs);
    hs.synchronize();
    const auto& t = (*b)["tokens"];
    ASSERT_EQ(t.dtype, ElemType::kInt64);
    ASSERT_EQ(static_cast<size_t>(t.numel()), want_tokens[k].size());
    const auto* p = static_cast<const int64_t*>(t.data);
    for (size_t i = 0; i < want_tokens[k].size(); ++i) ASSERT_EQ(p[i], want_tokens[k][i]) << "batch " << k;
    ASSERT_NE(b->find("targets"), nullptr);
    EXPECT_EQ((*b)["targets"].dtype, ElemType::kInt64);
    const auto* q = static_cast<const int64_t*>((*b)["index"].data);
    EXPECT_EQ(std::vector<int64_t>(q, q + want_index[k].size()), want_index[k]);
    b->release(&hs);
    ++k;
  }
  EXPECT_EQ(k, want_tokens.size());
  const StagerStats s = st.stats();
  EXPECT_EQ(s.batches, k);
  EXPECT_EQ(s.host_memory, "host");  // no GPU here: the loader keeps page-aligned memory
}

// --- resuming: Stager::state() / load_state() ------------------------------------------

// Batches of one epoch as (index values) per batch, read through a staged owned Loader.
std::vector<std::vector<int64_t>> staged_indices(Stager& st, size_t max_batches = SIZE_MAX) {
  std::vector<std::vector<int64_t>> out;
  while (out.size() < max_batches) {
    auto b = st.next();
    if (!b) break;
    b->wait(nullptr);
    const auto& ix = (*b)["index"];
    const auto* q = static_cast<const int64_t*>(ix.data);
    out.emplace_back(q, q + ix.numel());
    b->release(nullptr);
  }
  return out;
}

LoaderOptions resume_options(const std::string& dir) {
  LoaderOptions lo = testing::token_options(dir);
  lo.batch_size = 16;
  lo.order.seed = 11;
  return lo;
}

StagerOptions host_stager() {
  StagerOptions so;
  so.backend = StageBackend::kHost;
  so.device_slots = 3;
  return so;
}

// A token dataset of 1874 rows, and a loader's options for it (batch 16, one rank).
class StageResume : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_token_dataset(tmp_.str("t"), 30000, 16, 8); }
  testing::TempDir tmp_;
  const LoaderOptions lo = resume_options(tmp_.str("t"));
};

TEST_F(StageResume, StateCountsBatchesHandedOutNotBatchesStaged) {
  Stager st(lo, host_stager());
  const OrderState start = st.state();
  EXPECT_EQ(start.consumed, 0u);
  const auto first = staged_indices(st, 3);
  ASSERT_EQ(first.size(), 3u);
  // stoker-h2d has staged ahead (three device slots, loader slots behind them); the
  // state counts the three batches handed out only.
  const OrderState s = st.state();
  EXPECT_EQ(s.epoch, start.epoch);
  EXPECT_EQ(s.consumed, 3u * lo.batch_size);
  EXPECT_EQ(s.total, start.total);
}

TEST_F(StageResume, LoadStateInANewStagerDeliversExactlyTheRestOfTheEpoch) {
  std::vector<std::vector<int64_t>> whole;
  {
    Stager st(lo, host_stager());
    whole = staged_indices(st);
  }
  ASSERT_GT(whole.size(), 6u);
  std::string saved;
  std::vector<std::vector<int64_t>> got;
  {
    Stager st(lo, host_stager());
    got = staged_indices(st, 5);
    saved = st.state().serialize();
  }  // the interrupted run's staged-ahead batches are dropped with it
  Stager st(lo, host_stager());
  st.load_state(OrderState::parse(saved));
  EXPECT_EQ(st.state().serialize(), saved);
  const auto rest = staged_indices(st);
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, whole);
}

TEST_F(StageResume, LoadStateMidRunDropsWhatWasStagedAndRestartsThere) {
  Stager st(lo, host_stager());
  const auto head = staged_indices(st, 2);
  const OrderState at2 = st.state();
  const auto more = staged_indices(st, 4);
  ASSERT_EQ(more.size(), 4u);
  st.load_state(at2);  // back to after batch 2, with batches staged past it
  EXPECT_EQ(st.state().consumed, at2.consumed);
  const auto again = staged_indices(st, 4);
  EXPECT_EQ(again, more);
  // And the next epoch starts from its beginning.
  st.set_epoch(at2.epoch + 1);
  EXPECT_EQ(st.state().epoch, at2.epoch + 1);
  EXPECT_EQ(st.state().consumed, 0u);
}

// The Stager's state after k batches is the Loader's after k batches, for every k of an
// epoch: at one rank, and at rank 0 of 2 over token rows whose last step is trimmed
// (TailPolicy::kTrim leaves the epoch's state short of its total).
TEST_F(StageResume, StateAfterEachBatchIsTheLoadersAfterAsManyBatches) {
  testing::write_token_dataset(tmp_.str("odd"), 1875 * 16 + 1, 16, 8);
  for (uint32_t world : {1u, 2u}) {
    SCOPED_TRACE("world size " + std::to_string(world));
    LoaderOptions lo = resume_options(tmp_.str("odd"));
    lo.world_size = world;
    std::vector<std::string> want;
    uint64_t want_batches = 0;
    {
      Loader l(lo);
      want_batches = l.num_batches();
      want.push_back(l.state().serialize());
      while (l.next()) want.push_back(l.state().serialize());
    }
    if (world == 2) {
      const OrderState end = OrderState::parse(want.back());
      ASSERT_LT(end.consumed, end.total) << "the epoch's last step should be trimmed";
    }
    Stager st(lo, host_stager());
    EXPECT_EQ(st.num_batches(), want_batches);
    EXPECT_EQ(st.epoch(), 0u);
    std::vector<std::string> got{st.state().serialize()};
    while (auto b = st.next()) got.push_back(st.state().serialize());
    EXPECT_EQ(got, want);
    // The next epoch: its start, the same batch count.
    st.set_epoch(1);
    EXPECT_EQ(st.epoch(), 1u);
    EXPECT_EQ(st.num_batches(), want_batches);
    EXPECT_EQ(st.state().consumed, 0u);
  }
}

// A mid-epoch load_state() sets the run's batch count to what is left.
TEST_F(StageResume, NumBatchesAfterLoadStateCountsTheRestOfTheEpoch) {
  Stager st(lo, host_stager());
  const uint64_t all = st.num_batches();
  ASSERT_EQ(staged_indices(st, 4).size(), 4u);
  const OrderState at4 = st.state();
  Stager again(lo, host_stager());
  again.load_state(at4);
  EXPECT_EQ(again.num_batches(), all - 4);
  EXPECT_EQ(staged_indices(again).size(), all - 4);
}

TEST_F(StageResume, ForeignStateOrRawSourceIsInvalidArgument) {
  Stager st(lo, host_stager());
  const auto head = staged_indices(st, 2);
  OrderState other = st.state();
  other.total += 1;  // another dataset size
  EXPECT_EQ(error_code_of([&] { st.load_state(other); }), ErrorCode::kInvalidArgument);
  // The failed load changed nothing: the run goes on where it was.
  EXPECT_EQ(st.state().consumed, 2u * lo.batch_size);
  EXPECT_EQ(staged_indices(st, 1).size(), 1u);

  RingSource::Config c;
  RingSource src(c);
  Stager raw(src.source(), host_stager());
  EXPECT_EQ(error_code_of([&] { raw.state(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { raw.load_state(OrderState{}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { raw.epoch(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { raw.num_batches(); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
