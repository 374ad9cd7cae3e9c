// `stoker bench feed`: the whole pipeline against a consumer of set speed, next to the
// in-memory decode limit of the same code on the same thread count, in one run, with the
// bottleneck verdict (diagnose.h): which stage bounds the rate, the numbers, the next step.
// A URL (http(s)://, s3://) is fed through the shard cache (--cache-dir, --cache-limit):
// the network stage's figures (bytes and requests fetched per second, requests in
// flight, the cache's hit rate) come per epoch and for the run, and the in-memory limit
// is measured on the cache's copy (or --local DIR).
// Any image dataset: --field gives per-field transforms (field_spec.h), and the limit
// does every field the loader does (benchlib/decode_limit.h).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "remote_cmd.h"
// Not the library: stoker_benchlib, the benchmarks' own code (the in-memory decode limit).
#include "benchlib/decode_limit.h"
#include "cli.h"
#include "field_spec.h"
#include "stoker/dataset.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/cpu.h"
#include "stoker/loader.h"
// Internal (the tool links the library statically): the Json type, the one JSON writer
// and the library's reports as values (to_json_value), so --json prints the library's
// own JSON, measurements rounded as every report rounds them (figure).
#include "util/json.h"

namespace stoker::cli {
namespace {

uint64_t peak_rss_bytes() {
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

// Spins on the CPU until `ms` of this thread's CPU time are spent; returns the wall time
// that took (more than `ms` when the thread had to wait for a core).
double burn_cpu(double ms) {
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
  };
  const auto w0 = std::chrono::steady_clock::now();
  const double until = cpu_now() + ms / 1e3;
  volatile uint64_t x = 1;
  while (cpu_now() < until)
    for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ull + 1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
}

struct FeedArgs {
  std::string dataset, transform = "train", order = "shuffled", engine = "auto", on_error = "error";
  std::string threads = "auto", memory_limit;
  int64_t reserve_cores = -1;
  double consumer_burn_ms = 0;
  int64_t batch = 64, size = 224, seed = 0, window_chunks = OrderOptions{}.window_chunks, slots = 0, qd = 0,
          epochs = 1, warmup_epochs = 0, limit_records = 0, metrics_port = 0;
  double io_limit_mbps = 0, io_latency_ms = 0, consumer_ms = 0, report = 0, max_seconds = 0, limit_seconds = 3.0;
  bool no_direct = false, no_map = false, json = false, position_ids = false, loss_mask = false, limit_interleaved = false;
  // Packed samples / text tokenised in the loader, or padded batches under a token budget.
  uint32_t seq_len = 0;
  uint64_t max_tokens = 0;
  std::string tokenizer, long_samples = "error";
  std::optional<uint32_t> bos, eos;
  std::optional<std::string> token_counts_dir;
  std::string mix;  // a second dataset: a 2-source mixture of equal weights
  // A URL: the shard cache, how it is fetched, and a local copy for the limit.
  std::string cache_dir, cache_limit, local, remote_reads = "auto";
  int64_t prefetch = LoaderOptions{}.cache_prefetch;
  RemoteArgs remote;
  std::vector<std::string> fields;  // --field values (field_spec.h)
};

// The network figures of several runs (epochs) together: counts summed, the values
// that are "now" (in flight, cache fill) from the last.
void add_network(NetworkStats& all, const NetworkStats& n) {
  if (!n.remote) return;
  all.add_counts(n);
  all.requests_in_flight = n.requests_in_flight;
  all.cache_bytes = n.cache_bytes;
  all.cache_limit = n.cache_limit;
}

int run_feed(const FeedArgs& a) {
  LoaderOptions o;
  o.path = a.dataset;
  o.batch_size = static_cast<uint64_t>(a.batch);
  o.transform.size = static_cast<int>(a.size);
  const std::string& tf = a.transform;
  if (tf == "train") o.transform.kind = ImageTransform::Kind::kTrain;
  else if (tf == "eval") o.transform.kind = ImageTransform::Kind::kEval;
  else o.transform.kind = ImageTransform::Kind::kNone;
  o.fields = parse_field_specs(a.fields, static_cast<int>(a.size));
  o.threads = a.threads == "auto" ? LoaderOptions::kAutoThreads : static_cast<unsigned>(std::stoul(a.threads));
  if (!a.memory_limit.empty()) o.memory_limit = parse_size(a.memory_limit);
  if (a.reserve_cores >= 0) o.reserve_cores = static_cast<unsigned>(a.reserve_cores);
  o.order.kind = parse_order_kind(a.order);
  o.order.seed = static_cast<uint64_t>(a.seed);
  o.order.window_chunks = static_cast<uint64_t>(a.window_chunks);
  o.slots = static_cast<unsigned>(a.slots);  // 0: the loader's default
  o.io.engine = io_engine_kind_from_name(a.engine);
  o.io.queue_depth = static_cast<unsigned>(a.qd);
  o.io.direct = !a.no_direct;
  o.io.map_cached = !a.no_map;
  o.on_error = on_error_from_name(a.on_error);
  o.position_ids = a.position_ids;  // token data packed with --eos
  o.loss_mask = a.loss_mask;
  o.metrics_port = static_cast<unsigned>(a.metrics_port);
  o.seq_len = a.seq_len;
  o.max_tokens = a.max_tokens;
  o.tokenizer = a.tokenizer;
  o.bos = a.bos;
  o.eos = a.eos;
  o.token_counts_dir = a.token_counts_dir;
  o.long_samples = long_samples_from_name(a.long_samples);
  if (!a.mix.empty()) {
    o.sources = {o.path, a.mix};
    o.weights = {1, 1};
  }
  o.rank = 0;
  o.world_size = 1;
  const bool remote = is_remote_url(a.dataset);
  if (remote) {
    if (a.cache_dir.empty()) throw UsageError("a URL needs --cache-dir DIR");
    o.cache_dir = a.cache_dir;
    o.cache_limit = a.cache_limit.empty() ? 0 : parse_size(a.cache_limit);
    o.cache_prefetch = static_cast<unsigned>(a.prefetch);
    o.remote_reads = remote_reads_from_name(a.remote_reads);
    o.remote = a.remote.options();
  }
  o.io.limit_bytes_per_s = a.io_limit_mbps * 1e6;
  o.io.read_latency_s = a.io_latency_ms / 1e3;
  const double consumer_ms = a.consumer_ms;
  const int epochs = static_cast<int>(a.epochs);
  const bool json = a.json;
  // Verdict snapshots every `report` seconds (printed as JSON lines on stderr when given).
  const double report_s = a.report;
  const double snapshot_s = report_s > 0 ? report_s : 0.5;
  // Stops after this many seconds in all (the epoch running then ends early, later epochs
  // are skipped); 0: whole epochs. Bounds the measurements of `stoker bench compare`.
  const double max_seconds = a.max_seconds;

  std::optional<Loader> opened;
  const auto open_t0 = std::chrono::steady_clock::now();
  try {
    opened.emplace(o);
  } catch (const Error& e) {
    // The loader checks the specs against the dataset ("fields['png']: ..."): say which
    // option they came from.
    if (!o.fields.empty() && e.code() == ErrorCode::kInvalidArgument && std::string(e.what()).rfind("fields[", 0) == 0)
      throw UsageError(std::string("--field: ") + e.what());
    throw;
  }
  Loader& loader = *opened;
  const double open_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - open_t0).count();
  if (!o.tokenizer.empty()) {
    const LoaderStats opening = loader.stats();
    if (opening.plan_tokenised > 0)
      std::printf("open: %.2f s, of which %.2f s tokenised %llu documents to count their tokens\n", open_s,
                  opening.plan_s, static_cast<unsigned long long>(opening.plan_tokenised));
    else
      std::printf("open: %.2f s, of which %.2f s read the document token counts an earlier run kept\n", open_s,
                  opening.plan_s);
  }
  DiagnoseOptions dopt;
  dopt.cpus_available = plan_cpus().threads;
  BottleneckTracker tracker(dopt);
  const bool tokens = loader.options().transform.kind != ImageTransform::Kind::kNone && loader.stats().tokens;
  NetworkStats net_total;
  internal::Json per_epoch = internal::Json::array();
  double wall = 0, first_batch = 0, consumer_wait = 0;
  uint64_t samples = 0, bytes = 0, batches = 0, tokens_out = 0;
  uint64_t positions = 0;  // max_tokens: the epoch's batches' B x L
  LoaderStats last;
  StageStats io_total, dec_total;
  // Figures of all epochs together (each epoch's start-up left out): the verdict of runs
  // made of epochs too short for the tracker's intervals.
  FeedFigures all;
  double run_startup = 0;  // the first epoch's start-up
  auto add_epoch = [&all](const FeedFigures& f) {
    auto mean = [](double a, double na, double b, double nb) { return na + nb > 0 ? (a * na + b * nb) / (na + nb) : 0; };
    all.decode_queue_avg = mean(all.decode_queue_avg, all.decode.items, f.decode_queue_avg, f.decode.items);
    all.slots_ready_avg = mean(all.slots_ready_avg, all.batches, f.slots_ready_avg, f.batches);
    all.slots_free_avg = mean(all.slots_free_avg, all.batches, f.slots_free_avg, f.batches);
    all.wall_s += f.wall_s;
    all.startup_s += f.startup_s;
    all.samples += f.samples;
    all.batches += f.batches;
    all.bytes_read += f.bytes_read;
    all.io.threads = f.io.threads;
    all.io.busy_s += f.io.busy_s;
    all.io.wait_s += f.io.wait_s;
    all.io.items += f.io.items;
    all.decode.threads = f.decode.threads;
    all.decode.busy_s += f.decode.busy_s;
    all.decode.wait_s += f.decode.wait_s;
    all.decode.items += f.decode.items;
    all.consumer_wait_s += f.consumer_wait_s;
    all.io_engine_busy_s += f.io_engine_busy_s;
    all.slots = f.slots;
    all.io_engine = f.io_engine;
    all.io_direct = f.io_direct;
    all.slot_memory = f.slot_memory;
    all.tokens = f.tokens;
    add_network(all.network, f.network);
  };
  // --limit-interleaved: the limit's records, loaded after the first epoch (so the peak
  // RSS reported is the feed's own, taken then).
  std::unique_ptr<internal::DecodeLimitMeter> meter;
  uint64_t rss = 0;
  // The loader's options for the in-memory limit. A URL: the local copy given, else the
  // cache's (the loader fills it), so the limit measures decode, not the network.
  // The cache's shards that hold the limit's records, pinned while it runs (the loader
  // may have evicted them, or, reading records by ranged GET, never fetched them).
  std::shared_ptr<ShardCache> limit_cache;
  const auto limit_records = static_cast<uint64_t>(a.limit_records);  // 0: the limit's default
  std::vector<ShardCache::Pin> limit_pins;
  std::optional<LoaderOptions> limit_opts;
  auto limit_options = [&]() -> const LoaderOptions& {
    if (limit_opts) return *limit_opts;
    LoaderOptions lo = loader.options();
    if (remote) {
      lo.path = a.local;
      if (lo.path.empty()) {
        CacheOptions co;
        co.dir = o.cache_dir;
        co.limit = std::numeric_limits<uint64_t>::max();
        co.prefetch = 0;
        limit_cache = ShardCache::open(RemoteStore::open(o.path, o.remote), co);
        lo.path = limit_cache->local_dir();
        const auto ds = Dataset::open(lo.path);
        std::vector<bool> pinned(ds->shard_count());
        for (uint64_t g : internal::decode_limit_records(ds->record_count(),
                                                         internal::decode_limit_record_count(*ds, limit_records))) {
          const size_t s = ds->locate(g).first;
          if (!pinned[s]) limit_pins.push_back(limit_cache->acquire(s));
          pinned[s] = true;
        }
      }
      lo.cache_dir.clear();
    }
    return *(limit_opts = std::move(lo));
  };
  // Warm-up epochs: the run's start-up (threads, first reads, slot pages) out of the
  // figures, as a long epoch would make it; the measured epochs carry on from them.
  const int warmup = static_cast<int>(a.warmup_epochs);
  for (int e = 0; e < warmup; ++e) {
    loader.set_epoch(static_cast<uint64_t>(e));
    while (loader.next()) {
    }
    if (e == 0) first_batch = loader.stats().first_batch_s;
  }
  const auto run_t0 = std::chrono::steady_clock::now();
  double consumer_step_s = 0;  // --consumer-burn-ms: the wall time its steps took
  bool out_of_time = false;
  int epochs_run = 0;
  for (int e = 0; e < epochs && !out_of_time; ++e) {
    ++epochs_run;
    loader.set_epoch(static_cast<uint64_t>(warmup + e));
    auto t0 = std::chrono::steady_clock::now();
    auto next_snapshot = t0 + std::chrono::duration<double>(snapshot_s);
    while (auto b = loader.next()) {
      if (consumer_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(consumer_ms));
      if (a.consumer_burn_ms > 0) consumer_step_s += burn_cpu(a.consumer_burn_ms);
      ++batches;
      if (o.max_tokens > 0) positions += static_cast<uint64_t>((*b)["tokens"].numel());
      const auto now = std::chrono::steady_clock::now();
      if (max_seconds > 0 && now - run_t0 >= std::chrono::duration<double>(max_seconds)) {
        out_of_time = true;
        break;
      }
      if (now >= next_snapshot) {
        const Verdict& v = tracker.update(loader.stats());
        if (report_s > 0) std::fprintf(stderr, "%s\n", v.to_json().c_str());
        next_snapshot += std::chrono::duration<double>(snapshot_s);
      }
    }
    const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last = loader.stats();
    tracker.update(last);
    add_epoch(FeedFigures::from(last));
    if (e == 0) run_startup = FeedFigures::from(last).startup_s;
    if (e == 0 && warmup == 0) first_batch = last.first_batch_s;
    wall += w;
    samples += last.samples;
    tokens_out += (o.max_tokens > 0 ? positions : last.samples * o.seq_len) - last.padding_tokens;
    positions = 0;
    bytes += last.record_bytes;
    consumer_wait += last.consumer_wait_s;
    io_total.threads = last.io.threads;
    io_total.busy_s += last.io.busy_s;
    io_total.wait_s += last.io.wait_s;
    io_total.items += last.io.items;
    dec_total.threads = last.decode.threads;
    dec_total.busy_s += last.decode.busy_s;
    dec_total.wait_s += last.decode.wait_s;
    dec_total.items += last.decode.items;
    add_network(net_total, last.network);
    // The epoch's own verdict (stats(): the whole epoch, its start included).
    per_epoch.push_back({{"epoch", warmup + e},
                         {"wall_s", internal::figure(w)},
                         {"samples_per_s", internal::figure(last.samples / std::max(w, 1e-9))},
                         {"bottleneck", last.bottleneck},
                         {"evidence", last.evidence},
                         {"network", internal::to_json_value(last.network, w, FeedFigures::from(last).fetch_wait_frac())}});
    if (!json)
      std::fprintf(stderr, "epoch %d: %s\n", warmup + e, last.summary().c_str());
    if (a.limit_interleaved) {
      if (!meter) {
        rss = peak_rss_bytes();
        meter = std::make_unique<internal::DecodeLimitMeter>(limit_options(), limit_records);
      }
      meter->run(dec_total.threads, a.limit_seconds / epochs, false);
    }
  }
  double rate = samples / std::max(wall, 1e-9);

