// An IoEngine wrapper that gives every read a fixed latency: rehearses storage whose
// reads each take long but run many at once (networked block storage, NVMe over fabrics,
// an object store's ranged GETs), where the queue depth, not the bandwidth, sets the
// rate. It backs IoOptions::read_latency_s (`stoker bench feed --io-latency-ms`), as the
// throttled engine backs limit_bytes_per_s. Internal: users set the option.
#pragma once

#include <memory>

#include "stoker/io.h"

namespace stoker::internal {

/// Wraps `inner`: a read is handed back no sooner than `latency_s` (> 0) after it was
/// issued, and at most `queue_depth` reads (set_queue_limit: fewer) are issued and not
/// yet handed back, so the rate is at most queue_limit / latency_s reads per second.
/// The inner engine must take queue_depth reads at once. Same threading contract as
/// the IoEngine it wraps.
std::unique_ptr<IoEngine> make_latency_engine(std::unique_ptr<IoEngine> inner, double latency_s,
                                              unsigned queue_depth);

}  // namespace stoker::internal
