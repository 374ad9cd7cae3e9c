// What `stoker top` reads: one GET of a metrics endpoint (stoker/metrics.h), and its
// Prometheus text parsed into series. The reader of what MetricsServer writes: sample
// lines "name{label="value",...} value", comments skipped; no timestamps, no exemplars.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace stoker::cli {

/// The endpoint could not be read: nothing listens, it closed, it answered no 200.
struct ScrapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct MetricSeries {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// GET http://host:port/metrics (HTTP/1.0, the whole answer read), waiting at most
/// `timeout_ms` in all. ScrapeError: "nothing listens on HOST:PORT (connection refused)",
/// "HOST:PORT closed the connection", "HOST:PORT answered 404", ...
std::string fetch_metrics(const std::string& host, const std::string& port, int timeout_ms);

/// The series of an exposition text, in its order. Malformed lines are skipped.
std::vector<MetricSeries> parse_exposition(const std::string& text);

}  // namespace stoker::cli
