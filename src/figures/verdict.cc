// The bottleneck verdict and its smoothing tracker (see include/stoker/verdict.h).
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "util/json.h"
#include "stoker/verdict.h"
#include "stoker/error.h"
#include "util/platform.h"
#include "util/enum_names.h"

namespace stoker {


namespace {
constexpr internal::EnumName<Bottleneck> kBottleneckNames[] = {{Bottleneck::kStorage, "storage"},
                                                               {Bottleneck::kDecode, "decode"},
                                                               {Bottleneck::kTokenize, "tokenize"},
                                                               {Bottleneck::kCopy, "copy"},
                                                               {Bottleneck::kConsumer, "consumer"},
                                                               {Bottleneck::kNetwork, "network"},
                                                               {Bottleneck::kConsumerStarved, "consumer_starved"},
                                                               {Bottleneck::kUnknown, "unknown"}};
}  // namespace

const char* bottleneck_name(Bottleneck b) noexcept { return internal::enum_name(kBottleneckNames, b, "unknown"); }
Bottleneck bottleneck_from_name(const std::string& name) {
  return internal::enum_from_name(kBottleneckNames, name, "bottleneck");
}

// ---- figures ---------------------------------------------------------------------------

FeedFigures FeedFigures::from(const LoaderStats& s) {
  FeedFigures f;
  static_cast<FeedCounters&>(f) = s;
  f.startup_s = s.batches > 0 ? std::min(s.first_batch_s, s.wall_s) : s.wall_s;
  f.io_engine_busy_s = s.io_engine.busy_s;
  f.io_engine = s.io_engine.engine;
  f.io_direct = s.io_engine.direct;
  f.io_queue_full_s = s.io_engine.queue_full_s;
  return f;
}

void record_verdict(LoaderStats& s, const Verdict& v) {
  s.bottleneck = bottleneck_name(v.bottleneck);
  s.evidence = v.evidence;
  s.advice = v.advice;
}

FeedFigures FeedFigures::between(const LoaderStats& before, const LoaderStats& after) {
  return between(from(before), from(after));
}

namespace {

StageStats stage_diff(const StageStats& a, const StageStats& b) {
  StageStats d;
  d.threads = b.threads;
  d.busy_s = std::max(0.0, b.busy_s - a.busy_s);
  d.wait_s = std::max(0.0, b.wait_s - a.wait_s);
  d.items = b.items >= a.items ? b.items - a.items : 0;
  return d;
}

NetworkStats network_diff(const NetworkStats& a, const NetworkStats& b) {
  if (!b.remote) return b;
  auto sub = [](uint64_t x, uint64_t y) { return x >= y ? x - y : 0; };
  NetworkStats d = b;  // requests in flight and the cache's fill: the latest values
  d.bytes_fetched = sub(b.bytes_fetched, a.bytes_fetched);
  d.requests = sub(b.requests, a.requests);
  d.retries = sub(b.retries, a.retries);
  d.whole_fetches = sub(b.whole_fetches, a.whole_fetches);
  d.busy_s = std::max(0.0, b.busy_s - a.busy_s);
  d.request_s = std::max(0.0, b.request_s - a.request_s);
  d.fetch_wait_s = std::max(0.0, b.fetch_wait_s - a.fetch_wait_s);
  d.startup_fetch_wait_s = std::max(0.0, b.startup_fetch_wait_s - a.startup_fetch_wait_s);
  d.hits = sub(b.hits, a.hits);
  d.misses = sub(b.misses, a.misses);
  return d;
}

// Mean over the interval of a running mean taken over `n` observations.
double interval_mean(double avg_a, uint64_t n_a, double avg_b, uint64_t n_b) {
  if (n_b <= n_a) return avg_b;
  return std::max(0.0, (avg_b * static_cast<double>(n_b) - avg_a * static_cast<double>(n_a)) /
                           static_cast<double>(n_b - n_a));
}

}  // namespace

FeedFigures FeedFigures::between(const FeedFigures& a, const FeedFigures& b) {
  // A restarted run (set_epoch resets the loader's counters) has nothing to subtract.
  if (b.wall_s < a.wall_s || b.samples < a.samples || b.batches < a.batches || b.decode.items < a.decode.items)
    return b;
  FeedFigures d = b;
  d.wall_s = b.wall_s - a.wall_s;
  d.startup_s = a.batches > 0 ? 0 : std::clamp(b.startup_s - a.wall_s, 0.0, d.wall_s);
  d.samples = b.samples - a.samples;
  d.batches = b.batches - a.batches;
  d.bytes_read = b.bytes_read >= a.bytes_read ? b.bytes_read - a.bytes_read : 0;
  d.io = stage_diff(a.io, b.io);
  d.decode = stage_diff(a.decode, b.decode);
  if (b.copy) d.copy = a.copy ? stage_diff(*a.copy, *b.copy) : *b.copy;
  d.consumer_wait_s = std::max(0.0, b.consumer_wait_s - a.consumer_wait_s);
  d.consumer_run_delay_s = std::max(0.0, b.consumer_run_delay_s - a.consumer_run_delay_s);
  d.decode_queue_avg = interval_mean(a.decode_queue_avg, a.decode.items, b.decode_queue_avg, b.decode.items);
  d.slots_ready_avg = interval_mean(a.slots_ready_avg, a.batches, b.slots_ready_avg, b.batches);
  d.slots_free_avg = interval_mean(a.slots_free_avg, a.batches, b.slots_free_avg, b.batches);
  d.io_engine_busy_s = std::max(0.0, b.io_engine_busy_s - a.io_engine_busy_s);
  // An engine made anew (a run stopped with reads in flight) counts from 0 again.
  d.io_queue_full_s = b.io_queue_full_s >= a.io_queue_full_s ? b.io_queue_full_s - a.io_queue_full_s : b.io_queue_full_s;
  d.network = network_diff(a.network, b.network);
  return d;
}

double FeedFigures::fetch_wait_frac() const noexcept {
  const double w = wall_s - startup_s;
  if (w <= 0 || !network.remote) return 0;
  // As for the consumer: the wait before the first batch is counted on its own.
  return std::clamp((network.fetch_wait_s - network.startup_fetch_wait_s) / w, 0.0, 1.0);
}

double FeedFigures::consumer_wait_frac() const noexcept {
  const double w = wall_s - startup_s;
  if (w <= 0) return 0;
  // The wait for the first batch is the pipeline filling up, not the steady state.
  return std::clamp((consumer_wait_s - startup_s) / w, 0.0, 1.0);
}

// ---- verdict ---------------------------------------------------------------------------

namespace {

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * f);
  return b;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string threads_text(unsigned n) { return std::to_string(n) + (n == 1 ? " thread" : " threads"); }

}  // namespace

