// A rate-limited IoEngine wrapper: rehearses slower storage. It backs
// IoOptions::limit_bytes_per_s (make_io_engine applies it; the Loader applies it to a
// remote dataset's record engine too), so `stoker bench feed --io-limit-mbps` and the
// Python loader's io_limit_mbps show how a pipeline behaves when reads are the
// bottleneck. Internal: users set the option; tests wrap engines directly.
#pragma once

#include <memory>

#include "stoker/io.h"

namespace stoker::internal {

/// Wraps `inner`: requests are released to it so that bytes requested stay within
/// `bytes_per_s` (> 0; a token bucket holding at most max(1 request, 1/10 s) of
/// credit). Same threading contract as the IoEngine it wraps.
std::unique_ptr<IoEngine> make_throttled_engine(std::unique_ptr<IoEngine> inner, double bytes_per_s);

/// `engine` wrapped in the rehearsals `options` asks for: options.read_latency_s
/// (latency_engine.h) and options.limit_bytes_per_s, each when positive.
std::unique_ptr<IoEngine> limit_io_rate(std::unique_ptr<IoEngine> engine, const IoOptions& options);

}  // namespace stoker::internal
