// threads="auto" (figures/autotune.h): the tuner driven by synthetic figures of a
// modelled feed, so every step is deterministic — it moves the knob the verdict names,
// keeps a move only when the rate rose, steps back when the consumer stops waiting,
// leaves explicit knobs alone, stays inside CPU and memory budgets read from fixture
// cgroup trees, and settles without oscillating under noise. Plus one small live loader.
#include "figures/autotune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>

#include "stoker/cpu.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/platform.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using internal::AutoTuner;
using internal::TuneKnob;
using testing::put;
using testing::TempDir;

// A feed whose rate is the least of what the decoders (per_thread each, up to
// `cpu_cap` threads' worth: more threads than cores add nothing), the storage (per_slot
// for each slot in use) and the consumer take. Its figures say which one binds, as the
// loader's counters would.
struct Model {
  double per_thread = 100, cpu_cap = 1e9, per_slot = 1e9, consumer = 1e9;
  double per_depth = 1e9;  // storage rate per read the IO queue lets in flight
  double queued = 0;       // records queued for the decoders, on average
  double noise = 0;  // relative, uniform
  std::mt19937 rng{7};
  FeedFigures cum;
  uint64_t batches = 0;

  FeedFigures step(unsigned threads, unsigned slots, unsigned depth = 1, double dt = 0.5) {
    const double dec = per_thread * std::min<double>(threads, cpu_cap);
    const double io = std::min(per_slot * slots, per_depth * depth);
    double rate = std::min({dec, io, consumer});
    if (noise > 0) rate *= 1 + std::uniform_real_distribution<double>(-noise, noise)(rng);
    cum.wall_s += dt;
    cum.samples += static_cast<uint64_t>(rate * dt);
    cum.batches += 16;
    batches += 16;
    cum.decode.threads = threads;
    cum.decode.busy_s += threads * dt * std::min(1.0, rate / (per_thread * threads));
    cum.io.threads = 1;
    cum.io.busy_s += dt * std::min(1.0, rate / io);
    cum.io_engine_busy_s += dt * std::min(1.0, rate / io);
    cum.consumer_wait_s += dt * std::max(0.0, 1 - rate / consumer);
    cum.slots = slots;
    cum.decode_queue_avg = queued;
    // When the queue's depth is what holds the storage back, reads wait for room in it
    // most of the time.
    if (per_depth * depth < per_slot * slots) cum.io_queue_full_s += 0.9 * dt;
    return cum;
  }
};

// Runs the tuner on the model until it settles (or `max_intervals`); returns intervals used.
int drive(AutoTuner& t, Model& m, int max_intervals = 200) {
  for (int i = 0; i < max_intervals; ++i) {
    if (t.settled()) return i;
    t.update(m.step(t.threads().value, t.slots().value, t.queue_depth().value), m.batches);
  }
  return max_intervals;
}

TEST(AutoTune, DecodeBoundAddsThreadsUpToTheBudget) {
  Model m;
  m.per_thread = 100;
  AutoTuner t(TuneKnob{1, 1, 4, true}, TuneKnob{4, 4, 16, true});
  const int n = drive(t, m);
  EXPECT_TRUE(t.settled());
  EXPECT_LT(n, 30);
  EXPECT_EQ(t.threads().value, 4u);  // the budget
  EXPECT_EQ(t.slots().value, 4u);    // decode bound: the ring is not the knob
  for (const auto& c : t.history()) EXPECT_EQ(c.knob, "threads") << c.to_string();
  ASSERT_FALSE(t.history().empty());
  EXPECT_NE(t.history().front().reason.find("decode bound"), std::string::npos) << t.history().front().reason;
}

