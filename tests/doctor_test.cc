// `stoker doctor`'s checks, fed fixture sysfs/procfs trees: each reading and decision.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "stoker/diagnose.h"
#include "diagnose/doctor_checks.h"
#include "util/test_util.h"

namespace fs = std::filesystem;

namespace stoker {
namespace {

using testing::put;
using testing::TempDir;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- CPU governor ------------------------------------------------------------------------

TEST(DoctorGovernor, PowersaveWarnsPerformanceIsOk) {
  struct Row {
    std::vector<std::string> governors;
    CheckStatus want;
    const char* reading;
  };
  const Row rows[] = {
      {{"powersave", "powersave"}, CheckStatus::kWarn, "powersave on 2 of 2 CPUs"},
      {{"performance", "performance", "performance"}, CheckStatus::kOk, "performance on 3 of 3 CPUs"},
      {{"performance", "schedutil"}, CheckStatus::kWarn, "schedutil on 1 of 2 CPUs"},
      {{}, CheckStatus::kSkip, "no cpufreq governor"},
  };
  for (const Row& r : rows) {
    TempDir root;
    put(root, "/sys/devices/system/cpu/online", "0-7\n");  // not a cpuN directory: ignored
    for (size_t i = 0; i < r.governors.size(); ++i)
      put(root, "/sys/devices/system/cpu/cpu" + std::to_string(i) + "/cpufreq/scaling_governor", r.governors[i] + "\n");
    const Check c = internal::check_cpu_governor(root.str());
    EXPECT_EQ(c.name, "cpu_governor");
    EXPECT_EQ(c.status, r.want) << c.reading;
    EXPECT_TRUE(has(c.reading, r.reading)) << c.reading;
    EXPECT_EQ(c.advice.empty(), r.want != CheckStatus::kWarn) << c.advice;
  }
}

// ---- transparent huge pages --------------------------------------------------------------

TEST(DoctorHugePages, NeverWarnsMadviseAndAlwaysAreOk) {
  struct Row {
    const char* enabled;
    CheckStatus want;
    const char* reading;
  };
  const Row rows[] = {
      {"always [madvise] never\n", CheckStatus::kOk, "enabled = madvise"},
      {"[always] madvise never\n", CheckStatus::kOk, "enabled = always"},
      {"always madvise [never]\n", CheckStatus::kWarn, "enabled = never"},
      {nullptr, CheckStatus::kSkip, "no transparent_hugepage"},
  };
  for (const Row& r : rows) {
    TempDir root;
    if (r.enabled) put(root, "/sys/kernel/mm/transparent_hugepage/enabled", r.enabled);
    const Check c = internal::check_transparent_hugepages(root.str());
    EXPECT_EQ(c.name, "transparent_hugepages");
    EXPECT_EQ(c.status, r.want) << c.reading;
    EXPECT_TRUE(has(c.reading, r.reading)) << c.reading;
    EXPECT_EQ(c.advice.empty(), r.want != CheckStatus::kWarn) << c.advice;
  }
}

// ---- cgroup quota ------------------------------------------------------------------------

TEST(DoctorQuota, QuotaBelowTheLoaderThreadsWarns) {
  struct Row {
    const char* cpu_max;
    unsigned threads;
    CheckStatus want;
    const char* reading;
    const char* advice;
  };
  const Row rows[] = {
      {"50000 100000", 4, CheckStatus::kWarn, "cpu.max quota 0.5 CPUs; loader threads: 4 decode + 1 IO", "use 1 decode thread"},
      {"400000 100000", 4, CheckStatus::kWarn, "quota 4.0 CPUs", "use 3 decode threads"},
      {"400000 100000", 3, CheckStatus::kOk, "quota 4.0 CPUs; loader threads: 3 decode + 1 IO", ""},
      {"max 100000", 16, CheckStatus::kOk, "no CPU quota", ""},
  };
  for (const Row& r : rows) {
    TempDir root;
    put(root, "/proc/self/cgroup", "0::/job/step\n");
    put(root, "/sys/fs/cgroup/job/step/cpu.max", std::string(r.cpu_max) + "\n");
    const Check c = internal::check_cgroup_quota(root.str(), r.threads);
    EXPECT_EQ(c.status, r.want) << r.cpu_max << ": " << c.reading;
    EXPECT_TRUE(has(c.reading, r.reading)) << c.reading;
    EXPECT_TRUE(has(c.advice, r.advice)) << c.advice;
  }
}

// ---- PCIe link ---------------------------------------------------------------------------

void gpu(const TempDir& root, const std::string& addr, const std::string& cur_speed, const std::string& max_speed,
         int cur_w, int max_w, int numa = -1) {
  const std::string d = "/sys/bus/pci/devices/" + addr;
  put(root, d + "/vendor", "0x10de\n");
  put(root, d + "/class", "0x030200\n");
  put(root, d + "/current_link_speed", cur_speed + "\n");
  put(root, d + "/max_link_speed", max_speed + "\n");
  put(root, d + "/current_link_width", std::to_string(cur_w) + "\n");
  put(root, d + "/max_link_width", std::to_string(max_w) + "\n");
  put(root, d + "/numa_node", std::to_string(numa) + "\n");
}

TEST(DoctorPcie, FindsNvidiaDisplayFunctionsOnly) {
  TempDir root;
  gpu(root, "0000:b1:00.0", "16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16);
  gpu(root, "0000:17:00.0", "16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16);
  put(root, "/sys/bus/pci/devices/0000:17:00.1/vendor", "0x10de\n");  // the GPU's audio function
  put(root, "/sys/bus/pci/devices/0000:17:00.1/class", "0x040300\n");
  put(root, "/sys/bus/pci/devices/0000:00:02.0/vendor", "0x8086\n");  // another vendor's VGA
  put(root, "/sys/bus/pci/devices/0000:00:02.0/class", "0x030000\n");
  EXPECT_EQ(find_nvidia_gpus(root.str()), (std::vector<std::string>{"0000:17:00.0", "0000:b1:00.0"}));
  TempDir empty;
  EXPECT_TRUE(find_nvidia_gpus(empty.str()).empty());
}

TEST(DoctorPcie, DowntrainedLinkWarnsOrFails) {
  struct Row {
    const char* cur;
    int cur_w;
    CheckStatus want;
    const char* reading;
    const char* meaning;
  };
  const Row rows[] = {
      {"16.0 GT/s PCIe", 16, CheckStatus::kOk, "16.0 GT/s x16 (max 16.0 GT/s x16), ~31.5 of 31.5 GB/s", "full"},
      {"8.0 GT/s PCIe", 8, CheckStatus::kWarn, "8.0 GT/s x8 (max 16.0 GT/s x16), ~7.9 of 31.5 GB/s", "x8 of x16"},
      {"2.5 GT/s PCIe", 16, CheckStatus::kWarn, "2.5 GT/s x16", "GPUs lower it when idle"},
      {"16.0 GT/s PCIe", 4, CheckStatus::kFail, "16.0 GT/s x4", "25% of the lanes"},
  };
  for (const Row& r : rows) {
    TempDir root;
    gpu(root, "0000:17:00.0", r.cur, "16.0 GT/s PCIe", r.cur_w, 16);
    const Check c = internal::check_pcie_link(root.str(), std::string("0000:17:00.0"));
    EXPECT_EQ(c.status, r.want) << c.reading;
    EXPECT_TRUE(has(c.reading, r.reading)) << c.reading;
    EXPECT_TRUE(has(c.meaning, r.meaning)) << c.meaning;
  }
  EXPECT_EQ(internal::check_pcie_link("/nonexistent", std::nullopt).status, CheckStatus::kSkip);
}

// ---- affinity and NUMA --------------------------------------------------------------------

TEST(DoctorNuma, AffinityOffTheGpuNodeWarns) {
  struct Row {
    const char* allowed;
    CheckStatus want;
    const char* meaning;
  };
  const Row rows[] = {
      {"0-3", CheckStatus::kWarn, "none of this process's CPUs is on the GPU's node"},
      {"4-7", CheckStatus::kOk, "every allowed CPU is on the GPU's node"},
      {"2-5", CheckStatus::kOk, "2 of 4 allowed CPUs are on the GPU's node"},
  };
  for (const Row& r : rows) {
    TempDir root;
    gpu(root, "0000:17:00.0", "16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16, 1);
    put(root, "/sys/devices/system/node/node0/cpulist", "0-3\n");
    put(root, "/sys/devices/system/node/node1/cpulist", "4-7\n");
    put(root, "/proc/self/status", std::string("Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t") + r.allowed + "\n");
    const Check c = internal::check_affinity_numa(root.str(), std::string("0000:17:00.0"));
    EXPECT_EQ(c.status, r.want) << c.reading;
    EXPECT_TRUE(has(c.reading, std::string("allowed CPUs ") + r.allowed + "; GPU 0000:17:00.0 on NUMA node 1 (CPUs 4-7)"))
        << c.reading;
    EXPECT_TRUE(has(c.meaning, r.meaning)) << c.meaning;
    if (r.want == CheckStatus::kWarn) {
      EXPECT_TRUE(has(c.advice, "numactl --cpunodebind=1")) << c.advice;
    }
  }
}

// ---- memlock and memory -------------------------------------------------------------------

std::string limits(const std::string& soft) {
  return "Limit                     Soft Limit           Hard Limit           Units     \n"
         "Max open files            1024                 1048576              files     \n"
         "Max locked memory         " + soft + "                " + soft + "                bytes     \n";
}

TEST(DoctorMemlock, SmallLimitWarns) {
  const uint64_t need = 100ull << 20;
  struct Row {
    std::string soft;
    CheckStatus want;
    const char* reading;
  };
  const Row rows[] = {
      {"65536", CheckStatus::kWarn, "RLIMIT_MEMLOCK 64.0 KiB, the loader locks ~100.0 MiB"},
      {"8388608", CheckStatus::kWarn, "RLIMIT_MEMLOCK 8.0 MiB"},
      {"1073741824", CheckStatus::kOk, "RLIMIT_MEMLOCK 1.0 GiB"},
      {"unlimited", CheckStatus::kOk, "RLIMIT_MEMLOCK unlimited"},
  };
  for (const Row& r : rows) {
    TempDir root;
    put(root, "/proc/self/limits", limits(r.soft));
    const Check c = internal::check_memlock(root.str(), need);
    EXPECT_EQ(c.status, r.want) << c.reading;
    EXPECT_TRUE(has(c.reading, r.reading)) << c.reading;
    EXPECT_EQ(has(c.advice, "ulimit -l unlimited"), r.want == CheckStatus::kWarn);
  }
  TempDir none;
  EXPECT_EQ(internal::check_memlock(none.str(), need).status, CheckStatus::kSkip);
  // The kernel decides whether io_uring's buffers count against the limit.
  const std::pair<const char*, CheckStatus> kernels[] = {
      {"5.10.0-21-amd64", CheckStatus::kWarn}, {"5.12.0", CheckStatus::kOk}, {"6.1.0-13-cloud-amd64", CheckStatus::kOk}};
  for (const auto& [release, want] : kernels) {
    TempDir root;
    put(root, "/proc/self/limits", limits("65536"));
    put(root, "/proc/sys/kernel/osrelease", std::string(release) + "\n");
    const Check c = internal::check_memlock(root.str(), need);
    EXPECT_EQ(c.status, want) << release << ": " << c.reading;
    EXPECT_TRUE(has(c.reading, std::string("; kernel ") + release)) << c.reading;
    EXPECT_TRUE(has(c.meaning, want == CheckStatus::kOk ? "memory cgroup" : "this kernel (before 5.12)")) << c.meaning;
  }
}

std::string meminfo(uint64_t total_kb, uint64_t avail_kb, uint64_t hugepages) {
  std::ostringstream s;
  s << "MemTotal:       " << total_kb << " kB\nMemFree:         1000 kB\nMemAvailable:   " << avail_kb
    << " kB\nHugePages_Total:    " << hugepages << "\nHugePages_Free:     " << hugepages
    << "\nHugepagesize:       2048 kB\n";
  return s.str();
}

TEST(DoctorMemory, AvailableMemoryAndHugepagesDecide) {
  const uint64_t need = 100ull << 20;
  struct Row {
    uint64_t total_kb, avail_kb, hugepages;
    CheckStatus want;
    const char* reading;
    const char* meaning;
  };
  const Row rows[] = {
      {16 << 20, 12 << 20, 0, CheckStatus::kOk, "MemAvailable 12.0 GiB of 16.0 GiB; hugepages 0 x 2.0 MiB reserved",
       "needs no reserved hugepages"},
      {16 << 20, 50 << 10, 0, CheckStatus::kFail, "MemAvailable 50.0 MiB of 16.0 GiB", "less memory available"},
      {16 << 20, 1 << 20, 0, CheckStatus::kWarn, "MemAvailable 1.0 GiB", "will not stay in the page cache"},
      {16 << 20, 6 << 20, 5000, CheckStatus::kWarn, "hugepages 5000 x 2.0 MiB reserved (9.8 GiB)",
       "that the page cache"},
  };
  for (const Row& r : rows) {
    TempDir root;
    put(root, "/proc/meminfo", meminfo(r.total_kb, r.avail_kb, r.hugepages));
    put(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
    const Check c = internal::check_memory(root.str(), need);
    EXPECT_EQ(c.status, r.want) << c.reading;
    EXPECT_TRUE(has(c.reading, r.reading)) << c.reading;
    EXPECT_TRUE(has(c.reading, "transparent hugepages madvise")) << c.reading;
    EXPECT_TRUE(has(c.meaning, r.meaning)) << c.meaning;
  }
}

// ---- io_uring, O_DIRECT, NVML, read probe --------------------------------------------------

TEST(DoctorIoUring, ReasonMeansFallback) {
  EXPECT_EQ(internal::check_io_uring("").status, CheckStatus::kOk);
  const Check c = internal::check_io_uring("io_uring_setup: Operation not permitted (errno 1), seccomp?");
  EXPECT_EQ(c.status, CheckStatus::kWarn);
  EXPECT_EQ(c.reading, "io_uring_setup: Operation not permitted (errno 1), seccomp?");
  EXPECT_TRUE(has(c.meaning, "pread thread pool"));
}

TEST(DoctorIoUring, FixtureRootIsNotProbedUnlessTheSysctlDisablesIt) {
  TempDir root;
  DoctorOptions o;
  o.root = root.str();
  auto find = [](const DoctorReport& r, const std::string& name) {
    for (const Check& c : r.checks)
      if (c.name == name) return c;
    return Check{};
  };
  EXPECT_EQ(find(run_doctor(o), "io_uring").status, CheckStatus::kSkip);
  put(root, "/proc/sys/kernel/io_uring_disabled", "2\n");
  const Check c = find(run_doctor(o), "io_uring");
  EXPECT_EQ(c.status, CheckStatus::kWarn);
  EXPECT_EQ(c.reading, "kernel.io_uring_disabled=2");
}

TEST(DoctorODirect, MatchesWhatTheFilesystemDoes) {
  TempDir d;
  testing::write_file(d.str("shard-0.stk"), testing::random_bytes(3 * 4096, 1));
  testing::write_file(d.str("MANIFEST"), testing::random_bytes(100, 2));
  const int fd = ::open(d.str("shard-0.stk").c_str(), O_RDONLY | O_DIRECT);
  const bool fs_direct = fd >= 0;
  if (fd >= 0) ::close(fd);
  const Check c = internal::check_o_direct(d.str());
  EXPECT_EQ(c.status, fs_direct ? CheckStatus::kOk : CheckStatus::kWarn) << c.reading;
  EXPECT_TRUE(has(c.reading, d.str("shard-0.stk"))) << c.reading;  // the largest file is probed
  if (fs_direct) {
    EXPECT_TRUE(has(c.reading, "aligned read of 4096 bytes")) << c.reading;
  }
  EXPECT_EQ(internal::check_o_direct(std::nullopt).status, CheckStatus::kSkip);
  EXPECT_EQ(internal::check_o_direct(d.str("missing")).status, CheckStatus::kFail);
}

TEST(DoctorReadProbe, ReadsUpToTheBudget) {
  TempDir d;
  for (int i = 0; i < 3; ++i)
    testing::write_file(d.str("shard-" + std::to_string(i) + ".stk"), testing::random_bytes((1 << 20) + 4096, i));
  const Check c = internal::check_read_probe(d.str(), 2ull << 20, 1);
  EXPECT_NE(c.status, CheckStatus::kFail) << c.reading;
  EXPECT_NE(c.status, CheckStatus::kSkip) << c.reading;
  EXPECT_TRUE(has(c.reading, "read 2.0 MiB of 2 files in ")) << c.reading;
  const Check all = internal::check_read_probe(d.str(), 64ull << 20, 1);
  EXPECT_TRUE(has(all.reading, "read 3.0 MiB of 3 files in ")) << all.reading;
  EXPECT_EQ(internal::check_read_probe(std::nullopt, 1 << 20, 1).status, CheckStatus::kSkip);
  TempDir empty;
  EXPECT_EQ(internal::check_read_probe(empty.str(), 1 << 20, 1).status, CheckStatus::kFail);
}

TEST(DoctorNvml, SkipsWithoutTheDriver) {
  void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  const Check c = internal::check_gpu_clocks(0);
  if (h) {
    dlclose(h);
    EXPECT_NE(c.status, CheckStatus::kSkip) << c.reading;
  } else {
    EXPECT_EQ(c.status, CheckStatus::kSkip);
    EXPECT_TRUE(has(c.reading, "NVML not found")) << c.reading;
  }
}

// ---- the whole report and the command ------------------------------------------------------

void bad_node(const TempDir& root) {
  for (int i = 0; i < 2; ++i)
    put(root, "/sys/devices/system/cpu/cpu" + std::to_string(i) + "/cpufreq/scaling_governor", "powersave\n");
  put(root, "/proc/self/cgroup", "0::/\n");
  put(root, "/sys/fs/cgroup/cpu.max", "50000 100000\n");
  put(root, "/proc/self/status", "Cpus_allowed_list:\t0-3\n");
  put(root, "/proc/self/limits", limits("65536"));
  put(root, "/proc/meminfo", meminfo(16 << 20, 50 << 10, 0));
  gpu(root, "0000:17:00.0", "8.0 GT/s PCIe", "16.0 GT/s PCIe", 8, 16, 0);
  put(root, "/sys/devices/system/node/node0/cpulist", "0-3\n");
  put(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
}

TEST(DoctorReportTest, FixtureNodeReportsEveryCheck) {
  TempDir root;
  bad_node(root);
  DoctorOptions o;
  o.root = root.str();
  const DoctorReport r = run_doctor(o);
  std::map<std::string, CheckStatus> got;
  for (const Check& c : r.checks) got[c.name] = c.status;
  const std::map<std::string, CheckStatus> want = {
      {"io_uring", CheckStatus::kSkip},      {"o_direct", CheckStatus::kSkip},
      {"cpu_governor", CheckStatus::kWarn},  {"cgroup_cpu_quota", CheckStatus::kWarn},
      {"affinity_numa", CheckStatus::kOk},   {"pcie_link", CheckStatus::kWarn},
      {"memlock", CheckStatus::kWarn},       {"memory", CheckStatus::kFail},
      {"transparent_hugepages", CheckStatus::kWarn},
      {"gpu_clocks", CheckStatus::kSkip},    {"read_probe", CheckStatus::kSkip},
      {"fast_crop", CheckStatus::kSkip},
  };
  EXPECT_EQ(got, want);
  EXPECT_TRUE(r.failed());
  // Threads default to the allowed CPUs (4) against the 0.5-CPU quota.
  for (const Check& c : r.checks) {
    if (c.name == "cgroup_cpu_quota") {
      EXPECT_TRUE(has(c.reading, "4 decode + 1 IO")) << c.reading;
    }
  }
  const std::string j = r.to_json();
  EXPECT_EQ(j.rfind("{\"checks\":[{\"name\":\"io_uring\",\"status\":\"skip\",\"reading\":", 0), 0u) << j;
  EXPECT_TRUE(has(j, "\"ok\":1,\"warn\":5,\"fail\":1,\"skip\":5,\"failed\":true}")) << j;
  EXPECT_TRUE(has(r.to_text(), "[warn] cpu_governor: powersave on 2 of 2 CPUs")) << r.to_text();
}

}  // namespace
}  // namespace stoker
