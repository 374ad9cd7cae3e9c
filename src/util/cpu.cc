#include "stoker/cpu.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "stoker/error.h"
#include "util/platform.h"

namespace stoker {

std::vector<int> parse_cpu_list(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(text);
  std::string part;
  auto num = [&](const std::string& s) {
    int v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || s.size() > 6 || ec != std::errc() || p != s.data() + s.size() || v < 0)
      throw_error(ErrorCode::kInvalidArgument, "bad CPU list '" + text + "'");
    return v;
  };
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    auto dash = part.find('-');
    if (dash == std::string::npos) {
      out.insert(num(part));
    } else {
      int a = num(part.substr(0, dash)), b = num(part.substr(dash + 1));
      if (b < a) throw_error(ErrorCode::kInvalidArgument, "bad CPU range in '" + text + "'");
      for (int c = a; c <= b; ++c) out.insert(c);
    }
  }
  return {out.begin(), out.end()};
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]);
    if (j > i) {
      s += '-';  // two appends: GCC 12 warns (-Wrestrict, a false positive) on "-" + string
      s += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return s;
}

double cgroup_cpu_quota(const std::string& sysroot) { return internal::cgroup_cpu_quota_at(sysroot); }

CpuPlan plan_cpus(const std::optional<std::string>& pci_bus_id, const std::string& sysroot, std::vector<int> affinity) {
  CpuPlan plan;
  if (affinity.empty()) affinity = internal::affinity_cpus();
  std::sort(affinity.begin(), affinity.end());
  plan.cpus = affinity;
  std::string where = "all " + std::to_string(affinity.size()) + " CPUs this process may use (" +
                      format_cpu_list(affinity) + ")";
  if (pci_bus_id) {
    const int n = internal::pci_numa_node(sysroot, *pci_bus_id);
    if (n >= 0) {
      const std::vector<int> node_cpus = internal::numa_node_cpus(sysroot, n);
      std::vector<int> local;
      for (int c : node_cpus)
        if (std::binary_search(affinity.begin(), affinity.end(), c)) local.push_back(c);
      if (node_cpus.empty()) {
        where += "; the CPUs of the GPU's NUMA node " + std::to_string(n) + " are unknown";
      } else if (!local.empty()) {
        plan.cpus = local;
        plan.numa_node = n;
        where = std::to_string(local.size()) + " CPUs of NUMA node " + std::to_string(n) + " (the GPU's, " +
                format_cpu_list(local) + ")";
      } else {
        where += "; the GPU's NUMA node " + std::to_string(n) + " has none of them";
      }
    } else {
      where += "; the GPU's NUMA node is unknown";
    }
  }
  plan.quota_cpus = internal::cgroup_cpu_quota_at(sysroot);
  plan.threads = static_cast<unsigned>(std::max<size_t>(1, plan.cpus.size()));
  if (plan.quota_cpus > 0 && plan.quota_cpus < plan.threads) {
    plan.threads = std::max(1u, static_cast<unsigned>(std::floor(plan.quota_cpus + 1e-9)));
    char b[96];
    std::snprintf(b, sizeof b, ", capped to %u by the cgroup CPU quota of %.2f CPUs", plan.threads, plan.quota_cpus);
    where += b;
  }
  plan.explanation = "threads pinned to " + where;
  return plan;
}

bool pin_and_name_this_thread(const std::vector<int>& cpus, const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  if (cpus.empty()) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace stoker