// Text tokenised in the loader: the verdict says "tokenize", the knob is the same threads.
TEST(AutoTune, TokenizeBoundAddsThreads) {
  Model m;
  m.per_thread = 100;
  m.cum.tokenize = true;
  AutoTuner t(TuneKnob{1, 1, 3, true}, TuneKnob{4, 4, 16, true});
  drive(t, m);
  EXPECT_EQ(t.threads().value, 3u);
  ASSERT_FALSE(t.history().empty());
  EXPECT_NE(t.history().front().reason.find("tokenize bound"), std::string::npos) << t.history().front().reason;
}

// A consumer that waits most of the time (a GPU starving) gets twice the threads a move:
// 16 threads in 4 moves; once a step up is undone, the climb goes one thread at a time.
TEST(AutoTune, AStarvingConsumerDoublesTheThreadsUntilAStepIsUndone) {
  Model m;
  m.per_thread = 100;
  AutoTuner t(TuneKnob{1, 1, 16, true}, TuneKnob{4, 4, 4, false});
  drive(t, m);
  EXPECT_EQ(t.threads().value, 16u);
  std::vector<unsigned> to;
  for (const auto& c : t.history()) to.push_back(c.to);
  EXPECT_EQ(to, (std::vector<unsigned>{2, 4, 8, 16}));

  Model capped;
  capped.per_thread = 100;
  capped.cpu_cap = 3;  // a fourth thread finds no core: 4 gains on 2, 8 not on 4
  AutoTuner u(TuneKnob{1, 1, 16, true}, TuneKnob{4, 4, 4, false});
  drive(u, capped);
  std::vector<std::pair<unsigned, unsigned>> moves;
  for (const auto& c : u.history()) moves.emplace_back(c.from, c.to);
  const std::vector<std::pair<unsigned, unsigned>> want{{1, 2}, {2, 4}, {4, 8}, {8, 4}, {4, 5}, {5, 4}};
  EXPECT_EQ(moves, want);
  EXPECT_EQ(u.threads().value, 4u);
}

// A consumer that waits less than half the time: one thread more a move.
TEST(AutoTune, AConsumerWaitingLittleGetsOneThreadAMove) {
  Model m;
  m.per_thread = 100;
  m.consumer = 300;  // at 2 threads it waits a third of the time
  AutoTuner t(TuneKnob{2, 1, 16, true}, TuneKnob{4, 4, 4, false});
  drive(t, m);
  ASSERT_FALSE(t.history().empty());
  EXPECT_EQ(t.history().front().from, 2u);
  EXPECT_EQ(t.history().front().to, 3u) << t.history().front().to_string();
}

TEST(AutoTune, StorageBoundAddsSlotsNotThreads) {
  Model m;
  m.per_thread = 10000;
  m.per_slot = 50;
  AutoTuner t(TuneKnob{1, 1, 8, true}, TuneKnob{4, 4, 9, true});
  t.set_queue_depth(TuneKnob{16, 4, 256, true, true});
  drive(t, m);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.threads().value, 1u);
  EXPECT_EQ(t.slots().value, 9u);  // up to what the memory allows
  EXPECT_EQ(t.queue_depth().value, 16u);  // no read waited for room in the queue
  for (const auto& c : t.history()) EXPECT_EQ(c.knob, "slots") << c.to_string();
}

// Storage bound with reads waiting for room in the IO queue: the depth is the knob, and
// it doubles up to its max; the ring and the threads stay.
TEST(AutoTune, ReadsWaitingForQueueRoomDoubleTheQueueDepth) {
  Model m;
  m.per_thread = 100000;
  m.per_depth = 10;
  AutoTuner t(TuneKnob{1, 1, 8, true}, TuneKnob{4, 4, 16, true});
  t.set_queue_depth(TuneKnob{16, 4, 256, true, true});
  drive(t, m);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.queue_depth().value, 256u);
  EXPECT_EQ(t.slots().value, 4u);
  EXPECT_EQ(t.threads().value, 1u);
  ASSERT_EQ(t.history().size(), 4u);  // 16 -> 32 -> 64 -> 128 -> 256
  for (const auto& c : t.history()) {
    EXPECT_EQ(c.knob, "queue_depth") << c.to_string();
    EXPECT_EQ(c.to, 2 * c.from) << c.to_string();
    EXPECT_NE(c.reason.find("waited for room in the IO queue"), std::string::npos) << c.reason;
  }
}

