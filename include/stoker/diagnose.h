// Diagnosis: which station of the input assembly line bounds the feed rate, and whether
// the platform under it is set up the way a fast loader needs.
//
// The verdict on a feed's figures is verdict.h (included here); this header adds the
// verdict on a staged feed (a Stager and its Loader) and the doctor.
//
// Doctor. The platform checks a careful SRE runs on a GPU node (io_uring, O_DIRECT,
// CPU governor, cgroup quota, affinity vs the GPU's NUMA node, PCIe link, memlock,
// memory, GPU clocks via NVML, a read probe of the dataset), each with its reading,
// what it means and the decision. Every file is read below DoctorOptions::root so tests
// feed fixture sysfs/procfs trees; the per-check functions take their inputs explicitly.
//
// Threading: the check functions are pure functions of their inputs and the files they
// read (thread-safe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stoker/loader.h"
#include "stoker/stage.h"
#include "stoker/verdict.h"

namespace stoker {

/// A staged feed's figures: the loader's (FeedFigures::from), with the copy stage and the
/// trainer's wait from the Stager feeding on this loader (the trainer's wait:
/// StagerStats::device_wait_s, plus next() blocked beyond the copy thread's own wait for
/// device slots). The Stager's figures add up across epochs, so they enter as fractions
/// of its own wall time applied to the loader's.
FeedFigures staged_figures(const LoaderStats& loader, const StagerStats& staged);

/// A staged feed as the trainer sees it: the figures of a Stager and of the Loader it
/// owns, and the verdict on them with the copy stream as a station.
struct StagedFeed {
  /// The owned Loader's stats(), except consumer_wait_s: the trainer waits on the
  /// Stager, so it is the trainer's wait (staged_figures),
  /// not the copy thread's wait on the Loader; bottleneck, evidence and advice are the
  /// verdict's (record_verdict).
  LoaderStats loader;
  StagerStats stager;  ///< Stager::stats(), read after the loader's
  Verdict verdict;     ///< diagnose(staged_figures(loader's own stats, stager))
};
/// The staged feed of `stager` now (the one staged verdict: the Python binding's
/// stats() and `stoker bench stage` both report it). Safe from any thread, as the
/// Stager's and its Loader's stats() are. kInvalidArgument for a Stager over a raw
/// source (no Loader to judge).
StagedFeed diagnose_staged(Stager& stager);

// ---- doctor ----------------------------------------------------------------------------

enum class CheckStatus { kOk, kWarn, kFail, kSkip };
const char* check_status_name(CheckStatus s) noexcept;  ///< "ok", "warn", "fail", "skip"

struct Check {
  std::string name;      ///< "io_uring", "o_direct", "cpu_governor", ...
  CheckStatus status = CheckStatus::kSkip;
  std::string reading;   ///< what was read: "powersave on 8 of 8 CPUs"
  std::string meaning;   ///< what it means for the loader
  std::string advice;    ///< the decision: what to do ("" when nothing)
  std::string to_json() const;  ///< {"name":..,"status":..,"reading":..,"meaning":..,"advice":..}
};

struct DoctorOptions {
  /// Directory standing for "/" when reading /proc and /sys (tests: a fixture tree).
  std::string root = "/";
  /// A dataset directory (or shard file) for the O_DIRECT check and the read probe.
  std::optional<std::string> dataset;
  /// NVIDIA GPU to check: index among the NVIDIA display/3D PCI functions sorted by
  /// address (and NVML's index). -1: LOCAL_RANK, else 0.
  int device = -1;
  /// Decode threads the loader would run; 0: the CPUs this process may use.
  unsigned threads = 0;
  /// Host memory the loader pins or locks: 0 means the defaults' estimate: the IO slab
  /// (64 MiB, registered with io_uring) + 4 slots of 64 224x224x3 images (~37 MiB).
  uint64_t pinned_bytes = 0;
  /// Bytes the read probe reads at most (1 MiB aligned reads, O_DIRECT when accepted).
  uint64_t probe_bytes = 128ull << 20;
  /// Checks that probe the running process rather than files (io_uring ring setup,
  /// NVML): default true when root is "/", false otherwise.
  std::optional<bool> live;
};

struct DoctorReport {
  std::vector<Check> checks;
  /// True when a check failed (the tool then exits non-zero).
  bool failed() const noexcept;
  /// {"root":"/","checks":[...],"ok":n,"warn":n,"fail":n,"skip":n}
  std::string to_json() const;
  /// One line per check: "[warn] cpu_governor: powersave on 2 of 2 CPUs -> ..."
  std::string to_text() const;
};

/// Runs every check.
DoctorReport run_doctor(const DoctorOptions& options = {});

/// PCI addresses ("0000:17:00.0") of NVIDIA display/3D controllers under
/// root/sys/bus/pci/devices (vendor 0x10de, class 0x03xxxx), sorted.
std::vector<std::string> find_nvidia_gpus(const std::string& root = "/");

}  // namespace stoker