Verdict diagnose(const FeedFigures& f, const DiagnoseOptions& o, Bottleneck current) {
  // Tokenising in the loader runs on the decode threads: the same station, named apart.
  if (current == Bottleneck::kTokenize) current = Bottleneck::kDecode;
  Verdict v;
  v.figures = f;
  // Start-up (before the first batch) says nothing about the steady state: judge only
  // intervals with enough time after it.
  if (f.wall_s - f.startup_s < o.min_interval_s || f.batches == 0) {
    v.evidence = "not enough data: " + fmt("%.3f s", f.wall_s - f.startup_s) + " after start-up, " +
                 std::to_string(f.batches) + " batches";
    v.advice = "wait for a longer interval";
    return v;
  }
  const double h = o.hysteresis;
  const double cw = f.consumer_wait_frac();
  const double wall = f.wall_s;
  // Busy time is booked when a task ends, so an interval can hold a little more than its
  // length: clamp to 100%.
  const double dec_busy = std::min(1.0, f.decode.busy_frac(wall));
  const double qpt = f.decode_queue_avg / std::max(1u, f.decode.threads);
  const double copy_busy = f.copy ? std::min(1.0, f.copy->busy_frac(wall)) : 0;
  const double slots = std::max(1u, f.slots);
  const unsigned cpus = o.cpus_available ? o.cpus_available : internal::usable_cpus();
  auto lean = [&](Bottleneck b) { return current == b ? h : 0.0; };

  const std::string waited = "consumer waited " + pct(cw);
  const std::string ready = fmt("%.1f", f.slots_ready_avg) + " of " + std::to_string(f.slots) + " slots ready";
  const std::string dec = threads_text(f.decode.threads) + " " + pct(dec_busy) + " busy";

  // A remote dataset whose first batch waited on fetches for much of the interval: a
  // cold epoch whose first batches need most shards (a global shuffle) waits for the
  // network before anything else runs, whatever bounds the feed after that.
  const bool startup_net = f.network.remote && f.network.startup_fetch_wait_s >=
                                                   (o.fetch_wait_high - lean(Bottleneck::kNetwork)) * wall;
  // The consumer's thread waiting for a CPU rather than for batches: the loader's threads
  // (or anything else) take the cores the trainer needs.
  const double run_delay = wall > 0 ? std::min(1.0, f.consumer_run_delay_s / wall) : 0;
  Bottleneck b;
  if (startup_net) {
    b = Bottleneck::kNetwork;
  } else if (run_delay >= o.consumer_run_delay_high - lean(Bottleneck::kConsumerStarved) &&
             cw < o.consumer_wait_ok + lean(Bottleneck::kConsumer)) {
    b = Bottleneck::kConsumerStarved;
  } else if (cw < o.consumer_wait_ok + lean(Bottleneck::kConsumer)) {
    b = Bottleneck::kConsumer;
  } else {
    const bool copy_sat = f.copy && (copy_busy >= o.busy_high - lean(Bottleneck::kCopy) ||
                                     // host batches pile up in front of the copy
                                     (f.slots_ready_avg >= 0.5 * slots && copy_busy >= 0.5) ||
                                     // the loader's ring is full while the trainer waits:
                                     // whatever is behind sits between the two
                                     f.slots_ready_avg >= 0.75 * slots);
    const bool dec_sat = dec_busy >= o.busy_high - lean(Bottleneck::kDecode) ||
                         (qpt >= o.queue_per_thread_high * (current == Bottleneck::kDecode ? 0.75 : 1.0) &&
                          dec_busy >= 0.5);
    // Neither saturated: decoders busy more often than not are still the larger share of
    // the wait, unless the storage is known to be busier (reads in flight).
    const double storage_busy = std::min(1.0, f.io_engine_busy_s / wall);
    const bool dec_mostly = dec_busy >= o.starved_below - lean(Bottleneck::kDecode) &&
                            !(f.io_engine_busy_s > 0 && storage_busy > dec_busy + lean(Bottleneck::kStorage));
    // A remote dataset whose readers block on shards still on their way: whatever the
    // decoders do meanwhile, they wait for the network.
    const bool net_wait =
        f.network.remote && f.fetch_wait_frac() >= o.fetch_wait_high - lean(Bottleneck::kNetwork);
    if (copy_sat && dec_sat) b = copy_busy >= dec_busy ? Bottleneck::kCopy : Bottleneck::kDecode;
    else if (copy_sat) b = Bottleneck::kCopy;
    else if (dec_sat) b = Bottleneck::kDecode;
    else if (net_wait) b = Bottleneck::kNetwork;
    else if (dec_mostly) b = Bottleneck::kDecode;
    else b = Bottleneck::kStorage;
  }
  v.bottleneck = v.raw = b;

  switch (b) {
    case Bottleneck::kConsumer: {
      v.evidence = "consumer bound: " + waited + ", " + ready + ", decode " + dec;
      if (f.copy) v.evidence += ", copy stream " + pct(copy_busy) + " busy";
      v.advice = "input keeps up: the consumer (GPU step) sets the pace; speed up the step (mixed precision, "
                 "larger batch per GPU)";
      if (f.decode.threads > 1 && dec_busy < 0.5)
        v.advice += "; decode has headroom, about " +
                    std::to_string(std::max(1u, static_cast<unsigned>(dec_busy * f.decode.threads + 0.999))) +
                    " of " + std::to_string(f.decode.threads) + " threads would do";
      break;
    }
    case Bottleneck::kConsumerStarved: {
      v.evidence = "consumer starved of CPU: its thread waited for a CPU " + pct(run_delay) + " of the time, " + waited +
                   ", decode " + dec;
      v.advice = "keep a core for the trainer: reserve_cores=1 (pins the loader off the consumer's core), fewer "
                 "decode threads (threads=\"auto\" steps back), or more CPUs";
      break;
    }
    case Bottleneck::kDecode: {
      if (f.tokenize) {
        v.bottleneck = v.raw = Bottleneck::kTokenize;
        v.evidence = "tokenize bound: " + dec + " tokenising, " + waited + ", " + ready;
        v.advice = f.decode.threads + 1 < cpus
                       ? "add decode threads (" + std::to_string(f.decode.threads) + " in use, " +
                             std::to_string(cpus) + " CPUs): LoaderOptions.threads / --threads"
                       : "every CPU tokenises: tokenise once at pack time (`stoker pack text`; the loader then "
                         "copies token rows), or add CPUs";
        break;
      }
      v.evidence = "decode bound: " + dec + ", " + waited + ", " + ready + ", " + fmt("%.1f", qpt) +
                   " records queued per thread";
      if (f.decode.threads + 1 < cpus)
        v.advice = "add decode threads (" + std::to_string(f.decode.threads) + " in use, " + std::to_string(cpus) +
                   " CPUs): LoaderOptions.threads / --threads";
      else if (f.tokens)
        v.advice = "every CPU unpacks tokens: pack without --zstd (rows are then copied, not decompressed), "
                   "or add CPUs";
      else if (f.fast_crop)  // crops already decode only what they cover
        v.advice = "every CPU decodes: decode fewer pixels — store images nearer the training size so the "
                   "decoder's 1/2-1/4 DCT scaling applies, use a cheaper transform, or add CPUs";
      else
        v.advice = "every CPU decodes: decode fewer pixels — repack JPEG training sets with `stoker pack ... "
                   "--fast-crop` (lossless; crops then decode only what they cover), store images nearer the "
                   "training size so the decoder's 1/2-1/4 DCT scaling applies, use a cheaper transform, or add "
                   "CPUs";
      break;
    }
    case Bottleneck::kCopy: {
      v.evidence = "copy bound: copy stream " + pct(copy_busy) + " busy, " + waited + ", " + ready +
                   " (host batches waiting for the copy), decode " + dec;
      if (f.slot_memory != "pinned")
        v.advice = "use pinned host memory (StagerOptions.pinned_host_slots): pageable copies go through a "
                   "bounce buffer and are not asynchronous";
      else
        v.advice = "copy fewer bytes: ship uint8 and convert on the GPU (StagerOptions.image_dtype), a larger "
                   "batch per copy, and check the PCIe link with `stoker doctor`";
      break;
    }
    case Bottleneck::kStorage: {
      const double mbps = f.bytes_read / wall / 1e6;
      v.evidence = "storage bound: " + waited + ", decoders starved (" + dec + ", " +
                   fmt("%.1f", f.decode_queue_avg) + " records queued), " + ready + ", reads " +
                   fmt("%.1f MB/s", mbps);
      if (f.io_engine_busy_s > 0) v.evidence += ", reads in flight " + pct(std::min(1.0, f.io_engine_busy_s / wall));
      v.advice = "reads are the limit (more decode threads will not help): stage the dataset on local NVMe or in "
                 "RAM, raise the IO queue depth (IoOptions.queue_depth, --qd) for networked storage, and compare "
                 "with `stoker bench io`";
      if (f.io_engine == "pread") v.advice += "; io_uring is not in use (see `stoker doctor`)";
      break;
    }
    case Bottleneck::kNetwork: {
      v.evidence = "network bound: " + f.network.summary(wall) + ", readers waited on fetches ";
      if (startup_net)
        v.evidence += fmt("%.2f s", f.network.startup_fetch_wait_s) + " before the first batch (" +
                      pct(f.network.startup_fetch_wait_s / wall) + " of " + fmt("%.2f s", wall) + ") and " +
                      pct(f.fetch_wait_frac()) + " of the time after it";
      else
        v.evidence += pct(f.fetch_wait_frac()) + " of the time";
      v.evidence += ", " + waited + ", decode " + dec;
      v.advice = "shards do not arrive fast enough: fetch further ahead (LoaderOptions.cache_prefetch) and with more "
                 "ranged GETs in flight (remote.connections, --connections) if the link has room; measure it with "
                 "`stoker doctor --dataset URL`; once cached (cache_limit holding the dataset) later epochs read "
                 "at local speed";
      if (startup_net)
        v.advice += "; a cold epoch in a global shuffle needs nearly every shard for its first batches: order "
                    "chunk_local starts once the first shards are in";
      break;
    }
    case Bottleneck::kTokenize:  // not a classification: kDecode's case names tokenising work so
    case Bottleneck::kUnknown: break;
  }
  return v;
}