// Reads held back by the queue come in waves, and each wave queues records for the
// decoders: the verdict reads the backlog as decode bound although the decoders are far
// from busy. The reads that waited for queue room make the depth the first knob.
TEST(AutoTune, DecodersShortOfBusyBehindWaitingReadsRaiseTheDepthFirst) {
  Model m;
  m.per_thread = 500;
  m.per_depth = 20;  // 320 samples/s at depth 16: one decoder 64 % busy
  m.queued = 8;
  AutoTuner t(TuneKnob{1, 1, 2, true}, TuneKnob{4, 4, 4, false});
  t.set_queue_depth(TuneKnob{16, 4, 256, true, true});
  drive(t, m);
  ASSERT_FALSE(t.history().empty());
  EXPECT_EQ(t.history().front().knob, "queue_depth") << t.history().front().to_string();
  EXPECT_NE(t.history().front().reason.find("while the decoders were 64% busy"), std::string::npos)
      << t.history().front().reason;
  EXPECT_GE(t.queue_depth().value, 32u);
}

// A mixture's sources: their tuners draw decode threads from one budget, so together
// they never run more than it, and every thread of it ends up at work.
TEST(AutoTune, TunersSharingABudgetStayWithinItTogether) {
  auto budget = std::make_shared<internal::TuneThreadBudget>();
  Model ma, mb;
  ma.per_thread = mb.per_thread = 100;
  AutoTuner a(TuneKnob{1, 1, 3, true}, TuneKnob{4, 4, 4, false});
  AutoTuner b(TuneKnob{1, 1, 3, true}, TuneKnob{4, 4, 4, false});
  a.share_threads(budget);
  b.share_threads(budget);
  for (int i = 0; i < 200 && !(a.settled() && b.settled()); ++i) {
    a.update(ma.step(a.threads().value, a.slots().value), ma.batches);
    b.update(mb.step(b.threads().value, b.slots().value), mb.batches);
    ASSERT_LE(a.threads().value + b.threads().value, 3u) << i;
  }
  EXPECT_TRUE(a.settled() && b.settled());
  EXPECT_EQ(a.threads().value + b.threads().value, 3u);
}

TEST(AutoTune, AMoveThatDoesNotRaiseTheRateIsUndoneForGood) {
  Model m;
  m.per_thread = 100;
  m.cpu_cap = 2;  // decode looks bound, but a third thread finds no core
  AutoTuner t(TuneKnob{1, 1, 6, true}, TuneKnob{4, 4, 4, false});
  drive(t, m);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.threads().value, 2u);
  ASSERT_GE(t.history().size(), 2u);
  const auto& undo = t.history().back();
  EXPECT_EQ(undo.from, 3u);
  EXPECT_EQ(undo.to, 2u);
  EXPECT_NE(undo.reason.find("undone"), std::string::npos) << undo.reason;
  // Nothing after: the direction is closed.
  const size_t moves = t.history().size();
  for (int i = 0; i < 50; ++i) t.update(m.step(t.threads().value, t.slots().value), m.batches);
  EXPECT_EQ(t.history().size(), moves);
}

TEST(AutoTune, StepsBackWhenTheConsumerNoLongerWaits) {
  Model m;
  m.per_thread = 1000;
  m.consumer = 500;  // a slow trainer: one thread keeps up
  AutoTuner t(TuneKnob{3, 1, 4, true}, TuneKnob{4, 4, 4, false});
  drive(t, m);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.threads().value, 1u);
  ASSERT_FALSE(t.history().empty());
  EXPECT_NE(t.history().front().reason.find("no longer waits"), std::string::npos) << t.history().front().reason;
}

