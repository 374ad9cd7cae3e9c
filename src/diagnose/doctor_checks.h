// The doctor's checks one by one (include/stoker/diagnose.h runs them all through
// run_doctor): each takes its inputs explicitly (a root standing for "/", a dataset, a
// need in bytes), so that every decision is tested on fixture trees. Internal: users
// run run_doctor; the tool patches a remote dataset's fast_crop check with
// check_fast_crop. Thread-safe as run_doctor is (pure functions of their inputs and the
// files they read).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "stoker/diagnose.h"

namespace stoker::internal {

/// `unavailable_reason`: io_uring_unavailable_reason() ("" = usable).
Check check_io_uring(const std::string& unavailable_reason);
/// Opens a file of `dataset` with O_DIRECT and reads its first aligned block.
Check check_o_direct(const std::optional<std::string>& dataset);
/// Whether a JPEG dataset (a directory or an http(s):// / s3:// URL: its MANIFEST) was
/// packed with --fast-crop.
Check check_fast_crop(const std::optional<std::string>& dataset);
Check check_cpu_governor(const std::string& root);
/// cpu.max (via cgroup_cpu_quota(root)) against `threads` decode threads (+1 IO thread).
Check check_cgroup_quota(const std::string& root, unsigned threads);
/// Cpus_allowed_list of root/proc/self/status against the GPU's NUMA node.
Check check_affinity_numa(const std::string& root, const std::optional<std::string>& gpu_pci);
Check check_pcie_link(const std::string& root, const std::optional<std::string>& gpu_pci);
/// "Max locked memory" of root/proc/self/limits against `pinned_bytes`.
Check check_memlock(const std::string& root, uint64_t pinned_bytes);
/// MemAvailable and hugepages of root/proc/meminfo against `pinned_bytes`.
Check check_memory(const std::string& root, uint64_t pinned_bytes);
/// root/sys/kernel/mm/transparent_hugepage/enabled: the slab and slots ask for huge pages.
Check check_transparent_hugepages(const std::string& root);
/// GPU clocks and throttle reasons through NVML (dlopen'd); skip when absent.
Check check_gpu_clocks(int nvml_index);
/// Reads up to `max_bytes` of `dataset`'s files; `threads`: decode threads to feed.
Check check_read_probe(const std::optional<std::string>& dataset, uint64_t max_bytes, unsigned threads);

}  // namespace stoker::internal
