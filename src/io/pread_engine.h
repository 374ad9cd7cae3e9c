// The pread(2) IoEngine: a few worker threads (stoker-pread/N) serving a queue of
// requests. Used when io_uring is refused or forced off. Same semantics as the uring
// engine: short reads continued to the requested length or EOF, EINTR/EAGAIN retried,
// errors per request naming file and offset.
// Threading: as IoEngine (one calling thread); the workers are internal.
#pragma once

#include <memory>
#include <string>

#include "stoker/io.h"

namespace stoker::internal {

/// `fallback_reason` is reported in stats() (empty when pread was chosen, not fallen to).
std::unique_ptr<IoEngine> make_pread_engine(const IoOptions& options,
                                            std::string fallback_reason);

}  // namespace stoker::internal
