// `stoker doctor`'s platform checks (see include/stoker/diagnose.h). Every file is read
// below a root directory so each reading and decision can be tested on fixture trees.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "diagnose/doctor_checks.h"
#include "util/json.h"
#include "stoker/cpu.h"
#include "stoker/dataset.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/io.h"
#include "stoker/remote.h"
#include "stoker/stage.h"
#include "util/bytes.h"
#include "util/parse.h"
#include "util/platform.h"
#include "util/unique_fd.h"
#include "util/enum_names.h"

namespace fs = std::filesystem;

namespace stoker {

using internal::allowed_cpus;
using internal::format_bytes;
using internal::numa_node_cpus;
using internal::pci_numa_node;
using internal::read_sys;
using internal::read_text_file;
using internal::read_trimmed_file;
using internal::under_root;

namespace {
constexpr internal::EnumName<CheckStatus> kCheckStatusNames[] = {
    {CheckStatus::kOk, "ok"}, {CheckStatus::kWarn, "warn"}, {CheckStatus::kFail, "fail"}, {CheckStatus::kSkip, "skip"}};
}  // namespace

const char* check_status_name(CheckStatus s) noexcept { return internal::enum_name(kCheckStatusNames, s, "skip"); }

bool DoctorReport::failed() const noexcept {
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.status == CheckStatus::kFail; });
}

namespace internal {

Json to_json_value(const Check& c) {
  return Json{{"name", c.name},
              {"status", check_status_name(c.status)},
              {"reading", c.reading},
              {"meaning", c.meaning},
              {"advice", c.advice}};
}

Json to_json_value(const DoctorReport& r) {
  std::map<CheckStatus, int> n;
  Json checks = Json::array();
  for (const Check& c : r.checks) {
    checks.push_back(to_json_value(c));
    n[c.status]++;
  }
  Json j = {{"checks", std::move(checks)}};
  for (CheckStatus s : {CheckStatus::kOk, CheckStatus::kWarn, CheckStatus::kFail, CheckStatus::kSkip})
    j[check_status_name(s)] = n[s];
  j["failed"] = r.failed();
  return j;
}

}  // namespace internal

std::string Check::to_json() const { return internal::json_text(internal::to_json_value(*this)); }

std::string DoctorReport::to_json() const { return internal::json_text(internal::to_json_value(*this)); }

std::string DoctorReport::to_text() const {
  std::string t;
  for (const Check& c : checks) {
    char tag[16];
    std::snprintf(tag, sizeof tag, "[%s]", check_status_name(c.status));
    t += std::string(tag) + std::string(7 - std::min<size_t>(6, std::strlen(tag)), ' ') + c.name + ": " + c.reading + "\n";
    if (!c.meaning.empty()) t += "        means: " + c.meaning + "\n";
    if (!c.advice.empty()) t += "        do:    " + c.advice + "\n";
  }
  return t;
}

