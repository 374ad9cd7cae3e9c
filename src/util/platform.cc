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

double cgroup_cpu_quota_at(const std::string& root) {
  // v2: the process's cgroup from /proc/self/cgroup ("0::/path"); a limit may sit on
  // any ancestor, so walk up to the root of the hierarchy.
  std::string rel = "/";
  if (auto text = read_sys(root, "/proc/self/cgroup")) {
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("0::", 0) == 0) rel = trim(line.substr(3));
  }
  for (std::string dir = rel.empty() ? "/" : rel;;) {
    if (auto max = read_sys(root, "/sys/fs/cgroup" + (dir == "/" ? std::string() : dir) + "/cpu.max")) {
      std::istringstream in(*max);
      std::string quota, period;
      in >> quota >> period;
      auto q = to_double(quota), p = to_double(period);
      if (quota != "max" && q && p && *q > 0 && *p > 0) return *q / *p;
    }
    if (dir == "/") break;
    const auto slash = dir.rfind('/');
    dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
  // v1 (quota -1 means unlimited).
  auto q = read_sys(root, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  auto p = read_sys(root, "/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (q && p) {
    auto qv = to_double(*q), pv = to_double(*p);
    if (qv && pv && *qv > 0 && *pv > 0) return *qv / *pv;
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
