#include "util/platform.h"

#include "util/log.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "stoker/cpu.h"
#include "stoker/error.h"

namespace stoker::internal {

namespace {

bool live(const std::string& root) { return root.empty() || root == "/"; }

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::optional<double> to_double(const std::string& s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}


std::vector<int> cpu_list_or_empty(const std::optional<std::string>& text) {
  if (!text) return {};
  try {
    return parse_cpu_list(*text);
  } catch (const Error&) {
    return {};
  }
}

}  // namespace

std::string under_root(const std::string& root, const std::string& path) {
  if (live(root)) return path;
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return r + path;
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> read_trimmed_file(const std::string& path) {
  auto t = read_text_file(path);
  if (!t) return std::nullopt;
  return trim(*t);
}

std::optional<std::string> read_sys(const std::string& root, const std::string& path) {
  return read_trimmed_file(under_root(root, path));
}

namespace {

// The process's cgroup path in the hierarchy of one /proc/self/cgroup line: the v2 line
// ("0::/path") when `controller` is empty, else the v1 line whose controller list
// ("N:cpu,cpuacct:/path") names it. Empty when there is no such line.
std::string cgroup_path_of(const std::string& proc_cgroup, const std::string& controller) {
  std::istringstream in(proc_cgroup);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    bool match = controller.empty() ? list.empty() && line.compare(0, a, "0") == 0 : false;
    if (!controller.empty()) {
      std::istringstream names(list);
      for (std::string n; std::getline(names, n, ',');) match |= n == controller;
    }
    if (match) return trim(line.substr(b + 1));
  }
  return {};
}

// Calls visit(dir) for `path` and each of its ancestors up to "/" ("" for the root).
template <typename Visit>
void for_each_ancestor(std::string path, Visit visit) {
  if (path.empty() || path[0] != '/') path = "/";
  for (;;) {
    visit(path == "/" ? std::string() : path);
    if (path == "/") return;
    const auto slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

// The tightest of two limits in CPUs, 0 meaning unlimited.
double tighter(double a, double b) { return a <= 0 ? b : b <= 0 ? a : std::min(a, b); }

}  // namespace

double cgroup_cpu_quota_at(const std::string& root) {
  // A limit may sit on the process's cgroup or on any ancestor, and the tightest one
  // binds, so every level up to the hierarchy's root is read.
  const std::string proc = read_sys(root, "/proc/self/cgroup").value_or("");
  double v2 = 0;
  for_each_ancestor(cgroup_path_of(proc, ""), [&](const std::string& dir) {
    if (auto max = read_sys(root, "/sys/fs/cgroup" + dir + "/cpu.max")) {
      std::istringstream in(*max);
      std::string quota, period;
      in >> quota >> period;
      auto q = to_double(quota), p = to_double(period);
      if (quota != "max" && q && p && *q > 0 && *p > 0) v2 = tighter(v2, *q / *p);
    }
  });
  if (v2 > 0) return v2;
  // v1 (quota -1 means unlimited). The cpu controller is mounted as cpu/ or with
  // cpuacct; inside a container without a cgroup namespace the process's own path may
  // not exist under the mount, and the mount's root then holds the container's limit.
  double v1 = 0;
  const std::string path = cgroup_path_of(proc, "cpu");
  for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"}) {
    for_each_ancestor(path, [&](const std::string& dir) {
      auto q = read_sys(root, mount + dir + "/cpu.cfs_quota_us");
      auto p = read_sys(root, mount + dir + "/cpu.cfs_period_us");
      if (!q || !p) return;
      auto qv = to_double(*q), pv = to_double(*p);
      if (qv && pv && *qv > 0 && *pv > 0) v1 = tighter(v1, *qv / *pv);
    });
    if (v1 > 0) break;
  }
  return v1;
}

uint64_t cgroup_memory_limit_at(const std::string& root) {
  const std::string proc = read_sys(root, "/proc/self/cgroup").value_or("");
  uint64_t best = 0;
  auto take = [&best](const std::optional<std::string>& text) {
    if (!text || *text == "max") return;
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc() || p != text->data() + text->size() || v == 0 || v >= (1ull << 60)) return;
    best = best == 0 ? v : std::min(best, v);
  };
  for_each_ancestor(cgroup_path_of(proc, ""), [&](const std::string& dir) {
    take(read_sys(root, "/sys/fs/cgroup" + dir + "/memory.max"));
  });
  if (best > 0) return best;
  for_each_ancestor(cgroup_path_of(proc, "memory"), [&](const std::string& dir) {
    take(read_sys(root, "/sys/fs/cgroup/memory" + dir + "/memory.limit_in_bytes"));
  });
  return best;
}

double thread_run_delay_s(const std::string& root, long tid) {
  const auto text = read_sys(root, "/proc/self/task/" + std::to_string(tid) + "/schedstat");
  if (!text) return -1;
  std::istringstream in(*text);
  uint64_t run_ns = 0, wait_ns = 0;
  if (!(in >> run_ns >> wait_ns)) return -1;
  return static_cast<double>(wait_ns) / 1e9;
}

uint64_t mem_total_at(const std::string& root) {
  const std::string info = read_sys(root, "/proc/meminfo").value_or("");
  std::istringstream in(info);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream f(line.substr(9));
    uint64_t kb = 0;
    if (f >> kb) return kb * 1024;
  }
  return 0;
}

