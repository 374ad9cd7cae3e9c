// A Loader on a metrics server (stoker/metrics.h): the port from
// LoaderOptions::metrics_port or STOKER_METRICS_PORT, the labels that tell a process's
// loaders apart, and which of LoaderStats' figures are counters.
//
// Threading: register_loader_metrics() on the thread making the Loader; the walk it
// registers runs on the server's thread (a feed's stats() may be called from any thread).
#pragma once

#include <functional>
#include <set>
#include <string>

#include "stoker/loader.h"
#include "stoker/metrics.h"

namespace stoker::internal {

/// LoaderStats::visit()'s paths of the figures that only grow while a run lasts.
const std::set<std::string>& loader_counter_paths();

/// The port asked for: options.metrics_port, else STOKER_METRICS_PORT, else 0 (off).
/// kInvalidArgument for an environment value that is not a port.
unsigned metrics_port(const LoaderOptions& options);

/// Adds a loader to the server of metrics_port(options) (none when 0), labelled
/// loader (this process's count of such loaders, from 0), rank and dataset (the path
/// without a URL's query, or "mixture"). `stats` is the loader's stats(). The
/// registration must go before what `stats` reads. kUnavailable naming the port when
/// it is in use.
MetricsRegistration register_loader_metrics(const LoaderOptions& options, int rank,
                                            std::function<LoaderStats()> stats);

}  // namespace stoker::internal
