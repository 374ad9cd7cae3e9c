// The Prometheus text format (version 0.0.4) of StatsVisitor walks (stats.h): names
// from a figure's path with units spelled out, counters kept monotonic over a source's
// run restarts, texts as labelled gauges, families grouped with one TYPE line each.
// include/stoker/metrics.h states the naming rules; this is their one implementation.
//
// Threading: none of its own; a CounterCarry belongs to one source and is used by one
// thread at a time (the server renders under its lock).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stoker/stats.h"

namespace stoker::internal {

/// One sample of a family.
struct MetricSample {
  std::string family;   // "stoker_io_busy_seconds_total"
  bool counter = false;  // else a gauge
  std::string path;     // the figure's path in its walk ("io.busy_s"): the HELP text
  std::string labels;   // rendered, without braces: loader="0",rank="0"
  double value = 0;
};

/// Keeps one source's counters from going down when its run restarts from 0: a value
/// below the last one seen adds the last one to the series' base.
class CounterCarry {
 public:
  double carry(const std::string& family, double value);

 private:
  std::map<std::string, std::pair<double, double>> seen_;  // family -> (last value, base)
};

/// "stoker_" + the path with groups joined by '_' and its unit spelled out:
/// "io.busy_s" -> "stoker_io_busy_seconds", "bytes_read" -> "stoker_read_bytes",
/// "consumer_wait_frac" -> "stoker_consumer_wait_ratio",
/// "samples_per_s" -> "stoker_samples_per_second". Counters get "_total" added by the caller.
std::string metric_name(const std::string& path);

/// A label value as the text format writes it: backslash, double quote and newline escaped.
std::string escape_label_value(const std::string& v);
/// [a-zA-Z_][a-zA-Z0-9_]*
bool valid_label_name(const std::string& name);
/// name="value",... (values escaped).
std::string render_labels(const std::vector<std::pair<std::string, std::string>>& labels);

/// Appends the samples of one walk: `labels` (rendered) on every one, `counters` the
/// paths that are counters.
void collect_samples(const std::function<void(StatsVisitor&)>& walk, const std::string& labels,
                     const std::set<std::string>& counters, CounterCarry& carry, std::vector<MetricSample>& out);

/// The exposition text: families in the order they first appear, each with its HELP
/// and TYPE lines and then every source's samples of it.
std::string render_exposition(const std::vector<MetricSample>& samples);

}  // namespace stoker::internal