TEST(AutoTune, ExplicitKnobsAreNeverChanged) {
  Model m;
  m.per_thread = 100;
  m.per_slot = 10;
  AutoTuner t(TuneKnob{2, 2, 2, false}, TuneKnob{5, 5, 5, false});
  EXPECT_TRUE(t.settled());
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(t.update(m.step(2, 5), m.batches));
  EXPECT_EQ(t.threads().value, 2u);
  EXPECT_EQ(t.slots().value, 5u);
  EXPECT_TRUE(t.history().empty());
}

TEST(AutoTune, SettlesWithoutOscillatingUnderNoise) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    Model m;
    m.rng.seed(seed);
    m.noise = 0.08;
    m.per_thread = 100;
    m.consumer = 330;  // between 3 and 4 threads: the climb meets the consumer on the way
    AutoTuner t(TuneKnob{1, 1, 8, true}, TuneKnob{4, 4, 12, true});
    const int n = drive(t, m, 400);
    EXPECT_TRUE(t.settled()) << "seed " << seed;
    EXPECT_LE(n, 60) << "seed " << seed;
    EXPECT_LE(t.history().size(), internal::AutoTuneOptions{}.max_moves);
    // Per knob, the moves change direction at most once (up, then back), undos aside.
    for (const char* knob : {"threads", "slots"}) {
      int turns = 0, last = 0;
      for (const auto& c : t.history()) {
        if (c.knob != knob || c.reason.rfind("undone", 0) == 0) continue;  // an undo is no move of its own
        const int dir = c.to > c.from ? 1 : -1;
        if (last != 0 && dir != last) ++turns;
        last = dir;
      }
      EXPECT_LE(turns, 1) << "seed " << seed << " " << knob;
    }
    EXPECT_GE(t.threads().value, 1u);
    EXPECT_LE(t.threads().value, 8u);
  }
}

