// The io_uring IoEngine (liburing): registered files, one registered fixed-buffer slab,
// O_DIRECT, batched submits, short-read continuation, cancellation at shutdown.
// Threading: as IoEngine (one thread).
#pragma once

#include <memory>
#include <string>

#include "stoker/io.h"

namespace stoker::internal {

/// Makes the uring engine, or returns null with *err = the errno io_uring_queue_init
/// returned (EPERM, ENOSYS, ENOMEM, ...) when the kernel refuses a ring.
std::unique_ptr<IoEngine> make_uring_engine(const IoOptions& options, int* err);

/// The plain report for a refused ring: what was refused, by what, what is used
/// instead and how to enable io_uring. `instead` names the replacement ("" = none).
std::string uring_refusal_text(int err, unsigned entries, const std::string& instead);

}  // namespace stoker::internal
