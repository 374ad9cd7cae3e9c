// A rate-limited IoEngine wrapper: rehearses slower storage. Internal: it backs
// `stoker bench feed --io-limit-mbps` and the Python loader's io_limit_mbps, both of
// which show how a pipeline behaves when reads are the bottleneck. Not part of the
// public API (a user wraps engines through LoaderOptions::wrap_io).
#pragma once

#include <memory>

#include "stoker/io.h"

namespace stoker {

/// Wraps `inner`: requests are released to it so that bytes requested stay within
/// `bytes_per_s` (a token bucket holding at most max(1 request, 1/10 s) of credit).
/// Same threading contract as the IoEngine it wraps.
std::unique_ptr<IoEngine> make_throttled_engine(std::unique_ptr<IoEngine> inner, double bytes_per_s);

}  // namespace stoker
