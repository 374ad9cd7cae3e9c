// The CPU plan and the platform readings under it (cpu.h, util/platform.h), fed fixture
// sysfs/procfs/cgroup trees: cgroup v1 and v2 quotas, NUMA nodes, allowed CPU lists,
// and the plan that combines them.
#include "stoker/cpu.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "stoker/error.h"
#include "util/platform.h"
#include "util/test_util.h"

namespace fs = std::filesystem;

namespace stoker {
namespace {

using testing::put;
using testing::TempDir;

// ---- CPU lists --------------------------------------------------------------------------

TEST(CpuList, ParsesRangesAndSinglesSortedWithoutDuplicates) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5,1-2,2"), (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(CpuList, BadSyntaxIsInvalidArgumentNamingTheText) {
  for (const std::string bad : {"a", "1-", "-3", "3-1", "1;2", "1234567", "+1"}) {
    try {
      parse_cpu_list(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

// ---- cgroup quota -------------------------------------------------------------------------

TEST(CgroupQuota, V1AndV2TreesGiveTheQuotaInCpus) {
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> files;
    double want;  // CPUs; 0 = unlimited
  };
  const std::vector<Case> cases = {
      {"v2: the process's cgroup's cpu.max",
       {{"/proc/self/cgroup", "0::/kubepods/pod1/ctr\n"}, {"/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "250000 100000\n"}},
       2.5},
      {"v2: unlimited here, the nearest limited ancestor counts",
       {{"/proc/self/cgroup", "0::/a/b\n"},
        {"/sys/fs/cgroup/a/b/cpu.max", "max 100000\n"},
        {"/sys/fs/cgroup/a/cpu.max", "150000 100000\n"}},
       1.5},
      {"v2: max everywhere is unlimited",
       {{"/proc/self/cgroup", "0::/a\n"}, {"/sys/fs/cgroup/a/cpu.max", "max 100000\n"}, {"/sys/fs/cgroup/cpu.max", "max 100000\n"}},
       0},
      {"hybrid hierarchy: the v2 line is found among v1 lines",
       {{"/proc/self/cgroup", "12:cpu,cpuacct:/x\n0::/x\n"}, {"/sys/fs/cgroup/x/cpu.max", "400000 100000\n"}},
       4.0},
      {"v1: quota over period",
       {{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "300000\n"}, {"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"}},
       3.0},
      {"v1: -1 is unlimited",
       {{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n"}, {"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"}},
       0},
      {"no cgroup files at all", {}, 0},
      {"malformed values read as unlimited",
       {{"/proc/self/cgroup", "0::/\n"},
        {"/sys/fs/cgroup/cpu.max", "lots 100000\n"},
        {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "12x\n"},
        {"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"}},
       0},
  };
  for (const Case& c : cases) {
    TempDir root;
    for (const auto& [path, text] : c.files) put(root, path, text);
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota(root.str()), c.want) << c.what;
  }
}

// ---- NUMA and allowed CPUs ------------------------------------------------------------------

TEST(Platform, PciNumaNodeAndItsCpus) {
  TempDir root;
  put(root, "/sys/bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  put(root, "/sys/bus/pci/devices/0000:99:00.0/numa_node", "-1\n");
  put(root, "/sys/bus/pci/devices/0000:aa:00.0/numa_node", "one\n");
  put(root, "/sys/devices/system/node/node1/cpulist", "8-11,24\n");
  put(root, "/sys/devices/system/node/node2/cpulist", "garbage\n");
  EXPECT_EQ(internal::pci_numa_node(root.str(), "0000:17:00.0"), 1);
  EXPECT_EQ(internal::pci_numa_node(root.str(), "0000:99:00.0"), -1);
  EXPECT_EQ(internal::pci_numa_node(root.str(), "0000:aa:00.0"), -1);
  EXPECT_EQ(internal::pci_numa_node(root.str(), "0000:00:00.0"), -1);
  EXPECT_EQ(internal::numa_node_cpus(root.str(), 1), (std::vector<int>{8, 9, 10, 11, 24}));
  EXPECT_EQ(internal::numa_node_cpus(root.str(), 2), std::vector<int>{});
  EXPECT_EQ(internal::numa_node_cpus(root.str(), 3), std::vector<int>{});
}

TEST(Platform, AllowedCpusFromProcStatus) {
  TempDir root;
  put(root, "/proc/self/status", "Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,6\nMems_allowed_list:\t0\n");
  EXPECT_EQ(internal::allowed_cpus(root.str()), (std::vector<int>{0, 1, 2, 3, 6}));
  TempDir none;
  EXPECT_EQ(internal::allowed_cpus(none.str()), std::vector<int>{});
}

TEST(Platform, UsableCpusIsTheAllowedSetCappedByTheQuota) {
  TempDir root;
  put(root, "/proc/self/status", "Cpus_allowed_list:\t0-7\n");
  EXPECT_EQ(internal::usable_cpus(root.str()), 8u);
  put(root, "/proc/self/cgroup", "0::/c\n");
  put(root, "/sys/fs/cgroup/c/cpu.max", "250000 100000\n");
  EXPECT_EQ(internal::usable_cpus(root.str()), 2u);  // floor(2.5)
  put(root, "/sys/fs/cgroup/c/cpu.max", "50000 100000\n");
  EXPECT_EQ(internal::usable_cpus(root.str()), 1u);  // never 0
}

TEST(Platform, UsableCpusOfTheLiveSystemIsTheAffinityMask) {
  const auto mask = internal::affinity_cpus();
  ASSERT_FALSE(mask.empty());
  const unsigned n = internal::usable_cpus();
  EXPECT_GE(n, 1u);
  EXPECT_LE(n, mask.size());
}

TEST(Platform, ReadSysTrimsAndMissingIsNullopt) {
  TempDir root;
  put(root, "/sys/kernel/mm/transparent_hugepage/enabled", "  always [madvise] never \n");
  EXPECT_EQ(internal::read_sys(root.str(), "/sys/kernel/mm/transparent_hugepage/enabled"),
            "always [madvise] never");
  EXPECT_EQ(internal::read_sys(root.str(), "/sys/nothing"), std::nullopt);
  EXPECT_EQ(internal::under_root("/", "/sys/x"), "/sys/x");
  EXPECT_EQ(internal::under_root("/tmp/r//", "/sys/x"), "/tmp/r/sys/x");
}

// ---- the open-file limit ------------------------------------------------------------------

TEST(Platform, OpenFileLimitIsRaisedTowardsTheHardLimitAndSaysSo) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 64) GTEST_SKIP() << "hard limit too low to test";
  // Lower the soft limit (allowed), then ask for a little more than that.
  rlimit low = saved;
  low.rlim_cur = 48;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  ::testing::internal::CaptureStderr();
  const uint64_t got = internal::ensure_open_file_limit(60, "a test of 30 shards");
  const std::string said = ::testing::internal::GetCapturedStderr();
  rlimit now{};
  getrlimit(RLIMIT_NOFILE, &now);
  EXPECT_EQ(got, 60u);
  EXPECT_EQ(now.rlim_cur, 60u);
  EXPECT_NE(said.find("raised the open-file limit (RLIMIT_NOFILE) from 48 to 60 for a test of 30 shards"),
            std::string::npos)
      << said;
  // Enough already: silent, unchanged.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(internal::ensure_open_file_limit(50, "x"), 60u);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  // Beyond the hard limit: raised as far as allowed, and a warning names what needs more.
  if (saved.rlim_max != RLIM_INFINITY) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(internal::ensure_open_file_limit(static_cast<uint64_t>(saved.rlim_max) + 1, "a huge dataset"),
              static_cast<uint64_t>(saved.rlim_max));
    const std::string warned = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(warned.find("warning: a huge dataset may need"), std::string::npos) << warned;
    EXPECT_NE(warned.find("ulimit -n"), std::string::npos) << warned;
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

// ---- the plan -----------------------------------------------------------------------------

TEST(CpuPlan, PinsToTheGpusNodeWithinTheAffinityMask) {
  TempDir root;
  put(root, "/sys/bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  put(root, "/sys/devices/system/node/node1/cpulist", "4-7\n");
  const CpuPlan p = plan_cpus(std::string("0000:17:00.0"), root.str(), {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(p.cpus, (std::vector<int>{4, 5}));
  EXPECT_EQ(p.numa_node, 1);
  EXPECT_EQ(p.threads, 2u);
  EXPECT_NE(p.explanation.find("NUMA node 1"), std::string::npos) << p.explanation;
}

TEST(CpuPlan, NodeOutsideTheMaskFallsBackToTheWholeMaskAndSaysSo) {
  TempDir root;
  put(root, "/sys/bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  put(root, "/sys/devices/system/node/node1/cpulist", "8-11\n");
  const CpuPlan p = plan_cpus(std::string("0000:17:00.0"), root.str(), {0, 1, 2});
  EXPECT_EQ(p.cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.numa_node, -1);
  EXPECT_NE(p.explanation.find("has none of them"), std::string::npos) << p.explanation;
}

TEST(CpuPlan, UnknownNodeOrNoGpuUsesTheMask) {
  TempDir root;
  put(root, "/sys/bus/pci/devices/0000:17:00.0/numa_node", "-1\n");
  const CpuPlan p = plan_cpus(std::string("0000:17:00.0"), root.str(), {3, 1, 2});
  EXPECT_EQ(p.cpus, (std::vector<int>{1, 2, 3}));
  EXPECT_NE(p.explanation.find("NUMA node is unknown"), std::string::npos) << p.explanation;
  const CpuPlan q = plan_cpus(std::nullopt, root.str(), {0, 1});
  EXPECT_EQ(q.cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(q.threads, 2u);
}

TEST(CpuPlan, QuotaCapsTheThreadsNotTheCpuSet) {
  TempDir root;
  put(root, "/proc/self/cgroup", "0::/job\n");
  put(root, "/sys/fs/cgroup/job/cpu.max", "350000 100000\n");
  const CpuPlan p = plan_cpus(std::nullopt, root.str(), {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(p.cpus.size(), 8u);
  EXPECT_DOUBLE_EQ(p.quota_cpus, 3.5);
  EXPECT_EQ(p.threads, 3u);
  EXPECT_NE(p.explanation.find("cgroup CPU quota of 3.50"), std::string::npos) << p.explanation;
}

}  // namespace
}  // namespace stoker