  // In-memory limit of the same code on the same threads: after the feed, or the slices
  // taken after each epoch (completed to one pass over the records held).
  internal::DecodeLimit limit;
  if (meter) {
    meter->run(dec_total.threads, 0, true);
    limit = meter->result();
  } else {
    rss = peak_rss_bytes();
    limit = internal::measure_decode_limit(limit_options(), dec_total.threads, a.limit_seconds, limit_records);
  }
  double limit_rate = limit.samples_per_s;
  std::string unit = "samples";
  if (tokens) {
    // Token samples are rows; the limit decompresses whole records.
    auto ds = Dataset::open(limit_options().path);
    const Field& f = ds->schema().fields[static_cast<size_t>(ds->schema().find("tokens"))];
    const double row_bytes = (f.seq_len + 1.0) * dtype_size(f.dtype);
    limit_rate = limit.raw_bytes / std::max(limit.seconds, 1e-9) / row_bytes;
    unit = "rows";
  } else if (o.seq_len > 0 || o.max_tokens > 0) {
    // Packed rows and padded batches hold a varying number of samples: compare tokens
    // (padding left out).
    rate = tokens_out / std::max(wall, 1e-9);
    limit_rate = limit.tokens / std::max(limit.seconds, 1e-9);
    unit = "tokens";
  }
  const double ratio = limit_rate > 0 ? rate / limit_rate : 0;
  // The smoothed verdict; a run too short for intervals gets the verdict of all its epochs.
  Verdict verdict = tracker.current();
  if (verdict.bottleneck == Bottleneck::kUnknown) verdict = diagnose(all, dopt);
  if (verdict.bottleneck == Bottleneck::kUnknown && epochs_run > 1) {
    // Epochs so short that their starts are most of the run: the restarts are then part
    // of the workload, and only the run's own start-up is left out.
    FeedFigures whole = all;
    whole.startup_s = run_startup;
    verdict = diagnose(whole, dopt);
  }
  const double wait_frac = wall > 0 ? consumer_wait / wall : 0;

