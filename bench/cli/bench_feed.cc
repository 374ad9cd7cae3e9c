// `stoker bench feed`: the whole pipeline against a consumer of set speed, next to the
// in-memory decode limit of the same code on the same thread count, in one run, with the
// bottleneck verdict (diagnose.h): which stage bounds the rate, the numbers, the next step.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli.h"
#include "pipeline/decode_limit.h"
#include "stoker/dataset.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/cpu.h"
#include "stoker/loader.h"
#include "util/json_text.h"

namespace stoker::cli {
namespace {

uint64_t peak_rss_bytes() {
  struct rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

std::string num(double v) { return internal::json_num(v); }

int run_feed(const Args& args) {
  ArgParser p(args, {"json", "no-direct", "position-ids", "loss-mask"});
  p.check_known({"threads", "transform", "consumer-ms", "batch", "size", "epochs", "json", "order", "seed", "engine",
                 "qd", "slots", "window-chunks", "limit-seconds", "limit-records", "io-limit-mbps", "on-error", "no-direct",
                 "report", "max-seconds", "position-ids", "loss-mask", "mix"});
  if (p.positional().size() != 1) {
    std::cerr << "usage: stoker bench feed DATASET [--threads N] [--transform train|eval|none] [--consumer-ms X] ...\n";
    return 2;
  }
  LoaderOptions o;
  o.path = p.positional()[0];
  o.batch_size = static_cast<uint64_t>(p.get_int("batch", 64));
  o.transform.size = static_cast<int>(p.get_int("size", 224));
  const std::string tf = p.get_or("transform", "train");
  if (tf == "train") o.transform.kind = ImageTransform::Kind::kTrain;
  else if (tf == "eval") o.transform.kind = ImageTransform::Kind::kEval;
  else if (tf == "none") o.transform.kind = ImageTransform::Kind::kNone;
  else throw_error(ErrorCode::kInvalidArgument, "--transform must be train, eval or none");
  o.threads = static_cast<unsigned>(p.get_int("threads", 0));
  o.order.kind = parse_order_kind(p.get_or("order", "shuffled"));
  o.order.seed = static_cast<uint64_t>(p.get_int("seed", 0));
  o.order.window_chunks = static_cast<uint64_t>(p.get_int("window-chunks", static_cast<int64_t>(o.order.window_chunks)));
  o.slots = static_cast<unsigned>(p.get_int("slots", 0));  // 0: the loader's default
  o.io.engine = io_engine_kind_from_name(p.get_or("engine", "auto"));
  o.io.queue_depth = static_cast<unsigned>(p.get_int("qd", 64));
  o.io.direct = !p.flag("no-direct");
  o.on_error = on_error_from_name(p.get_or("on-error", "error"));
  o.position_ids = p.flag("position-ids");  // token data packed with --eos
  o.loss_mask = p.flag("loss-mask");
  if (auto other = p.get("mix")) {  // a 2-source mixture, equal weights: DATASET and this one
    o.sources = {o.path, *other};
    o.weights = {1, 1};
  }
  o.rank = 0;
  o.world_size = 1;
  const double io_limit_mbps = p.get_double("io-limit-mbps", 0);
  if (io_limit_mbps > 0)
    o.wrap_io = [io_limit_mbps](std::unique_ptr<IoEngine> e) {
      return make_throttled_engine(std::move(e), io_limit_mbps * 1e6);
    };
  const double consumer_ms = p.get_double("consumer-ms", 0);
  const int epochs = static_cast<int>(p.get_int("epochs", 1));
  const bool json = p.flag("json");
  // Verdict snapshots every `report` seconds (printed as JSON lines on stderr when given).
  const double report_s = p.get_double("report", 0);
  const double snapshot_s = report_s > 0 ? report_s : 0.5;
  // Stops after this many seconds in all (the epoch running then ends early, later epochs
  // are skipped); 0: whole epochs. Bounds the measurements of `stoker bench compare`.
  const double max_seconds = p.get_double("max-seconds", 0);

  Loader loader(o);
  DiagnoseOptions dopt;
  dopt.cpus_available = plan_cpus().threads;
  BottleneckTracker tracker(dopt);
  const bool tokens = loader.options().transform.kind != ImageTransform::Kind::kNone &&
                      Dataset::open(o.path)->schema().find("tokens") >= 0;
  double wall = 0, first_batch = 0, consumer_wait = 0;
  uint64_t samples = 0, bytes = 0, batches = 0;
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
  };
  const auto run_t0 = std::chrono::steady_clock::now();
  bool out_of_time = false;
  int epochs_run = 0;
  for (int e = 0; e < epochs && !out_of_time; ++e) {
    ++epochs_run;
    loader.set_epoch(static_cast<uint64_t>(e));
    auto t0 = std::chrono::steady_clock::now();
    auto next_snapshot = t0 + std::chrono::duration<double>(snapshot_s);
    while (auto b = loader.next()) {
      if (consumer_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(consumer_ms));
      ++batches;
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
    if (e == 0) first_batch = last.first_batch_s;
    wall += w;
    samples += last.samples;
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
    if (!json)
      std::fprintf(stderr, "epoch %d: %s\n", e, last.summary().c_str());
  }
  const uint64_t rss = peak_rss_bytes();
  const double rate = samples / std::max(wall, 1e-9);

  // In-memory limit of the same code on the same threads.
  auto limit = internal::measure_decode_limit(o.path, o.transform, dec_total.threads,
                                              p.get_double("limit-seconds", 3.0),
                                              static_cast<uint64_t>(p.get_int("limit-records", 2000)), o.order.seed);
  double limit_rate = limit.samples_per_s;
  std::string unit = "samples";
  if (tokens) {
    // Token samples are rows; the limit decompresses whole records.
    auto ds = Dataset::open(o.path);
    const Field& f = ds->schema().fields[static_cast<size_t>(ds->schema().find("tokens"))];
    const double row_bytes = (f.seq_len + 1.0) * dtype_size(f.dtype);
    limit_rate = limit.raw_bytes / std::max(limit.seconds, 1e-9) / row_bytes;
    unit = "rows";
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
  std::printf("stages: io %.0f%% busy; decode %u %s %.0f%% busy; io engine %s%s\n",
              100 * io_total.busy_frac(wall), dec_total.threads, threads_word, 100 * dec_total.busy_frac(wall),
              last.io_engine.engine.empty() ? "(no stats)" : last.io_engine.engine.c_str(),
              last.io_engine.direct ? " O_DIRECT" : "");
  std::printf("limit: %.0f %s/s in memory (%u %s, %llu records), pipeline/limit = %.3f\n", limit_rate, unit.c_str(),
              dec_total.threads, threads_word, static_cast<unsigned long long>(limit.records_in_memory), ratio);
  std::printf("verdict: %s\n", verdict.summary().c_str());
  if (json) {
    auto stage = [&](const StageStats& s) {
      return "{\"threads\":" + std::to_string(s.threads) + ",\"busy_frac\":" + num(s.busy_frac(wall)) +
             ",\"busy_s\":" + num(s.busy_s) + ",\"wait_s\":" + num(s.wait_s) + ",\"items\":" + std::to_string(s.items) + "}";
    };
    std::string j = "{\"dataset\":" + internal::json_str(o.path);
    j += ",\"transform\":\"" + tf + "\",\"threads\":" + std::to_string(dec_total.threads);
    j += ",\"batch\":" + std::to_string(o.batch_size) + ",\"size\":" + std::to_string(o.transform.size);
    j += ",\"epochs\":" + std::to_string(epochs_run) + ",\"consumer_ms\":" + num(consumer_ms);
    j += ",\"unit\":\"" + unit + "\"";
    j += ",\"samples\":" + std::to_string(samples) + ",\"batches\":" + std::to_string(batches);
    j += ",\"wall_s\":" + num(wall);
    j += ",\"samples_per_s\":" + num(rate);
    j += ",\"bytes_per_s\":" + num(bytes / std::max(wall, 1e-9));
    j += ",\"limit_samples_per_s\":" + num(limit_rate);
    j += ",\"ratio\":" + num(ratio);
    j += ",\"consumer_wait_frac\":" + num(wait_frac);
    j += ",\"first_batch_s\":" + num(first_batch);
    j += ",\"peak_rss_bytes\":" + std::to_string(rss);
    j += ",\"io_engine\":\"" + last.io_engine.engine + "\",\"io_direct\":" + (last.io_engine.direct ? "true" : "false");
    j += ",\"slots\":" + std::to_string(last.slots);
    j += ",\"bottleneck\":\"" + std::string(bottleneck_name(verdict.bottleneck)) + "\"";
    j += ",\"verdict\":" + verdict.to_json();
    j += ",\"stages\":{\"io\":" + stage(io_total) + ",\"decode\":" + stage(dec_total) +
         ",\"consumer\":{\"wait_s\":" + num(consumer_wait) + ",\"wait_frac\":" + num(wait_frac) + "}}";
    j += "}";
    std::printf("%s\n", j.c_str());
  }
  return 0;
}

}  // namespace

STOKER_COMMAND("bench feed",
               "DATASET [--threads N] [--transform train|eval|none] [--consumer-ms X] [--batch B] [--size S] "
               "[--epochs E] [--order shuffled|sequential|chunk_local] [--window-chunks W] [--slots N] [--no-direct] [--io-limit-mbps X] [--report SECONDS] [--max-seconds S] [--position-ids] [--loss-mask] [--mix DATASET2] [--json]",
               "Feed rate of the whole pipeline next to the in-memory decode limit of the same code and threads.",
               run_feed);

}  // namespace stoker::cli