namespace internal {

Json to_json_value(const Verdict& v) {
  const FeedFigures& f = v.figures;
  return Json{{"bottleneck", bottleneck_name(v.bottleneck)},
              {"raw", bottleneck_name(v.raw)},
              {"evidence", v.evidence},
              {"advice", v.advice},
              {"interval_s", figure(f.wall_s)},
              {"samples_per_s", figure(f.samples_per_s())},
              {"consumer_wait_frac", figure(f.consumer_wait_frac())},
              {"decode_threads", f.decode.threads},
              {"decode_busy_frac", figure(std::min(1.0, f.decode.busy_frac(f.wall_s)))},
              {"decode_queue_avg", figure(f.decode_queue_avg)},
              {"io_busy_frac", figure(std::min(1.0, f.io.busy_frac(f.wall_s)))},
              {"io_engine_busy_frac", figure(f.wall_s > 0 ? std::min(1.0, f.io_engine_busy_s / f.wall_s) : 0)},
              {"read_bytes_per_s", figure(f.wall_s > 0 ? f.bytes_read / f.wall_s : 0)},
              {"copy_busy_frac", f.copy ? Json(figure(std::min(1.0, f.copy->busy_frac(f.wall_s)))) : Json(nullptr)},
              {"slots_ready_avg", figure(f.slots_ready_avg)},
              {"slots_free_avg", figure(f.slots_free_avg)},
              {"slots", f.slots},
              {"network", to_json_value(f.network, f.wall_s, f.fetch_wait_frac())},
              {"intervals", v.intervals}};
}

}  // namespace internal

