// StageStats, NetworkStats and LoaderStats (feed_stats.h): their figures by name (stats.h): the one description from which to_json() and
// the Python binding's stats() dict are made, and the one-line summary.
#include <algorithm>
#include <cstdio>
#include <string>

#include "stoker/feed_stats.h"
#include "stoker/verdict.h"
#include "util/json.h"

namespace stoker {

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void visit_stage(StatsVisitor& v, const char* name, const StageStats& s, double wall_s) {
  v.begin_group(name);
  v.count("threads", s.threads);
  v.figure("busy_s", s.busy_s);
  v.figure("wait_s", s.wait_s);
  v.count("items", s.items);
  v.figure("busy_frac", s.busy_frac(wall_s));
  v.end_group();
}

}  // namespace

void NetworkStats::visit(StatsVisitor& v, double wall_s, double fetch_wait_frac) const {
  v.count("bytes_fetched", bytes_fetched);
  v.figure("bytes_per_s", bytes_per_s(wall_s));
  v.count("requests", requests);
  v.figure("requests_per_s", requests_per_s(wall_s));
  v.count("retries", retries);
  v.figure("requests_in_flight_avg", mean_in_flight(wall_s));
  v.figure("fetch_wait_s", fetch_wait_s);
  v.figure("fetch_wait_frac", fetch_wait_frac);
  v.text("reads", record_reads ? "records" : "shards");
  v.flag("range_ignored", range_ignored);
  v.count("whole_fetches", whole_fetches);
  v.count("hits", hits);
  v.count("misses", misses);
  if (hits + misses) v.figure("hit_rate", hit_rate());
  else v.none("hit_rate");
  v.count("cache_bytes", cache_bytes);
  v.count("cache_limit", cache_limit);
}

void NetworkStats::add_counts(const NetworkStats& n) noexcept {
  if (!n.remote) return;
  remote = true;
  record_reads = record_reads || n.record_reads;
  range_ignored = range_ignored || n.range_ignored;
  whole_fetches += n.whole_fetches;
  bytes_fetched += n.bytes_fetched;
  requests += n.requests;
  retries += n.retries;
  busy_s += n.busy_s;
  request_s += n.request_s;
  fetch_wait_s += n.fetch_wait_s;
  startup_fetch_wait_s += n.startup_fetch_wait_s;
  hits += n.hits;
  misses += n.misses;
}

std::string NetworkStats::summary(double wall_s) const {
  std::string s = "fetched " + fmt("%.1f MB/s", bytes_per_s(wall_s) / 1e6) + ", " +
                  fmt("%.1f requests/s", requests_per_s(wall_s)) + ", " +
                  fmt("%.1f requests in flight", mean_in_flight(wall_s));
  if (record_reads)
    s += ", records by ranged GET (no shard cached)";
  else
    s += ", cache hit rate " + (hits + misses ? fmt("%.0f%%", 100 * hit_rate()) + " (" + std::to_string(hits) + " of " +
                                                    std::to_string(hits + misses) + " shards in place)"
                                              : std::string("- (no shard read)"));
  s += ", cache " + fmt("%.1f MB", cache_bytes / 1e6) + " of " + fmt("%.1f MB", cache_limit / 1e6);
  if (range_ignored) s += ", the server ignores Range (" + std::to_string(whole_fetches) + " whole-object GETs)";
  return s;
}

void LoaderStats::visit(StatsVisitor& v) const {
  v.figure("wall_s", wall_s);
  v.figure("first_batch_s", first_batch_s);
  v.count("batches", batches);
  v.count("samples", samples);
  v.figure("samples_per_s", wall_s > 0 ? static_cast<double>(samples) / wall_s : 0.0);
  v.count("bytes_read", bytes_read);
  v.count("record_bytes", record_bytes);
  v.count("skipped", skipped);
  v.count("padding_tokens", padding_tokens);
  v.count("truncated_tokens", truncated_tokens);
  v.count("empty_samples", empty_samples);
  v.figure("plan_s", plan_s);
  v.count("plan_tokenised", plan_tokenised);
  v.flag("tokens", tokens);
  v.flag("tokenize", tokenize);
  visit_stage(v, "io", io, wall_s);
  visit_stage(v, "decode", decode, wall_s);
  v.figure("consumer_wait_s", consumer_wait_s);
  v.figure("consumer_wait_frac", consumer_wait_frac());
  v.figure("consumer_run_delay_s", consumer_run_delay_s);
  v.figure("decode_queue_avg", decode_queue_avg);
  v.count("slots", slots);
  v.figure("slots_ready_avg", slots_ready_avg);
  v.figure("slots_free_avg", slots_free_avg);
  v.text("io_engine", io_engine.engine);
  v.flag("io_direct", io_engine.direct);
  v.count("io_mapped_records", io_engine.mapped_records);
  v.text("io_fallback", io_engine.fallback_reason);
  if (network.remote) {
    v.begin_group("network");
    network.visit(v, wall_s, FeedFigures::from(*this).fetch_wait_frac());
    v.count("requests_in_flight", network.requests_in_flight);
    v.figure("busy_frac", wall_s > 0 ? std::min(1.0, network.busy_s / wall_s) : 0);
    v.end_group();
  } else {
    v.none("network");
  }
  v.text("slot_memory", slot_memory);
  v.text("cpus", cpu_explanation);
  v.text("bottleneck", bottleneck);
  v.text("evidence", evidence);
  v.text("advice", advice);
  v.begin_group("tune");
  tune.visit(v);
  v.end_group();
}

void TuneStats::visit(StatsVisitor& v) const {
  v.flag("enabled", enabled);
  v.flag("settled", settled);
  v.count("threads", threads);
  v.count("threads_max", threads_max);
  v.count("slots", slots);
  v.count("slots_max", slots_max);
  v.count("queue_depth", queue_depth);
  v.count("queue_depth_max", queue_depth_max);
  v.count("memory_budget_bytes", memory_budget);
  v.figure("noise", noise);
  v.count("changes", changes.size());
  v.figure("last_change_s", last_change_s);
  v.text("last_change", changes.empty() ? std::string() : changes.back());
}

namespace internal {

Json to_json_value(const LoaderStats& s) {
  JsonStatsWriter w;
  s.visit(w);
  Json j = w.take();
  j["tune"]["history"] = s.tune.changes;
  return j;
}

Json to_json_value(const NetworkStats& n, double wall_s, double fetch_wait_frac) {
  if (!n.remote) return Json(nullptr);
  JsonStatsWriter w;
  n.visit(w, wall_s, fetch_wait_frac);
  return w.take();
}

}  // namespace internal

std::string LoaderStats::to_json() const { return internal::json_text(internal::to_json_value(*this)); }

double LoaderStats::consumer_wait_frac() const { return FeedFigures::from(*this).consumer_wait_frac(); }

std::string LoaderStats::summary() const {
  // The verdict's figures (diagnose.h), so summary and evidence never disagree.
  const auto busy = [&](const StageStats& s) { return 100 * std::min(1.0, s.busy_frac(wall_s)); };
  char b[512];
  std::snprintf(b, sizeof b,
                "%.0f samples/s over %.2f s; io %.0f%% busy; decode %u thread%s %.0f%% busy; consumer waited %.0f%%; "
                "%.1f of %u slots ready on average",
                wall_s > 0 ? samples / wall_s : 0.0, wall_s, busy(io), decode.threads,
                decode.threads == 1 ? "" : "s", busy(decode), 100 * consumer_wait_frac(), slots_ready_avg, slots);
  if (!network.remote) return b;
  return std::string(b) + "; network " + network.summary(wall_s);
}

}  // namespace stoker