TEST(AutoTune, StaysInsideCpuAndMemoryBudgetsOfACgroup) {
  TempDir root;
  // 8 CPUs allowed, a cgroup v2 quota of 2.5 CPUs and 256 MiB of memory.
  put(root, "/proc/self/cgroup", "0::/job\n");
  put(root, "/sys/fs/cgroup/job/cpu.max", "250000 100000\n");
  put(root, "/sys/fs/cgroup/job/memory.max", "268435456\n");
  put(root, "/sys/fs/cgroup/memory.max", "max\n");
  put(root, "/proc/meminfo", "MemTotal:       65536000 kB\nMemFree: 1 kB\n");
  const CpuPlan plan = plan_cpus(std::nullopt, root.str(), {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(plan.threads, 2u);
  const unsigned threads_max = internal::tune_thread_budget(plan, 1);
  EXPECT_EQ(threads_max, 1u);  // 2 of the quota, one kept for the consumer
  EXPECT_EQ(internal::tune_thread_budget(plan, 0), 2u);
  EXPECT_EQ(internal::tune_thread_budget(plan, 5), 1u);
  const uint64_t mem = internal::tune_memory_budget(0, root.str());
  EXPECT_EQ(mem, 64ull << 20);  // a quarter of the cgroup's limit, not of the RAM
  EXPECT_EQ(internal::tune_memory_budget(1000, root.str()), 1000u);
  const unsigned slots_max = internal::tune_slots_max(mem, 9633792, 4);  // 224 px x 64
  EXPECT_EQ(slots_max, 6u);
  EXPECT_EQ(internal::tune_slots_max(1, 9633792, 4), 4u);  // never below the untuned default

  Model decode_bound;
  decode_bound.per_thread = 100;
  AutoTuner a(TuneKnob{1, 1, internal::tune_thread_budget(plan, 0), true}, TuneKnob{4, 4, slots_max, true});
  for (int i = 0; i < 100; ++i) {
    a.update(decode_bound.step(a.threads().value, a.slots().value), decode_bound.batches);
    ASSERT_LE(a.threads().value, 2u);
  }
  EXPECT_EQ(a.threads().value, 2u);
  Model storage_bound;
  storage_bound.per_thread = 1e5;
  storage_bound.per_slot = 10;
  AutoTuner b(TuneKnob{1, 1, 2, true}, TuneKnob{4, 4, slots_max, true});
  for (int i = 0; i < 100; ++i) {
    b.update(storage_bound.step(b.threads().value, b.slots().value), storage_bound.batches);
    ASSERT_LE(b.slots().value, slots_max);
  }
  EXPECT_EQ(b.slots().value, slots_max);

  // A cgroup v1 memory limit, and RAM when there is none.
  TempDir v1;
  put(v1, "/proc/self/cgroup", "4:memory:/box\n");
  put(v1, "/sys/fs/cgroup/memory/box/memory.limit_in_bytes", "1073741824\n");
  EXPECT_EQ(internal::cgroup_memory_limit_at(v1.str()), 1073741824u);
  TempDir none;
  put(none, "/proc/meminfo", "MemTotal: 1024 kB\n");
  put(none, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(internal::cgroup_memory_limit_at(none.str()), 0u);
  EXPECT_EQ(internal::tune_memory_budget(0, none.str()), 256u * 1024);
}

// The verdict's consumer_starved case: the consumer rarely waits for batches, but its
// thread waits for a CPU; the tuner answers it with a decode thread fewer.
TEST(AutoTune, ConsumerStarvedOfCpuIsNamedAndStepsThreadsBack) {
  FeedFigures f;
  f.wall_s = 10;
  f.batches = 100;
  f.samples = 6400;
  f.decode.threads = 2;
  f.decode.busy_s = 12;
  f.io.threads = 1;
  f.consumer_wait_s = 0.1;
  f.slots = 4;
  f.consumer_run_delay_s = 4;  // 40 % of the time runnable but not running
  const Verdict v = diagnose(f);
  EXPECT_EQ(v.bottleneck, Bottleneck::kConsumerStarved);
  EXPECT_EQ(bottleneck_name(v.bottleneck), std::string("consumer_starved"));
  EXPECT_EQ(bottleneck_from_name("consumer_starved"), Bottleneck::kConsumerStarved);
  EXPECT_NE(v.evidence.find("waited for a CPU 40%"), std::string::npos) << v.evidence;
  f.consumer_run_delay_s = 0.5;  // 5 %: an ordinary consumer bound feed
  EXPECT_EQ(diagnose(f).bottleneck, Bottleneck::kConsumer);

  // The run delay is the schedstat's second field.
  TempDir root;
  put(root, "/proc/self/task/42/schedstat", "123456789 2500000000 77\n");
  EXPECT_DOUBLE_EQ(internal::thread_run_delay_s(root.str(), 42), 2.5);
  EXPECT_LT(internal::thread_run_delay_s(root.str(), 43), 0);

  Model m;
  m.per_thread = 1000;
  m.consumer = 900;
  AutoTuner t(TuneKnob{2, 1, 2, true}, TuneKnob{4, 4, 4, false});
  for (int i = 0; i < 20 && t.history().empty(); ++i) {
    FeedFigures c = m.step(t.threads().value, t.slots().value);
    m.cum.consumer_run_delay_s += 0.25;  // half of each interval
    c.consumer_run_delay_s = m.cum.consumer_run_delay_s;
    c.consumer_wait_s = 0;
    m.cum.consumer_wait_s = 0;
    t.update(c, m.batches);
  }
  ASSERT_FALSE(t.history().empty());
  EXPECT_EQ(t.history().front().to, 1u);
  EXPECT_NE(t.history().front().reason.find("starved"), std::string::npos) << t.history().front().reason;
}

// The reads an engine lets out under a queue limit of `depth`: the pread fallback (no
// io_uring: qemu-user, seccomp) has pread_threads readers at most.
unsigned reads_out(const IoStats& s, unsigned depth) {
  return s.engine == "pread" ? std::min(depth, IoOptions{}.pread_threads) : depth;
}

// The live loader: auto is the default, reports its knobs, and an explicit count stays.
TEST(AutoTune, LiveLoaderTunesOnlyWhenAuto) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 200});
  LoaderOptions o = testing::image_options(dir.str());
  o.threads = LoaderOptions{}.threads;
  EXPECT_EQ(o.threads, LoaderOptions::kAutoThreads);
  {
    Loader l(o);
    uint64_t seen = 0;
    for (uint64_t e = 0; e < 3; ++e) {
      l.set_epoch(e);
      while (auto b = l.next()) seen += b->size();
    }
    EXPECT_EQ(seen, 3u * 200);
    const LoaderStats s = l.stats();
    EXPECT_TRUE(s.tune.enabled);
    EXPECT_GE(s.tune.threads, 1u);
    EXPECT_LE(s.tune.threads, s.tune.threads_max);
    EXPECT_EQ(s.decode.threads, s.tune.threads);
    EXPECT_GE(s.tune.slots, 1u);
    EXPECT_LE(s.tune.slots, s.tune.slots_max);
    EXPECT_EQ(s.slots, s.tune.slots);
    // The IO queue: opened at its most, tuned from a small start.
    EXPECT_EQ(l.options().io.queue_depth, LoaderOptions::kAutoQueueDepthMax);
    EXPECT_EQ(s.tune.queue_depth_max, LoaderOptions::kAutoQueueDepthMax);
    EXPECT_GE(s.tune.queue_depth, LoaderOptions::kAutoQueueDepthStart);
    EXPECT_EQ(s.io_engine.queue_limit, reads_out(s.io_engine, s.tune.queue_depth));
    EXPECT_NE(s.to_json().find("\"tune\":{"), std::string::npos) << s.to_json();
    EXPECT_NE(s.to_json().find("\"history\":["), std::string::npos) << s.to_json();
  }
  o.threads = 2;
  o.slots = 5;
  Loader l(o);
  while (auto b = l.next()) {
  }
  const LoaderStats s = l.stats();
  EXPECT_FALSE(s.tune.enabled);
  EXPECT_EQ(s.decode.threads, 2u);
  EXPECT_EQ(s.slots, 5u);
  EXPECT_TRUE(s.tune.changes.empty());
  EXPECT_EQ(l.options().threads, 2u);
  EXPECT_EQ(l.options().io.queue_depth, IoOptions{}.queue_depth);  // untuned: as before
  EXPECT_EQ(s.io_engine.queue_limit, reads_out(s.io_engine, IoOptions{}.queue_depth));
}