int pci_numa_node(const std::string& root, const std::string& bus_id) {
  auto text = read_sys(root, "/sys/bus/pci/devices/" + bus_id + "/numa_node");
  if (!text) return -1;
  int node = -1;
  auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), node);
  if (ec != std::errc() || p != text->data() + text->size() || node < 0) return -1;
  return node;
}

std::vector<int> numa_node_cpus(const std::string& root, int node) {
  if (node < 0) return {};
  return cpu_list_or_empty(read_sys(root, "/sys/devices/system/node/node" + std::to_string(node) + "/cpulist"));
}

std::vector<int> affinity_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> allowed_cpus(const std::string& root) {
  auto st = read_sys(root, "/proc/self/status");
  if (!st) return {};
  std::istringstream in(*st);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return cpu_list_or_empty(trim(line.substr(18)));
  return {};
}

unsigned usable_cpus(const std::string& root) {
  size_t n = live(root) ? affinity_cpus().size() : allowed_cpus(root).size();
  if (n == 0 && live(root)) {
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    n = online > 0 ? static_cast<size_t>(online) : 1;
  }
  n = std::max<size_t>(1, n);
  const double quota = cgroup_cpu_quota_at(root);
  if (quota > 0 && quota < static_cast<double>(n))
    n = std::max<size_t>(1, static_cast<size_t>(std::floor(quota + 1e-9)));
  return static_cast<unsigned>(n);
}

uint64_t ensure_open_file_limit(uint64_t need, const std::string& what) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return need;  // unknown: nothing to do but try
  if (rl.rlim_cur >= need) return rl.rlim_cur;
  const rlim_t before = rl.rlim_cur;
  rlimit want = rl;
  want.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min<rlim_t>(rl.rlim_max, need);
  if (want.rlim_cur > before && setrlimit(RLIMIT_NOFILE, &want) == 0) {
    rl = want;
    log_warn("raised the open-file limit (RLIMIT_NOFILE) from " + std::to_string(before) + " to " +
           std::to_string(rl.rlim_cur) + " for " + what);
  }
  if (rl.rlim_cur < need) {
    log_warn(what + " may need " + std::to_string(need) + " file descriptors but the limit is " +
           std::to_string(rl.rlim_cur) + " (hard " +
           (rl.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_max)) +
           "); raise it with `ulimit -n`");
  }
  return rl.rlim_cur;
}

}  // namespace stoker::internal