namespace {

std::string f1(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Regular files of a dataset (a directory, recursively, or one file), sorted.
std::vector<std::string> dataset_files(const std::string& dataset) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(dataset, ec)) return {dataset};
  for (auto it = fs::recursive_directory_iterator(dataset, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::string> find_nvidia_gpus(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string dir = under_root(root, "/sys/bus/pci/devices");
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string p = it->path().string();
    auto vendor = read_trimmed_file(p + "/vendor");
    auto cls = read_trimmed_file(p + "/class");
    if (vendor && cls && *vendor == "0x10de" && cls->rfind("0x03", 0) == 0) out.push_back(it->path().filename());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- the checks ----------------------------------------------------------------------------

Check internal::check_io_uring(const std::string& reason) {
  Check c;
  c.name = "io_uring";
  if (reason.empty()) {
    c.status = CheckStatus::kOk;
    c.reading = "usable";
    c.meaning = "the IO engine reads with io_uring: registered files and buffers, one thread for any queue depth";
    return c;
  }
  c.status = CheckStatus::kWarn;
  c.reading = reason;
  c.meaning = "the loader falls back to a pread thread pool: reads still work, with one thread per read in flight "
              "and more CPU per byte";
  c.advice = "allow io_uring: a seccomp profile that permits io_uring_setup/enter, sysctl kernel.io_uring_disabled=0, "
             "or a larger RLIMIT_MEMLOCK on kernels before 5.12";
  return c;
}

Check internal::check_o_direct(const std::optional<std::string>& dataset) {
  Check c;
  c.name = "o_direct";
  if (!dataset) {
    c.reading = "no dataset given (--dataset PATH)";
    return c;
  }
  std::string file;
  uint64_t best = 0;
  for (const std::string& f : dataset_files(*dataset)) {
    std::error_code ec;
    const uint64_t sz = fs::file_size(f, ec);
    if (!ec && (file.empty() || sz > best)) {
      file = f;
      best = sz;
    }
  }
  if (file.empty()) {
    c.status = CheckStatus::kFail;
    c.reading = "no readable file in " + *dataset;
    c.advice = "check the path";
    return c;
  }
  internal::UniqueFd fd(::open(file.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
  if (!fd) {
    const int e = errno;
    c.status = e == EINVAL ? CheckStatus::kWarn : CheckStatus::kFail;
    c.reading = "open(" + file + ", O_DIRECT): " + std::strerror(e);
    if (e == EINVAL) {
      c.meaning = "this filesystem refuses O_DIRECT (tmpfs, some FUSE/overlay mounts): reads go through the page "
                  "cache, one extra copy per byte, and evict other data";
      c.advice = "fine when the dataset fits in RAM; otherwise stage it on a local ext4/xfs NVMe volume";
    } else {
      c.advice = "check the dataset's permissions";
    }
    return c;
  }
  IoBuffer buf = IoBuffer::aligned(kDirectAlignment);
  const ssize_t n = ::pread(fd.get(), buf.data(), kDirectAlignment, 0);
  if (n < 0) {
    const int e = errno;
    c.status = e == EINVAL ? CheckStatus::kWarn : CheckStatus::kFail;
    c.reading = "aligned 4096-byte O_DIRECT read of " + file + ": " + std::strerror(e);
    c.meaning = e == EINVAL ? "the filesystem accepts the flag but not aligned direct reads: the loader reads buffered"
                            : "the dataset cannot be read";
    c.advice = e == EINVAL ? "stage the dataset on a filesystem with direct IO (ext4, xfs) if it does not fit in RAM"
                           : "check the device (dmesg)";
    return c;
  }
  c.status = CheckStatus::kOk;
  c.reading = "O_DIRECT accepted on " + file + " (aligned read of " + std::to_string(n) + " bytes)";
  c.meaning = "reads bypass the page cache: no extra copy, no cache thrash on datasets larger than RAM";
  return c;
}

Check internal::check_cpu_governor(const std::string& root) {
  Check c;
  c.name = "cpu_governor";
  std::map<std::string, int> count;
  int total = 0;
  std::error_code ec;
  const std::string dir = under_root(root, "/sys/devices/system/cpu");
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename();
    if (name.size() < 4 || name.rfind("cpu", 0) != 0 || !std::isdigit(static_cast<unsigned char>(name[3]))) continue;
    if (auto g = read_trimmed_file(it->path().string() + "/cpufreq/scaling_governor")) {
      count[*g]++;
      ++total;
    }
  }
  if (total == 0) {
    c.reading = "no cpufreq governor in sysfs (a VM or container that hides it)";
    return c;
  }
  std::string r;
  for (auto& [g, n] : count) r += (r.empty() ? "" : ", ") + g + " on " + std::to_string(n) + " of " + std::to_string(total) + " CPUs";
  c.reading = r;
  const int perf = count.count("performance") ? count["performance"] : 0;
  if (perf == total) {
    c.status = CheckStatus::kOk;
    c.meaning = "cores stay at full clock: decode rates are steady";
  } else {
    c.status = CheckStatus::kWarn;
    c.meaning = "cores clock down between bursts: decode throughput drops and varies, first batches are slow";
    c.advice = "set the performance governor (cpupower frequency-set -g performance, or the node's tuned profile)";
  }
  return c;
}

Check internal::check_cgroup_quota(const std::string& root, unsigned threads) {
  Check c;
  c.name = "cgroup_cpu_quota";
  const double q = cgroup_cpu_quota(root);
  const unsigned need = threads + 1;  // decode threads + the stoker-io thread
  if (q <= 0) {
    c.status = CheckStatus::kOk;
    c.reading = "no CPU quota (cpu.max: max); loader threads: " + std::to_string(threads) + " decode + 1 IO";
    c.meaning = "the loader's threads are limited by the CPUs, not by a container quota";
    return c;
  }
  c.reading = "cpu.max quota " + f1(q) + " CPUs; loader threads: " + std::to_string(threads) + " decode + 1 IO";
  if (q + 1e-9 < need) {
    c.status = CheckStatus::kWarn;
    c.meaning = "more runnable threads than the quota: the cgroup throttles them for the rest of each period "
                "(stalls of up to 100 ms) — more threads make the loader slower, not faster";
    const unsigned fit = q >= 2 ? static_cast<unsigned>(q) - 1 : 1;
    c.advice = "use " + std::to_string(fit) + " decode thread" + (fit == 1 ? "" : "s") +
               " (threads=0 lets the CPU plan cap it) or raise the container's CPU limit";
  } else {
    c.status = CheckStatus::kOk;
    c.meaning = "the quota covers the loader's threads";
  }
  return c;
}

Check internal::check_affinity_numa(const std::string& root, const std::optional<std::string>& gpu) {
  Check c;
  c.name = "affinity_numa";
  const std::vector<int> allowed = allowed_cpus(root);
  const std::string allowed_text = allowed.empty() ? "unknown" : format_cpu_list(allowed);
  if (!gpu) {
    c.reading = "allowed CPUs " + allowed_text + "; no NVIDIA GPU in sysfs";
    return c;
  }
  const int node = pci_numa_node(root, *gpu);
  if (node < 0) {
    c.status = CheckStatus::kOk;
    c.reading = "allowed CPUs " + allowed_text + "; GPU " + *gpu + " NUMA node unknown (-1: one node)";
    c.meaning = "no NUMA placement to get wrong";
    return c;
  }
  const std::vector<int> node_cpus = numa_node_cpus(root, node);
  c.reading = "allowed CPUs " + allowed_text + "; GPU " + *gpu + " on NUMA node " + std::to_string(node) +
              " (CPUs " + (node_cpus.empty() ? "unknown" : format_cpu_list(node_cpus)) + ")";
  if (allowed.empty() || node_cpus.empty()) {
    c.status = CheckStatus::kOk;
    c.meaning = "cannot compare the affinity with the node";
    return c;
  }
  std::vector<int> both;
  std::set_intersection(allowed.begin(), allowed.end(), node_cpus.begin(), node_cpus.end(), std::back_inserter(both));
  if (both.empty()) {
    c.status = CheckStatus::kWarn;
    c.meaning = "none of this process's CPUs is on the GPU's node: every decoded batch and pinned copy crosses "
                "the socket interconnect";
    c.advice = "run on the GPU's node: numactl --cpunodebind=" + std::to_string(node) + " --membind=" +
               std::to_string(node) + " (or taskset -c " + format_cpu_list(node_cpus) + ")";
  } else {
    c.status = CheckStatus::kOk;
    c.meaning = both.size() == allowed.size()
                    ? "every allowed CPU is on the GPU's node"
                    : std::to_string(both.size()) + " of " + std::to_string(allowed.size()) +
                          " allowed CPUs are on the GPU's node; the loader pins its threads to those (plan_cpus)";
  }
  return c;
}

Check internal::check_pcie_link(const std::string& root, const std::optional<std::string>& gpu) {
  Check c;
  c.name = "pcie_link";
  if (!gpu) {
    c.reading = "no NVIDIA GPU in sysfs (vendor 0x10de, class 0x03xxxx)";
    return c;
  }
  const std::string d = under_root(root, "/sys/bus/pci/devices/" + *gpu);
  auto cs = read_trimmed_file(d + "/current_link_speed"), ms = read_trimmed_file(d + "/max_link_speed");
  auto cw = read_trimmed_file(d + "/current_link_width"), mw = read_trimmed_file(d + "/max_link_width");
  if (!cs || !ms || !cw || !mw) {
    c.reading = "GPU " + *gpu + ": link speed/width not in sysfs";
    return c;
  }
  const double cur_speed = std::atof(cs->c_str()), max_speed = std::atof(ms->c_str());
  const int cur_w = internal::parse_decimal<int>(*cw).value_or(0), max_w = internal::parse_decimal<int>(*mw).value_or(0);
  // GB/s per direction: GT/s x lanes x 128/130 encoding / 8 bits (gen3+).
  auto gbps = [](double gt, int w) { return gt * w * (128.0 / 130.0) / 8; };
  c.reading = "GPU " + *gpu + ": " + f1(cur_speed) + " GT/s x" + std::to_string(cur_w) + " (max " + f1(max_speed) +
              " GT/s x" + std::to_string(max_w) + "), ~" + f1(gbps(cur_speed, cur_w)) + " of " +
              f1(gbps(max_speed, max_w)) + " GB/s";
  const bool narrow = cur_w > 0 && max_w > 0 && cur_w < max_w;
  const bool slow = cur_speed > 0 && max_speed > 0 && cur_speed + 1e-6 < max_speed;
  if (!narrow && !slow) {
    c.status = CheckStatus::kOk;
    c.meaning = "the link runs at its full generation and width";
    return c;
  }
  c.status = narrow && cur_w * 4 <= max_w ? CheckStatus::kFail : CheckStatus::kWarn;
  if (narrow) {
    c.meaning = "the link trained at x" + std::to_string(cur_w) + " of x" + std::to_string(max_w) +
                ": host-to-device copies get " + std::to_string(cur_w * 100 / max_w) + "% of the lanes";
    c.advice = "reseat the GPU or its riser, check the slot's bifurcation in the BIOS";
  }
  if (slow) {
    c.meaning += std::string(c.meaning.empty() ? "" : "; ") + "the link runs below its max generation (" +
                 f1(cur_speed) + " of " + f1(max_speed) + " GT/s); GPUs lower it when idle";
    c.advice += std::string(c.advice.empty() ? "" : "; ") + "recheck under load (during training); if it stays low, "
                "check BIOS PCIe generation settings and risers";
  }
  return c;
}

Check internal::check_memlock(const std::string& root, uint64_t need) {
  Check c;
  c.name = "memlock";
  std::optional<std::string> soft;
  if (auto lim = read_text_file(under_root(root, "/proc/self/limits"))) {
    std::istringstream in(*lim);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Max locked memory", 0) == 0) {
        std::istringstream f(line.substr(17));
        std::string s;
        f >> s;
        soft = s;
      }
    }
  }
  if (!soft) {
    c.reading = "no \"Max locked memory\" in /proc/self/limits";
    return c;
  }
  if (*soft == "unlimited") {
    c.status = CheckStatus::kOk;
    c.reading = "RLIMIT_MEMLOCK unlimited (needs ~" + format_bytes(static_cast<double>(need)) + ")";
    c.meaning = "io_uring buffers and pinned slots can be locked";
    return c;
  }
  const double lim = std::atof(soft->c_str());
  c.reading = "RLIMIT_MEMLOCK " + format_bytes(lim) + ", the loader locks ~" + format_bytes(static_cast<double>(need)) +
              " (IO slab + pinned slots)";
  // Since 5.12 io_uring charges registered buffers to the memory cgroup, not RLIMIT_MEMLOCK
  // (and CUDA's pinned allocations never counted against it).
  int major = 0, minor = 0;
  const auto rel = read_sys(root, "/proc/sys/kernel/osrelease");
  const bool new_kernel = rel && std::sscanf(rel->c_str(), "%d.%d", &major, &minor) == 2 &&
                          (major > 5 || (major == 5 && minor >= 12));
  if (rel) c.reading += "; kernel " + *rel;
  if (lim >= static_cast<double>(need)) {
    c.status = CheckStatus::kOk;
    c.meaning = "the limit covers the loader's locked memory";
  } else if (new_kernel) {
    c.status = CheckStatus::kOk;
    c.meaning = "below what the loader registers, but this kernel charges io_uring's buffers to the memory "
                "cgroup instead; only code that calls mlock() is held to this limit";
  } else {
    c.status = CheckStatus::kWarn;
    c.meaning = std::string(rel ? "below what the loader locks: this kernel (before 5.12) charges"
                                : "below what the loader locks: kernels before 5.12 (this one is unknown) charge") +
                " io_uring's registered buffers to this limit (registration fails, the engine falls back)";
    c.advice = "raise it: ulimit -l unlimited (docker --ulimit memlock=-1, systemd LimitMEMLOCK=infinity)";
  }
  return c;
}

Check internal::check_transparent_hugepages(const std::string& root) {
  Check c;
  c.name = "transparent_hugepages";
  const auto enabled = read_sys(root, "/sys/kernel/mm/transparent_hugepage/enabled");
  if (!enabled) {
    c.reading = "no transparent_hugepage/enabled in sysfs";
    return c;
  }
  // The kernel brackets the mode in force: "always [madvise] never".
  const size_t open = enabled->find('['), close = enabled->find(']');
  const std::string mode =
      open != std::string::npos && close != std::string::npos && close > open ? enabled->substr(open + 1, close - open - 1) : *enabled;
  c.reading = "enabled = " + mode;
  if (mode == "always" || mode == "madvise") {
    c.status = CheckStatus::kOk;
    c.meaning = "the IO slab and the batch slots, which ask for them, get 2 MiB pages";
  } else {
    c.status = CheckStatus::kWarn;
    c.meaning = "the IO slab and batch slots are on 4 KiB pages: each O_DIRECT read is split into one segment per "
                "4 KiB page and the slots cost a TLB miss per page, which lowers the feed rate";
    c.advice = "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (boot: transparent_hugepage=madvise)";
  }
  return c;
}

Check internal::check_memory(const std::string& root, uint64_t need) {
  Check c;
  c.name = "memory";
  auto mi = read_text_file(under_root(root, "/proc/meminfo"));
  if (!mi) {
    c.reading = "no /proc/meminfo";
    return c;
  }
  std::map<std::string, double> kv;  // bytes (kB fields) or counts
  std::istringstream in(*mi);
  for (std::string line; std::getline(in, line);) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream v(line.substr(colon + 1));
    double x = 0;
    std::string unit;
    v >> x >> unit;
    kv[line.substr(0, colon)] = unit == "kB" ? x * 1024 : x;
  }
  if (!kv.count("MemAvailable") || !kv.count("MemTotal")) {
    c.reading = "MemAvailable/MemTotal missing from /proc/meminfo";
    return c;
  }
  const double avail = kv["MemAvailable"], total = kv["MemTotal"];
  const double hp_total = kv.count("HugePages_Total") ? kv["HugePages_Total"] : 0;
  const double hp_size = kv.count("Hugepagesize") ? kv["Hugepagesize"] : 2 << 20;
  const double hp_bytes = hp_total * hp_size;
  std::string thp = "unknown";
  if (auto t = read_sys(root, "/sys/kernel/mm/transparent_hugepage/enabled")) {
    auto a = t->find('['), b = t->find(']');
    if (a != std::string::npos && b != std::string::npos && b > a) thp = t->substr(a + 1, b - a - 1);
  }
  c.reading = "MemAvailable " + format_bytes(avail) + " of " + format_bytes(total) + "; hugepages " +
              std::to_string(static_cast<long long>(hp_total)) + " x " + format_bytes(hp_size) + " reserved (" + format_bytes(hp_bytes) +
              "); transparent hugepages " + thp;
  if (avail < static_cast<double>(need)) {
    c.status = CheckStatus::kFail;
    c.meaning = "less memory available than the loader's ring and IO slab (~" + format_bytes(static_cast<double>(need)) + ")";
    c.advice = "free memory or use fewer slots / a smaller batch";
  } else if (hp_bytes > 0.5 * total) {
    c.status = CheckStatus::kWarn;
    c.meaning = "reserved hugepages hold " + format_bytes(hp_bytes) + " that the page cache (your dataset) cannot use";
    c.advice = "reserve fewer hugepages unless another process needs them (vm.nr_hugepages)";
  } else if (avail < static_cast<double>(need) + (2ull << 30)) {
    c.status = CheckStatus::kWarn;
    c.meaning = "little room beyond the loader's buffers: the dataset will not stay in the page cache";
    c.advice = "expect storage-bound epochs unless the dataset is on fast local storage";
  } else {
    c.status = CheckStatus::kOk;
    c.meaning = format_bytes(avail) + " available for the page cache and the loader (~" + format_bytes(static_cast<double>(need)) +
                "); the loader needs no reserved hugepages";
  }
  return c;
}

namespace {

// NVML, resolved at run time: no build dependency on the driver.
struct Nvml {
  using Dev = void*;
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_index)(unsigned, Dev*) = nullptr;
  int (*clock)(Dev, int, unsigned*) = nullptr;
  int (*max_clock)(Dev, int, unsigned*) = nullptr;
  int (*reasons)(Dev, unsigned long long*) = nullptr;
  int (*name)(Dev, char*, unsigned) = nullptr;
  const char* (*error_string)(int) = nullptr;
  ~Nvml() {
    if (lib) {
      if (shutdown && init_ok) shutdown();
      dlclose(lib);
    }
  }
  bool init_ok = false;
  template <typename F>
  bool sym(F& f, const char* n) {
    f = reinterpret_cast<F>(dlsym(lib, n));
    return f != nullptr;
  }
};

}  // namespace

Check internal::check_gpu_clocks(int index) {
  Check c;
  c.name = "gpu_clocks";
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) {
    c.reading = "NVML not found (libnvidia-ml.so.1): no NVIDIA driver here";
    return c;
  }
  if (!n.sym(n.init, "nvmlInit_v2") || !n.sym(n.shutdown, "nvmlShutdown") ||
      !n.sym(n.by_index, "nvmlDeviceGetHandleByIndex_v2") || !n.sym(n.clock, "nvmlDeviceGetClockInfo") ||
      !n.sym(n.max_clock, "nvmlDeviceGetMaxClockInfo") || !n.sym(n.name, "nvmlDeviceGetName")) {
    c.reading = "NVML lacks the functions needed";
    return c;
  }
  n.sym(n.error_string, "nvmlErrorString");
  if (!n.sym(n.reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
    n.sym(n.reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  auto err = [&](int r) { return n.error_string ? std::string(n.error_string(r)) : "error " + std::to_string(r); };
  if (int r = n.init(); r != 0) {
    c.status = CheckStatus::kWarn;
    c.reading = "nvmlInit: " + err(r);
    c.meaning = "the driver is installed but NVML cannot talk to it";
    c.advice = "check nvidia-smi";
    return c;
  }
  n.init_ok = true;
  Nvml::Dev dev = nullptr;
  if (int r = n.by_index(static_cast<unsigned>(std::max(0, index)), &dev); r != 0) {
    c.status = CheckStatus::kWarn;
    c.reading = "GPU " + std::to_string(index) + ": " + err(r);
    c.advice = "pass --device N for a GPU this process can see";
    return c;
  }
  char name[96] = {0};
  n.name(dev, name, sizeof name);
  constexpr int kSm = 1, kMem = 2;
  unsigned sm = 0, sm_max = 0, mem = 0, mem_max = 0;
  n.clock(dev, kSm, &sm);
  n.max_clock(dev, kSm, &sm_max);
  n.clock(dev, kMem, &mem);
  n.max_clock(dev, kMem, &mem_max);
  unsigned long long reasons = 0;
  const bool have_reasons = n.reasons && n.reasons(dev, &reasons) == 0;
  static const std::pair<unsigned long long, const char*> kNames[] = {
      {0x1, "gpu_idle"}, {0x2, "applications_clocks"}, {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},
      {0x10, "sync_boost"}, {0x20, "sw_thermal"}, {0x40, "hw_thermal"}, {0x80, "hw_power_brake"},
      {0x100, "display_clocks"}};
  std::string rs;
  for (auto& [bit, nm] : kNames)
    if (reasons & bit) rs += (rs.empty() ? "" : ",") + std::string(nm);
  c.reading = std::string(name) + ": SM " + std::to_string(sm) + " of " + std::to_string(sm_max) + " MHz, memory " +
              std::to_string(mem) + " of " + std::to_string(mem_max) + " MHz; throttle reasons: " +
              (have_reasons ? (rs.empty() ? "none" : rs) : "unknown");
  if (reasons & (0x8 | 0x40 | 0x80)) {
    c.status = CheckStatus::kFail;
    c.meaning = "the GPU is slowed by hardware (thermal, power brake or slowdown signal): it cannot reach its clocks";
    c.advice = "check cooling, power supply and nvidia-smi -q -d PERFORMANCE; the node needs attention";
  } else if (reasons & (0x4 | 0x20)) {
    c.status = CheckStatus::kWarn;
    c.meaning = "the GPU is capped by its power or thermal software limit";
    c.advice = "check nvidia-smi -q -d POWER,TEMPERATURE; a power cap below default costs step time";
  } else {
    c.status = CheckStatus::kOk;
    c.meaning = reasons & 0x1 ? "the GPU is idle (clocks rise under load)" : "no throttling";
  }
  return c;
}

// An image dataset packed without --fast-crop decodes, for every crop, the MCU rows above
// it and the whole width of its rows.
Check internal::check_fast_crop(const std::optional<std::string>& dataset) {
  Check c;
  c.name = "fast_crop";
  if (!dataset) {
    c.reading = "no dataset given (--dataset PATH)";
    return c;
  }
  Manifest m;
  try {
    m = is_remote_url(*dataset) ? RemoteStore::open(*dataset)->read_manifest() : read_manifest(*dataset);
  } catch (const Error&) {
    c.reading = "no readable manifest in " + redact_url(*dataset);
    return c;
  }
  if (std::none_of(m.schema.fields.begin(), m.schema.fields.end(),
                   [](const Field& f) { return f.kind == FieldKind::kJpeg; })) {
    c.reading = "not a JPEG dataset";
    return c;
  }
  if (auto it = m.meta.find("fast_crop"); it != m.meta.end() && it->second == "1") {
    c.status = CheckStatus::kOk;
    c.reading = "packed with --fast-crop";
    c.meaning = "crops decode only the restart intervals they cover";
    return c;
  }
  c.status = CheckStatus::kWarn;
  c.reading = "JPEGs stored as given (packed without --fast-crop)";
  c.meaning = "each crop entropy-decodes every MCU row above it and the full width of its rows";
  c.advice = "for a training set, repack with `stoker pack imagefolder|wds ... --fast-crop` (lossless: the same "
             "pixels; crops decode only what they cover)";
  return c;
}

Check internal::check_read_probe(const std::optional<std::string>& dataset, uint64_t max_bytes, unsigned threads) {
  Check c;
  c.name = "read_probe";
  if (!dataset) {
    c.reading = "no dataset given (--dataset PATH)";
    return c;
  }
  const std::vector<std::string> files = dataset_files(*dataset);
  if (files.empty()) {
    c.status = CheckStatus::kFail;
    c.reading = "no readable file in " + *dataset;
    return c;
  }
  constexpr size_t kBlock = 1 << 20;
  IoBuffer buf = IoBuffer::aligned(kBlock);
  uint64_t total = 0;
  int direct = 0, buffered = 0, nfiles = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& f : files) {
    if (total >= max_bytes) break;
    internal::UniqueFd fd(::open(f.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
    bool is_direct = static_cast<bool>(fd);
    if (!fd) fd.reset(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      c.status = CheckStatus::kFail;
      c.reading = "open " + f + ": " + std::strerror(errno);
      c.advice = "check the dataset's permissions";
      return c;
    }
    ++nfiles;
    for (uint64_t off = 0; total < max_bytes;) {
      ssize_t n = ::pread(fd.get(), buf.data(), kBlock, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && is_direct) {  // the filesystem refuses direct reads after all
        fd.reset(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
        is_direct = false;
        continue;
      }
      if (n < 0) {
        c.status = CheckStatus::kFail;
        c.reading = "read " + f + " offset " + std::to_string(off) + ": " + std::strerror(errno);
        c.meaning = "the dataset cannot be read";
        c.advice = "check the device (dmesg) and run `stoker verify`";
        return c;
      }
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
      off += static_cast<uint64_t>(n);
      if (static_cast<size_t>(n) < kBlock) break;
    }
    (is_direct ? direct : buffered)++;
  }
  const double secs = std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  const double mbps = total / secs / 1e6;
  c.reading = "read " + format_bytes(static_cast<double>(total)) + " of " + std::to_string(nfiles) + " file" +
              (nfiles == 1 ? "" : "s") + " in " + f1(secs * 1000) + " ms: " + f1(mbps) + " MB/s (" +
              (buffered == 0 ? "O_DIRECT" : direct == 0 ? "buffered, may be page cache" : "partly O_DIRECT") + ")";
  // The yardstick: what one decode thread consumes of ImageNet-sized JPEGs cropped to
  // 224x224 (`stoker bench feed`, bench/README.md). Reads slower than the decoders'
  // appetite make the feed storage-bound whatever the thread count.
  constexpr double kDecodeThreadMBps = 40.0;
  const double need = kDecodeThreadMBps * std::max(1u, threads);
  if (mbps < need) {
    c.status = CheckStatus::kWarn;
    c.meaning = "sequential reads below ~" + f1(need) + " MB/s, what " + std::to_string(threads) +
                " decode threads consume on ImageNet-sized JPEGs: expect a storage-bound feed";
    c.advice = "stage the dataset on local NVMe or in RAM; `stoker bench io` measures the loader's own read path";
  } else {
    c.status = CheckStatus::kOk;
    c.meaning = "reads outpace what " + std::to_string(threads) + " decode threads consume (~" + f1(need) + " MB/s)";
  }
  return c;
}

DoctorReport run_doctor(const DoctorOptions& o) {
  const std::string root = o.root.empty() ? "/" : o.root;
  const bool live = o.live.value_or(root == "/");
  DoctorReport rep;

  const int device = select_device(o.device, 0);  // LOCAL_RANK when not given; malformed: kInvalidArgument
  const std::vector<std::string> gpus = find_nvidia_gpus(root);
  std::optional<std::string> gpu;
  if (device >= 0 && static_cast<size_t>(device) < gpus.size()) gpu = gpus[static_cast<size_t>(device)];

  unsigned threads = o.threads;
  if (threads == 0) {
    // Every CPU this process may use, not capped by the quota: the quota check below
    // compares exactly this count with it.
    auto allowed = allowed_cpus(root);
    if (allowed.empty() && live) allowed = internal::affinity_cpus();
    threads = static_cast<unsigned>(std::max<size_t>(1, allowed.size()));
  }
  const uint64_t pinned = o.pinned_bytes ? o.pinned_bytes : (64ull << 20) + 4ull * 64 * 224 * 224 * 3;

  if (live) {
    rep.checks.push_back(internal::check_io_uring(io_uring_unavailable_reason()));
  } else {
    auto dis = read_sys(root, "/proc/sys/kernel/io_uring_disabled");
    if (dis && *dis != "0") {
      rep.checks.push_back(internal::check_io_uring("kernel.io_uring_disabled=" + *dis));
    } else {
      Check c;
      c.name = "io_uring";
      c.reading = "not probed (not the live system root)";
      rep.checks.push_back(c);
    }
  }
  rep.checks.push_back(internal::check_o_direct(o.dataset));
  rep.checks.push_back(internal::check_cpu_governor(root));
  rep.checks.push_back(internal::check_cgroup_quota(root, threads));
  rep.checks.push_back(internal::check_affinity_numa(root, gpu));
  rep.checks.push_back(internal::check_pcie_link(root, gpu));
  rep.checks.push_back(internal::check_memlock(root, pinned));
  rep.checks.push_back(internal::check_memory(root, pinned));
  rep.checks.push_back(internal::check_transparent_hugepages(root));
  if (live) {
    rep.checks.push_back(internal::check_gpu_clocks(device));
  } else {
    Check c;
    c.name = "gpu_clocks";
    c.reading = "not probed (not the live system root)";
    rep.checks.push_back(c);
  }
  rep.checks.push_back(internal::check_read_probe(o.dataset, o.probe_bytes, threads));
  rep.checks.push_back(internal::check_fast_crop(o.dataset));
  return rep;
}

}  // namespace stoker