std::string Verdict::to_json() const { return internal::json_text(internal::to_json_value(*this)); }

std::string Verdict::summary() const { return evidence + (advice.empty() ? "" : " -> next: " + advice); }

// ---- tracker ---------------------------------------------------------------------------

BottleneckTracker::BottleneckTracker(DiagnoseOptions options) : options_(options) {
  if (options_.confirm_intervals == 0) options_.confirm_intervals = 1;
}

const Verdict& BottleneckTracker::update(const LoaderStats& cumulative) {
  return update(FeedFigures::from(cumulative));
}

const Verdict& BottleneckTracker::update(const FeedFigures& cumulative) {
  const FeedFigures interval = last_ ? FeedFigures::between(*last_, cumulative) : cumulative;
  Verdict v = diagnose(interval, options_, current_.bottleneck);
  // An interval too short to judge does not advance the baseline: it joins the next one.
  if (v.raw == Bottleneck::kUnknown) {
    if (current_.bottleneck == Bottleneck::kUnknown) {
      current_ = v;
      current_.intervals = intervals_;
    }
    if (!last_) last_ = cumulative;
    return current_;
  }
  last_ = cumulative;
  ++intervals_;
  if (current_.bottleneck == Bottleneck::kUnknown || v.raw == current_.bottleneck) {
    candidate_ = Bottleneck::kUnknown;
    candidate_count_ = 0;
    current_ = std::move(v);
  } else {
    if (v.raw == candidate_) ++candidate_count_;
    else {
      candidate_ = v.raw;
      candidate_count_ = 1;
    }
    if (candidate_count_ >= options_.confirm_intervals) {
      candidate_ = Bottleneck::kUnknown;
      candidate_count_ = 0;
      current_ = std::move(v);
    } else {
      // Keep the verdict in force (and its evidence); record what this interval said.
      current_.raw = v.raw;
      current_.figures = v.figures;
    }
  }
  current_.intervals = intervals_;
  return current_;
}

}  // namespace stoker