  std::printf("feed: %.0f %s/s (%.1f MB/s of records), consumer waited %.1f%%, first batch %.3f s, peak RSS %.0f MiB\n",
              rate, unit.c_str(), bytes / 1e6 / std::max(wall, 1e-9), 100 * wait_frac, first_batch, rss / 1048576.0);
  const char* threads_word = dec_total.threads == 1 ? "thread" : "threads";
  const IoStats& ios = last.io_engine;
  auto percent = [](uint64_t part, uint64_t whole) {
    return std::to_string(static_cast<int>(100.0 * part / std::max<uint64_t>(1, whole) + 0.5)) + "%";
  };
  std::string small_records =
      ios.direct && ios.unaligned_reads > 0
          ? " (" + percent(ios.unaligned_reads, ios.requests) + " of reads buffered: small records)"
          : "";
  if (ios.mapped_records > 0)  // shards mapped by the loader (IoOptions::map_cached)
    small_records = " (small records: " + percent(ios.mapped_records, ios.mapped_records + ios.requests) +
                    " taken from " + format_bytes(static_cast<double>(ios.mapped_shard_bytes)) +
                    " of shards mapped from the page cache, which the RSS counts" +
                    (ios.requests > 0 ? std::string("; the rest read buffered)") : std::string(")"));
  std::printf("stages: io %.0f%% busy; decode %u %s %.0f%% busy; io engine %s%s%s\n",
              100 * io_total.busy_frac(wall), dec_total.threads, threads_word, 100 * dec_total.busy_frac(wall),
              ios.engine.empty() ? "(no stats)" : ios.engine.c_str(), ios.direct ? " O_DIRECT" : "", small_records.c_str());
  std::printf("limit: %.0f %s/s in memory (%u %s, %llu records), pipeline/limit = %.3f\n", limit_rate, unit.c_str(),
              dec_total.threads, threads_word, static_cast<unsigned long long>(limit.records_in_memory), ratio);
  if (remote)
    std::printf("network: %s fetched, %llu requests, %llu retries; %s\n",
                format_bytes(static_cast<double>(net_total.bytes_fetched)).c_str(),
                static_cast<unsigned long long>(net_total.requests), static_cast<unsigned long long>(net_total.retries),
                net_total.summary(wall).c_str());
  std::printf("verdict: %s\n", verdict.summary().c_str());
  if (json) {
    using internal::Json;
    auto stage = [&](const StageStats& s) {
      return Json{{"threads", s.threads}, {"busy_frac", internal::figure(s.busy_frac(wall))}, {"busy_s", internal::figure(s.busy_s)},
                  {"wait_s", internal::figure(s.wait_s)}, {"items", s.items}};
    };
    const Json j = {{"dataset", o.path},
                    {"transform", tf},
                    {"fields", a.fields},
                    {"limit_interleaved", a.limit_interleaved},
                    {"threads", dec_total.threads},
                    {"batch", o.batch_size},
                    {"size", o.transform.size},
                    {"epochs", epochs_run},
                    {"warmup_epochs", warmup},
                    {"consumer_ms", internal::figure(consumer_ms)},
                    {"unit", unit},
                    {"samples", samples},
                    {"batches", batches},
                    {"wall_s", internal::figure(wall)},
                    {"samples_per_s", internal::figure(rate)},
                    {"bytes_per_s", internal::figure(bytes / std::max(wall, 1e-9))},
                    {"limit_samples_per_s", internal::figure(limit_rate)},
                    {"ratio", internal::figure(ratio)},
                    {"consumer_wait_frac", internal::figure(wait_frac)},
                    {"first_batch_s", internal::figure(first_batch)},
                    {"open_s", internal::figure(open_s)},
                    {"peak_rss_bytes", rss},
                    {"io_engine", last.io_engine.engine},
                    {"io_direct", last.io_engine.direct},
                    {"io_buffered_reads", last.io_engine.direct ? last.io_engine.unaligned_reads : last.io_engine.requests},
                    {"io_mapped_records", last.io_engine.mapped_records},
                    {"slots", last.slots},
                    {"tune", internal::to_json_value(last)["tune"]},
                    {"consumer_burn_ms", internal::figure(a.consumer_burn_ms)},
                    {"consumer_step_ms", internal::figure(batches ? 1e3 * consumer_step_s / static_cast<double>(batches) : 0.0)},
                    {"network", internal::to_json_value(net_total, wall, all.fetch_wait_frac())},
                    {"per_epoch", per_epoch},
                    {"bottleneck", bottleneck_name(verdict.bottleneck)},
                    {"verdict", internal::to_json_value(verdict)},
                    {"stages",
                     {{"io", stage(io_total)},
                      {"decode", stage(dec_total)},
                      {"consumer", {{"wait_s", internal::figure(consumer_wait)}, {"wait_frac", internal::figure(wait_frac)}}}}}};
    std::printf("%s\n", internal::json_text(j).c_str());
  }
  return 0;
}

void setup(CLI::App& tool) {
  CLI::App* bench = group(tool, "bench", "Measure the feed, its stages and the machine's limits.");
  auto a = std::make_shared<FeedArgs>();
  CLI::App* c = bench->add_subcommand(
      "feed", "Feed rate of the whole pipeline next to the in-memory decode limit of the same code and threads.");
  c->add_option("DATASET", a->dataset, "dataset (packed): a directory, or an http(s):// or s3:// URL")->required();
  c->add_option("--threads", a->threads, "decode threads: auto (tuned as it runs), or a count (0: the CPU plan)")
      ->check(CLI::IsMember({"auto"}) | CLI::Range(0, 4096))
      ->capture_default_str();
  c->add_option("--memory-limit", a->memory_limit, "auto: bytes the ring may take (default: a quarter of the cgroup's or RAM)")
      ->check(byte_size());
  c->add_option("--reserve-cores", a->reserve_cores, "cores kept for the consumer thread (default: the loader's rule)")
      ->check(CLI::Range(0, 4096));
  c->add_option("--consumer-burn-ms", a->consumer_burn_ms,
                "a consumer that computes (spins on the CPU) this long per batch; --json gives its step time")
      ->check(non_negative());
  c->add_option("--transform", a->transform, "the first image field's transform, unless --field names it")
      ->check(CLI::IsMember({"train", "eval", "none"}))
      ->capture_default_str();
  c->add_option("--field", a->fields,
                "a field's transform, repeatable: NAME (as stored), NAME=train[:SIZE], NAME=eval[:SIZE[:RESIZE]], "
                "NAME=follow:LEADER[:nearest|antialiased][:1|3] (e.g. --field jpg=train:224 --field png=follow:jpg)")
      ->check(field_spec())->allow_extra_args(false);
  c->add_option("--consumer-ms", a->consumer_ms, "a consumer taking this long per batch")
      ->check(non_negative())->capture_default_str();
  c->add_option("--batch", a->batch, "batch size")->check(CLI::Range(int64_t{1}, int64_t{1} << 24))->capture_default_str();
  c->add_option("--size", a->size, "output image side")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  c->add_option("--epochs", a->epochs, "epochs")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  c->add_option("--warmup-epochs", a->warmup_epochs,
                "epochs run first and left out of every figure (the run's start-up, as in a long epoch)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  c->add_option("--order", a->order, "sample order")->check(named_by(parse_order_kind, "shuffled|sequential|chunk_local"))
      ->capture_default_str();
  c->add_option("--seed", a->seed, "order seed")->check(non_negative())->capture_default_str();
  c->add_option("--window-chunks", a->window_chunks, "chunks in a chunk_local window")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->capture_default_str();
  c->add_option("--slots", a->slots, "batch slots in the ring (0: the loader's default)")
      ->check(CLI::Range(0, 1 << 16))->capture_default_str();
  c->add_option("--engine", a->engine, "IO engine")->check(named_by(io_engine_kind_from_name, "auto|uring|pread"))
      ->capture_default_str();
  c->add_option("--qd", a->qd, "IO queue depth; 0: 64, or tuned under --threads auto (records)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  c->add_flag("--no-direct", a->no_direct, "buffered reads (no O_DIRECT)");
  c->add_flag("--no-map", a->no_map,
              "read records under a block through the engine even where their shard is all in the page cache "
              "(no mapping)");
  c->add_option("--io-limit-mbps", a->io_limit_mbps, "throttle reads to this many MB/s (rehearses slow storage)")
      ->check(non_negative());
  c->add_option("--io-latency-ms", a->io_latency_ms, "each read takes this long, many at once (rehearses networked storage)")
      ->check(CLI::Range(0.0, 60000.0));
  c->add_option("--on-error", a->on_error, "a bad record stops the run, or is skipped")
      ->check(named_by(on_error_from_name, "error|skip"))->capture_default_str();
  c->add_option("--limit-seconds", a->limit_seconds, "time spent measuring the in-memory limit")
      ->check(positive())->capture_default_str();
  c->add_flag("--limit-interleaved", a->limit_interleaved,
              "measure the limit in slices after each epoch (--limit-seconds / --epochs each, at least one pass in "
              "all) instead of once after the feed: on a shared machine, load swings then weigh on both alike "
              "(the peak RSS is then taken after the first epoch)");
  c->add_option("--limit-records", a->limit_records,
                "records held in memory for the limit (default: all while they fit in 256 MiB, at least 2000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  c->add_option("--report", a->report, "print the verdict as a JSON line on stderr every SECONDS")
      ->check(non_negative());
  c->add_option("--max-seconds", a->max_seconds, "stop after this long in all (0: whole epochs)")
      ->check(non_negative());
  c->add_flag("--position-ids", a->position_ids, "token data packed with --eos: also deliver position_ids");
  c->add_flag("--loss-mask", a->loss_mask, "token data packed with --eos: also deliver loss_mask");
  c->add_option("--seq-len", a->seq_len, "pack samples of varying length (or tokenised text) into rows of N tokens")
      ->check(CLI::Range(1u, 1u << 24));
  c->add_option("--max-tokens", a->max_tokens,
                "batches of a varying number of samples (or tokenised documents) padded to the longest, B x L <= N "
                "(instead of --seq-len and --batch)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  c->add_option("--tokenizer", a->tokenizer,
                "tokenise the dataset's text field in the loader (needs --seq-len or --max-tokens)");
  c->add_option("--bos", a->bos, "with --tokenizer: the id put before each document");
  c->add_option("--eos", a->eos, "with --tokenizer: the id put after each document");
  c->add_option("--token-counts-dir", a->token_counts_dir,
                "with --tokenizer: where document token counts are kept between runs (\"\": none; default: "
                "~/.cache/stoker/token-counts)");
  c->add_option("--long-samples", a->long_samples, "a sample longer than a row")
      ->check(named_by(long_samples_from_name, "error|truncate|split"))
      ->capture_default_str();
  c->add_option("--mix", a->mix, "a second dataset: feed a 2-source mixture of equal weights");
  c->add_option("--cache-dir", a->cache_dir, "URL: the shard cache directory (required with a URL)");
  c->add_option("--cache-limit", a->cache_limit, "URL: cache size (default: the dataset's size)")->check(byte_size());
  c->add_option("--prefetch", a->prefetch, "URL: shards fetched ahead")->check(CLI::Range(0, 1024))
      ->capture_default_str();
  c->add_option("--remote-reads", a->remote_reads,
                "URL: whole shards through the cache, or each record by a ranged GET (auto: records for a "
                "shuffle whose shards the cache cannot all hold)")
      ->check(named_by(remote_reads_from_name, "auto|shards|records"))
      ->capture_default_str();
  c->add_option("--local", a->local,
                "URL: a local copy to measure the in-memory limit on (default: the cache's, which then fetches "
                "the shards holding the limit's records)");
  add_remote_options(c, a->remote);
  c->add_option("--metrics-port", a->metrics_port,
                "serve the loader's stats in the Prometheus text format on this port (stoker top PORT shows them)")
      ->check(CLI::Range(1, 65535));
  c->add_flag("--json", a->json, "a JSON object after the text");
  on_run(c, [a, c] {
    if (a->max_tokens > 0 && c->count("--batch") > 0)
      throw UsageError("--batch: a --max-tokens batch holds as many samples as the budget allows; give one of them");
    if (!is_remote_url(a->dataset))
      reject_options(c,
                     {"--cache-dir", "--cache-limit", "--prefetch", "--remote-reads", "--local", "--connections",
                      "--part", "--profile"},
                     "without a URL");
    return run_feed(*a);
  });
}

}  // namespace

STOKER_COMMAND("bench feed", setup);

}  // namespace stoker::cli
