// What the machine offers this process, read from the kernel's files: sysfs, procfs,
// cgroups (v1 and v2), NUMA nodes, the affinity mask, and the CPU count derived from
// them. One module, so the CPU plan, doctor, verify and pack count CPUs the same way.
//
// Every reading takes a root directory ("/" or "" for the live system) and reads the
// kernel's paths below it, so tests point it at fixture trees. Missing or unreadable
// files read as "unknown" (nullopt, -1, empty, 0), never as errors: a container that
// hides a file must not stop the loader. Thread-safe (pure functions of the files).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stoker::internal {

/// `path` (absolute, e.g. "/sys/...") below `root`.
std::string under_root(const std::string& root, const std::string& path);

/// The whole file at `path`, or nullopt when it cannot be opened.
std::optional<std::string> read_text_file(const std::string& path);
/// Like read_text_file, with leading and trailing whitespace removed.
std::optional<std::string> read_trimmed_file(const std::string& path);
/// read_trimmed_file(under_root(root, path)): one sysfs/procfs value.
std::optional<std::string> read_sys(const std::string& root, const std::string& path);

/// The cgroup CPU quota of this process in CPUs; 0 when unlimited or unknown.
/// v2: the cgroup named by root/proc/self/cgroup ("0::/path"), its cpu.max and each
/// ancestor's up to /sys/fs/cgroup (the nearest limited one wins); v1:
/// /sys/fs/cgroup/cpu/cpu.cfs_quota_us over cpu.cfs_period_us.
double cgroup_cpu_quota_at(const std::string& root);

/// The cgroup memory limit of this process in bytes; 0 when unlimited or unknown. v2:
/// memory.max of its cgroup and each ancestor's (the tightest wins); v1:
/// /sys/fs/cgroup/memory/memory.limit_in_bytes of its cgroup or an ancestor (values past
/// 2^60 read as unlimited: the kernel's "no limit" is a page-rounded LONG_MAX).
uint64_t cgroup_memory_limit_at(const std::string& root);
/// MemTotal of root/proc/meminfo in bytes; 0 when unknown.
uint64_t mem_total_at(const std::string& root);

/// Seconds thread `tid` of this process was runnable but waited for a CPU (the run delay,
/// second field of root/proc/self/task/<tid>/schedstat); negative when unknown.
double thread_run_delay_s(const std::string& root, long tid);

/// NUMA node of PCI device `bus_id` ("0000:17:00.0"): root/sys/bus/pci/devices/<id>/
/// numa_node; -1 when unknown or when the kernel says -1 (one node).
int pci_numa_node(const std::string& root, const std::string& bus_id);
/// CPUs of NUMA node `node` (root/sys/devices/system/node/nodeN/cpulist), sorted;
/// empty when unknown or malformed.
std::vector<int> numa_node_cpus(const std::string& root, int node);

/// The calling thread's affinity mask (sched_getaffinity), sorted; empty on failure.
std::vector<int> affinity_cpus();
/// "Cpus_allowed_list" of root/proc/self/status, sorted; empty when unknown. For a
/// fixture root this stands in for the affinity mask.
std::vector<int> allowed_cpus(const std::string& root);

/// CPUs this process may keep busy: the affinity mask (root "/") or root's allowed list,
/// capped by the cgroup quota (floor, at least 1). What a worker pool should size to
/// when the caller does not say; std::thread::hardware_concurrency() ignores both the
/// mask and the quota.
unsigned usable_cpus(const std::string& root = "/");

/// Makes room for `need` open descriptors of this process: when the soft RLIMIT_NOFILE
/// is lower, raises it (towards the hard limit, which any process may) and says so on
/// stderr, once per raise; when even the hard limit is short, warns naming `what` needs
/// them and how to fix it. Returns the soft limit in force afterwards. Raising rather
/// than failing: a dataset of thousands of shards would otherwise stop with EMFILE deep
/// in the IO engine, and the usual soft limit (1024) is far below the usual hard one.
uint64_t ensure_open_file_limit(uint64_t need, const std::string& what);

}  // namespace stoker::internal