// Under auto, an explicit IO queue depth is the user's: never tuned.
TEST(AutoTune, ExplicitQueueDepthIsKept) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 80});
  LoaderOptions o = testing::image_options(dir.str());
  o.threads = LoaderOptions::kAutoThreads;
  o.io.queue_depth = 24;
  Loader l(o);
  for (uint64_t e = 0; e < 2; ++e) {
    l.set_epoch(e);
    while (auto b = l.next()) {
    }
  }
  const LoaderStats s = l.stats();
  EXPECT_TRUE(s.tune.enabled);
  EXPECT_EQ(s.tune.queue_depth, 24u);
  EXPECT_EQ(s.tune.queue_depth_max, 24u);
  EXPECT_EQ(s.io_engine.queue_limit, reads_out(s.io_engine, 24));
  EXPECT_EQ(l.options().io.queue_depth, 24u);
  for (const auto& c : s.tune.changes) EXPECT_EQ(c.find("queue_depth"), std::string::npos) << c;
}

// A mixture under auto: its sources' tuners share one CPU budget and split the memory
// budget; stats() sums their knobs and names each change's source.
TEST(AutoTune, MixtureSourcesShareTheBudgets) {
  TempDir a, b;
  testing::write_image_dataset(a.str(), {.count = 120});
  testing::write_image_dataset(b.str(), {.count = 90});
  LoaderOptions o = testing::image_options(a.str());
  o.path.clear();
  o.sources = {a.str(), b.str()};
  o.weights = {1, 1};
  o.threads = LoaderOptions::kAutoThreads;
  o.memory_limit = 64u << 20;
  Loader l(o);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  uint64_t e = 0;
  do {
    l.set_epoch(e++);
    while (auto batch = l.next()) {
    }
  } while (l.stats().tune.changes.empty() && std::chrono::steady_clock::now() < end);
  const LoaderStats s = l.stats();
  ASSERT_TRUE(s.tune.enabled);
  EXPECT_GE(s.tune.threads, 2u);  // each source runs one at least
  EXPECT_LE(s.tune.threads, std::max(2u, s.tune.threads_max));
  EXPECT_EQ(s.tune.memory_budget, 64u << 20);  // split between the two, summed back
  EXPECT_EQ(s.decode.threads, s.tune.threads);
  for (const auto& c : s.tune.changes) EXPECT_EQ(c.rfind("mixture source ", 0), 0u) << c;
}

