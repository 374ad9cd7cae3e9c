#include "pipeline/loader_metrics.h"

#include <atomic>
#include <cstdlib>

#include "stoker/error.h"
#include "util/parse.h"

namespace stoker::internal {

const std::set<std::string>& loader_counter_paths() {
  static const std::set<std::string> paths = {
      "wall_s",        "batches",      "samples",         "bytes_read",           "record_bytes",
      "skipped",       "io.busy_s",    "io.wait_s",       "io.items",             "decode.busy_s",
      "decode.wait_s", "decode.items", "consumer_wait_s", "network.bytes_fetched", "network.requests",
      "network.retries", "network.fetch_wait_s", "network.whole_fetches", "network.hits", "network.misses",
      "tune.changes", "consumer_run_delay_s",
  };
  return paths;
}

unsigned metrics_port(const LoaderOptions& options) {
  if (options.metrics_port) return options.metrics_port;
  const char* env = std::getenv("STOKER_METRICS_PORT");
  if (!env || !*env) return 0;
  const auto v = parse_decimal<unsigned>(env);
  if (!v || *v > 65535)
    throw_error(ErrorCode::kInvalidArgument, "STOKER_METRICS_PORT='" + std::string(env) + "' is not a TCP port (1..65535)");
  return *v;
}

MetricsRegistration register_loader_metrics(const LoaderOptions& options, int rank,
                                            std::function<LoaderStats()> stats) {
  const unsigned port = metrics_port(options);
  if (!port) return {};
  static std::atomic<uint64_t> loaders{0};
  std::string dataset = options.sources.empty() ? options.path : "mixture";
  if (const size_t q = dataset.find('?'); q != std::string::npos) dataset.resize(q);  // a signed URL's query
  MetricLabels labels = {{"loader", std::to_string(loaders++)}, {"rank", std::to_string(rank)}, {"dataset", dataset}};
  return MetricsServer::on_port(port)->add(
      std::move(labels), [stats = std::move(stats)](StatsVisitor& v) { stats().visit(v); }, loader_counter_paths());
}

}  // namespace stoker::internal
