#include "stoker/cpu.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "stoker/error.h"

namespace stoker {

namespace {

std::optional<std::string> read_line(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::string line;
  std::getline(f, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string join(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (root.back() == '/' ? root.substr(0, root.size() - 1) : root) + path;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(text);
  std::string part;
  auto num = [&](const std::string& s) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit))
      throw_error(ErrorCode::kInvalidArgument, "bad CPU list '" + text + "'");
    return std::stoi(s);
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

double cgroup_cpu_quota(const std::string& sysroot) {
  // cgroup v2: the process's cgroup path from /proc/self/cgroup ("0::/path").
  std::string rel = "/";
  if (auto line = read_line(join(sysroot, "/proc/self/cgroup")); line && line->rfind("0::", 0) == 0)
    rel = line->substr(3);
  for (std::string dir = rel;;) {
    if (auto max = read_line(join(sysroot, "/sys/fs/cgroup" + (dir == "/" ? std::string() : dir) + "/cpu.max"))) {
      std::istringstream in(*max);
      std::string quota;
      double period = 0;
      in >> quota >> period;
      if (quota != "max" && period > 0) {
        try {
          return std::stod(quota) / period;
        } catch (const std::exception&) {
        }
      }
    }
    if (dir == "/" || dir.empty()) break;
    auto slash = dir.rfind('/');
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  // cgroup v1.
  auto q = read_line(join(sysroot, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"));
  auto p = read_line(join(sysroot, "/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  if (q && p) {
    try {
      double quota = std::stod(*q), period = std::stod(*p);
      if (quota > 0 && period > 0) return quota / period;
    } catch (const std::exception&) {
    }
  }
  return 0;
}

CpuPlan plan_cpus(const std::optional<std::string>& pci_bus_id, const std::string& sysroot, std::vector<int> affinity) {
  CpuPlan plan;
  if (affinity.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) affinity.push_back(c);
  }
  std::sort(affinity.begin(), affinity.end());
  plan.cpus = affinity;
  std::string where = "all " + std::to_string(affinity.size()) + " CPUs this process may use (" +
                      format_cpu_list(affinity) + ")";
  if (pci_bus_id) {
    auto node = read_line(join(sysroot, "/sys/bus/pci/devices/" + *pci_bus_id + "/numa_node"));
    if (node && !node->empty() && (*node)[0] != '-') {
      int n = std::atoi(node->c_str());
      if (auto list = read_line(join(sysroot, "/sys/devices/system/node/node" + std::to_string(n) + "/cpulist"))) {
        std::vector<int> local;
        try {
          for (int c : parse_cpu_list(*list))
            if (std::binary_search(affinity.begin(), affinity.end(), c)) local.push_back(c);
        } catch (const Error&) {
        }
        if (!local.empty()) {
          plan.cpus = local;
          plan.numa_node = n;
          where = std::to_string(local.size()) + " CPUs of NUMA node " + std::to_string(n) + " (the GPU's, " +
                  format_cpu_list(local) + ")";
        } else {
          where += "; the GPU's NUMA node " + std::to_string(n) + " has none of them";
        }
      }
    } else {
      where += "; the GPU's NUMA node is unknown";
    }
  }
  plan.quota_cpus = cgroup_cpu_quota(sysroot);
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
