#include "util/loader_util.h"

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <future>
#include <limits>
#include <memory>
#include <thread>

#include "stoker/dataset.h"
#include "util/test_util.h"

namespace stoker::testing {

LoaderOptions default_options(const std::string& path, uint64_t batch_size) {
  LoaderOptions o;
  o.path = path;
  o.batch_size = batch_size;
  o.rank = 0;
  o.world_size = 1;
  return o;
}

LoaderOptions image_options(const std::string& dir) {
  LoaderOptions o;
  o.path = dir;
  o.batch_size = 8;
  o.transform.size = 24;
  o.threads = 2;
  o.rank = 0;
  o.world_size = 1;
  o.order.seed = 7;
  return o;
}

LoaderOptions token_options(const std::string& dir) {
  LoaderOptions o;
  o.path = dir;
  o.batch_size = 7;
  o.threads = 2;
  o.rank = 0;
  o.world_size = 1;
  o.order.seed = 3;
  o.order.window_chunks = 4;
  return o;
}

LoaderOptions lone_worker_options(const std::string& dir) {
  LoaderOptions o = token_options(dir);
  o.order.window_chunks = 1;
  o.order.seed = 997;
  o.world_size = 4;
  o.batch_size = 1;
  o.threads = 1;
  o.slots = 7;
  return o;
}

Epoch run_epoch(Loader& l) {
  return collect_epoch([&] { return l.next(); });
}

Epoch run_epoch_trying(Loader& l, uint64_t* taken_ready) {
  return collect_epoch([&] {
    bool would_wait = false;
    auto b = l.try_next(&would_wait);
    if (would_wait) return l.next();
    ++*taken_ready;
    return b;
  });
}

uint64_t drain_holding(Loader& l, size_t keep) {
  std::deque<Batch> held;
  uint64_t n = 0;
  while (auto b = l.next()) {
    n += b->size();
    held.push_back(std::move(*b));
    if (held.size() > keep) held.pop_front();
  }
  return n;
}

std::vector<int64_t> token_epoch_rows(Loader& l, uint32_t L) {
  std::vector<int64_t> rows;
  while (auto b = l.next()) {
    auto* t = static_cast<const uint16_t*>((*b)["tokens"].data);
    auto* idx = static_cast<const int64_t*>((*b)["index"].data);
    // Slots share one allocation and stay page-aligned (the first tensor starts the slot).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t) % 4096, 0u);
    for (uint64_t j = 0; j < b->size(); ++j) {
      // Every row's bytes, not only its index: the first and last token of the row.
      EXPECT_EQ(t[j * L], static_cast<uint16_t>((idx[j] * L) % 65521));
      EXPECT_EQ(t[j * L + L - 1], static_cast<uint16_t>((idx[j] * L + L - 1) % 65521));
      rows.push_back(idx[j]);
    }
  }
  return rows;
}

uint64_t token_rows_delivered(uint64_t rows, uint64_t batch, uint64_t world) {
  return rows - rows % (batch * world) % world;
}

void corrupt_records(const std::string& dir, const std::vector<uint64_t>& globals) {
  auto ds = Dataset::open(dir);
  for (uint64_t g : globals) {
    auto [s, r] = ds->locate(g);
    auto bytes = read_file(ds->shard_path(s));
    bytes[ds->shard(s)->location(r).offset + 3] ^= 0x5A;
    write_file(ds->shard_path(s), bytes);
  }
}

void finishes_or_abort(const char* what, const std::function<void()>& body) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> f = done->get_future();
  std::thread t([&body, done] {
    try {
      body();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  if (f.wait_for(std::chrono::minutes(3)) != std::future_status::ready) {
    std::fprintf(stderr, "%s: no progress in 3 minutes: the loader deadlocked\n", what);
    std::fflush(stderr);
    std::_Exit(3);
  }
  t.join();
  f.get();  // a loader error fails the test as usual
}

void inject_faults(LoaderOptions& o, const FaultPlan& plan) {
  o.wrap_io = [plan](std::unique_ptr<IoEngine> e) { return make_faulty_engine(std::move(e), plan); };
}

LoaderOptions skip_without_budget(LoaderOptions o) {
  o.on_error = OnError::kSkip;
  o.max_skipped = std::numeric_limits<double>::infinity();
  return o;
}

std::vector<FaultCase> fault_cases() {
  auto plan = [](double fail, double shrt, double corrupt, double delay) {
    FaultPlan p;
    p.seed = 11;
    p.fail_rate = fail;
    p.short_rate = shrt;
    p.corrupt_rate = corrupt;
    p.delay_rate = delay;
    p.delay = std::chrono::microseconds(2000);
    return p;
  };
  return {{"fail", plan(0.15, 0, 0, 0), ErrorCode::kIoError, true},
          {"short", plan(0, 0.15, 0, 0), ErrorCode::kDataLoss, true},
          {"corrupt", plan(0, 0, 0.15, 0), ErrorCode::kDataLoss, true},
          {"delay", plan(0, 0, 0, 0.3), ErrorCode::kIoError, false},
          {"mixed", plan(0.05, 0.05, 0.05, 0.1), ErrorCode::kIoError, true}};
}

void expect_stop_naming_a_record(Loader& l, const FaultCase& fc, const std::string& where) {
  try {
    while (l.next()) {
    }
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    if (std::string(fc.name) != "mixed") {
      EXPECT_EQ(e.code(), fc.code) << e.what();
    }
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
  }
}

}  // namespace stoker::testing