// reserve_cores: the loader's threads leave the first next()'s CPU to the consumer, and
// the CPU plan's thread count (threads = 0) is one smaller.
TEST(AutoTune, ReserveCoresKeepsTheConsumersCpu) {
  const CpuPlan plan = plan_cpus();
  if (plan.cpus.size() < 2) GTEST_SKIP() << "one CPU: nothing to keep";
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 40});
  LoaderOptions o = testing::image_options(dir.str());
  o.threads = 0;
  o.reserve_cores = 1;
  Loader l(o);
  while (auto b = l.next()) {
  }
  const LoaderStats s = l.stats();
  EXPECT_NE(s.cpu_explanation.find("kept for the consumer (reserve_cores=1)"), std::string::npos) << s.cpu_explanation;
  EXPECT_EQ(s.decode.threads, internal::tune_thread_budget(plan, 1));
  o.reserve_cores = 0;
  Loader none(o);
  while (auto b = none.next()) {
  }
  EXPECT_EQ(none.stats().cpu_explanation.find("kept for the consumer"), std::string::npos);
  EXPECT_EQ(none.stats().decode.threads, plan.threads);
}

// Token data under auto: workers set aside by the tuner sleep without holding batches,
// and every row still comes exactly once.
TEST(AutoTune, LiveTokenLoaderDeliversEveryRow) {
  TempDir dir;
  testing::write_token_dataset(dir.str(), 60000, 16, 8, true);
  LoaderOptions o = testing::token_options(dir.str());
  o.threads = LoaderOptions::kAutoThreads;
  Loader l(o);
  // Epochs until the tuner has moved a knob (a worker woken, or parked again by an undo),
  // for at most 3 s: every epoch still delivers every row once.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  uint64_t e = 0;
  do {
    l.set_epoch(e++);
    std::vector<uint8_t> seen(l.epoch_samples(), 0);
    uint64_t rows = 0;
    while (auto b = l.next()) {
      const TensorView* index = b->find("index");
      ASSERT_NE(index, nullptr);
      for (uint64_t j = 0; j < b->size(); ++j) {
        const auto i = static_cast<const int64_t*>(index->data)[j];
        ASSERT_LT(static_cast<uint64_t>(i), seen.size());
        EXPECT_EQ(seen[static_cast<size_t>(i)]++, 0) << "row " << i << " twice in epoch " << e - 1;
      }
      rows += b->size();
    }
    ASSERT_EQ(rows, l.epoch_samples()) << "epoch " << e - 1;
  } while (l.stats().tune.changes.empty() && std::chrono::steady_clock::now() < end);
  EXPECT_TRUE(l.stats().tune.enabled);
}

}  // namespace
}  // namespace stoker
