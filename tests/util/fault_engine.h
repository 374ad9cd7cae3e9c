// A test double: an IoEngine wrapper that fails, shortens, delays or corrupts the
// requests a FaultPlan picks, deterministically from the plan's seed. Tests of
// everything above the IO engine (the loader's error paths) wrap the real engine with it
// through LoaderOptions::wrap_io. Part of the stoker_testutil library, not of libstoker.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "stoker/io.h"

namespace stoker {

enum class FaultKind { kNone, kFail, kShort, kDelay, kCorrupt };
const char* fault_kind_name(FaultKind kind) noexcept;

/// Which requests a fault-injecting engine breaks, and how. Each request draws one
/// number from (seed, file, offset, length, tag); the rates split [0,1) in the order
/// fail, short, corrupt, delay (their sum must be <= 1). A request that `only` rejects
/// is never faulted.
struct FaultPlan {
  uint64_t seed = 0;
  double fail_rate = 0;     ///< completes with -EIO (never reaches the inner engine)
  double short_rate = 0;    ///< completes with fewer bytes than read (about half)
  double delay_rate = 0;    ///< completion held back for `delay`
  double corrupt_rate = 0;  ///< one byte of the data flipped (xor 0xFF)
  std::chrono::microseconds delay{1000};
  std::function<bool(const ReadRequest&)> only;
};

/// The fault `plan` assigns to `req` (deterministic; what make_faulty_engine does).
FaultKind fault_for(const FaultPlan& plan, const ReadRequest& req);
/// Byte index flipped by a kCorrupt fault in a completion of `result` bytes.
uint64_t corrupt_index(const FaultPlan& plan, const ReadRequest& req, uint64_t result);

/// Wraps `inner`: requests are faulted as fault_for() says. Same threading contract as
/// the IoEngine it wraps.
std::unique_ptr<IoEngine> make_faulty_engine(std::unique_ptr<IoEngine> inner, FaultPlan plan);

}  // namespace stoker
