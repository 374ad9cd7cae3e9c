// Which CPUs stoker's threads may use, and how many threads that makes.
//
// plan_cpus() intersects the process's affinity mask with the CPUs of the GPU's NUMA
// node (sysfs: /sys/bus/pci/devices/<bus id>/numa_node -> /sys/devices/system/node/
// nodeN/cpulist), falls back to the whole mask when there is no GPU, one node, or the
// node's CPUs are all outside the mask, and caps the thread count by the cgroup CPU
// quota (cpu.max, v2; cpu.cfs_quota_us / cfs_period_us, v1) so the pool never
// oversubscribes a container. Everything is read below `sysroot`, so tests feed
// fixture trees. Thread-safe (pure functions of the files they read).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace stoker {

struct CpuPlan {
  std::vector<int> cpus;      ///< CPUs the pool's threads are pinned to (sorted)
  int numa_node = -1;         ///< the GPU's node, -1 when unknown / not used
  double quota_cpus = 0;      ///< cgroup quota in CPUs; 0 = unlimited
  unsigned threads = 1;       ///< recommended decode threads: min(|cpus|, floor(quota)) >= 1
  std::string explanation;    ///< one sentence: where the set and the count come from
};

/// Parses a kernel CPU list ("0-3,8,10-11"). Throws kInvalidArgument on bad syntax.
std::vector<int> parse_cpu_list(const std::string& text);
/// The inverse, compressed into ranges.
std::string format_cpu_list(const std::vector<int>& cpus);

/// Reads the cgroup CPU quota of this process in CPUs (0 when unlimited or unknown).
double cgroup_cpu_quota(const std::string& sysroot = "/");

/// `affinity`: the process's allowed CPUs (empty: read with sched_getaffinity).
/// `pci_bus_id`: the GPU's PCI address ("0000:17:00.0"), when there is one.
CpuPlan plan_cpus(const std::optional<std::string>& pci_bus_id = std::nullopt,
                  const std::string& sysroot = "/", std::vector<int> affinity = {});

/// Pins the calling thread to `cpus` (no-op when empty) and names it (<= 15 chars).
/// Returns false when the kernel refused the affinity (the thread still runs).
bool pin_and_name_this_thread(const std::vector<int>& cpus, const std::string& name);

}  // namespace stoker
