// MetricsServer: a process's figures in the Prometheus text format (version 0.0.4) over
// HTTP, for Prometheus to scrape and Grafana to draw. A Loader with
// LoaderOptions::metrics_port (or STOKER_METRICS_PORT) adds itself to the server of that
// port; other code may add any source of figures (a StatsVisitor walk, stats.h).
//
// What a scrape answers: GET /metrics (or /) renders every source added now. Each
// source's figures are named after their path in its walk, "stoker_" first, groups
// joined by '_', units spelled out as Prometheus's conventions ask ("_s" -> "_seconds",
// "_frac" -> "_ratio", "_per_s" -> "_per_second", a leading "bytes_" moved to the end).
//   - The source's counter names (figures that only grow while its run lasts) are
//     counters, "_total" last. A source whose run restarts (a Loader's next epoch) starts
//     its figures again from 0; the server keeps the last value it saw and adds it on, so
//     a counter never goes down. A source that says when its run ended
//     (MetricsRegistration::observe) loses none of its counts; one that does not loses
//     what its finished run counted after the last scrape.
//   - Every other number and flag is a gauge; a group that does not apply (none()) is
//     left out.
//   - A text is a gauge of value 1 that carries the text as a label of its own name:
//     stoker_bottleneck{loader="0",bottleneck="decode"} 1.
// Every series carries the source's labels (a Loader's: loader, its ordinal in the
// process, rank and dataset), so several sources in one process are told apart.
//
// The HTTP server is one thread ("stoker-metrics") serving one connection at a time,
// listening on every IPv4 address: a scrape renders a few kB, and Prometheus sends one
// request per interval. Anything but GET/HEAD of /metrics or / is answered 404 or 405.
//
// Threading: every member may be called from any thread. A source's walk runs on the
// server's thread during a scrape (a Loader's stats() may be called from any thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "stoker/stats.h"

namespace stoker {

/// Label name and value pairs, in order.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsServer;

/// A source's place on a server: removing it on destruction (and, with the last one, the
/// server). Move-only; the empty state holds nothing.
class MetricsRegistration {
 public:
  MetricsRegistration() = default;
  MetricsRegistration(std::shared_ptr<MetricsServer> server, uint64_t id) : server_(std::move(server)), id_(id) {}
  ~MetricsRegistration();
  MetricsRegistration(MetricsRegistration&& o) noexcept : server_(std::move(o.server_)), id_(o.id_) {}
  MetricsRegistration& operator=(MetricsRegistration&& o) noexcept;
  MetricsRegistration(const MetricsRegistration&) = delete;
  MetricsRegistration& operator=(const MetricsRegistration&) = delete;
  /// Reads the source's figures now, as a scrape would, without answering anyone: call
  /// it when the source's run has ended and before the next starts (a Loader does, in
  /// set_epoch() and load_state()), so its counters carry the run's final counts.
  void observe();
  /// The server this source is on, or null.
  MetricsServer* server() const noexcept { return server_.get(); }

 private:
  std::shared_ptr<MetricsServer> server_;
  uint64_t id_ = 0;
};

class MetricsServer {
 public:
  /// The process's server on TCP port `port`, listening from this call on: the one
  /// already open on that port when there is one (so a process's loaders share a port),
  /// a new one otherwise, which lives while a registration or a returned pointer holds
  /// it. Port 0: a new server on a port the kernel picks (port() says which).
  /// kUnavailable naming the port when it is in use ("metrics port 9100 is in use ...")
  /// or cannot be bound; kInvalidArgument for a port over 65535.
  static std::shared_ptr<MetricsServer> on_port(unsigned port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// The TCP port listened on.
  unsigned port() const noexcept;
  /// Adds a source: `walk` hands its figures to a visitor (a stats struct's visit()) at
  /// each scrape; `counters` names the figures that are counters, by their path in the
  /// walk ("samples", "io.busy_s"). Label names must match [a-zA-Z_][a-zA-Z0-9_]*
  /// (kInvalidArgument naming the label otherwise).
  [[nodiscard]] MetricsRegistration add(MetricLabels labels, std::function<void(StatsVisitor&)> walk,
                                        std::set<std::string> counters);
  /// The text a scrape answers now.
  std::string render();

 private:
  friend class MetricsRegistration;
  struct Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  void remove(uint64_t id) noexcept;
  void observe(uint64_t id);
  std::unique_ptr<Impl> impl_;
  std::weak_ptr<MetricsServer> self_;
};

}  // namespace stoker
