// The CPU plan (cpu.h), fed fixture sysfs/procfs/cgroup trees: CPU lists, cgroup v1 and
// v2 quotas, and the plan that combines the GPU's NUMA node, the affinity mask and the
// quota. The readings under it (util/platform.h): platform_test.cc.
#include "stoker/cpu.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "stoker/error.h"
#include "util/platform.h"
#include "util/test_util.h"

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
      {"v2: a tighter ancestor binds",
       {{"/proc/self/cgroup", "0::/a/b\n"},
        {"/sys/fs/cgroup/a/b/cpu.max", "300000 100000\n"},
        {"/sys/fs/cgroup/a/cpu.max", "200000 100000\n"}},
       2.0},
      {"v1: the quota on the process's own nested cgroup",
       {{"/proc/self/cgroup", "5:cpuacct,cpu:/docker/x\n3:memory:/docker/x\n"},
        {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
        {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"},
        {"/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "150000\n"},
        {"/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n"}},
       1.5},
      {"v1: a nested cgroup unlimited under a limited parent",
       {{"/proc/self/cgroup", "4:cpu,cpuacct:/slurm/job1/step0\n"},
        {"/sys/fs/cgroup/cpu/slurm/job1/step0/cpu.cfs_quota_us", "-1\n"},
        {"/sys/fs/cgroup/cpu/slurm/job1/step0/cpu.cfs_period_us", "100000\n"},
        {"/sys/fs/cgroup/cpu/slurm/job1/cpu.cfs_quota_us", "800000\n"},
        {"/sys/fs/cgroup/cpu/slurm/job1/cpu.cfs_period_us", "100000\n"}},
       8.0},
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


// One tree as a two-socket node under a batch scheduler lays it out: GPUs on both NUMA
// nodes, the job's cpuset in /proc/self/status, its quota on the job's cgroup (the step's
// own cpu.max unlimited).
void put_two_socket_job(const TempDir& root) {
  put(root, "/sys/devices/system/node/node0/cpulist", "0-7,16-23\n");
  put(root, "/sys/devices/system/node/node1/cpulist", "8-15,24-31\n");
  put(root, "/sys/bus/pci/devices/0000:18:00.0/numa_node", "0\n");
  put(root, "/sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
  put(root, "/proc/self/status", "Name:\ttrain\nCpus_allowed_list:\t4-27\nMems_allowed_list:\t0-1\n");
  put(root, "/proc/self/cgroup", "0::/slurm/job42/step0\n");
  put(root, "/sys/fs/cgroup/slurm/job42/step0/cpu.max", "max 100000\n");
  put(root, "/sys/fs/cgroup/slurm/job42/cpu.max", "600000 100000\n");
}

TEST(CpuPlan, AWholeMachineTreeGivesEachGpuItsNodesCpusWithinTheCpusetCappedByTheQuota) {
  TempDir root;
  put_two_socket_job(root);
  const std::vector<int> cpuset = internal::allowed_cpus(root.str());
  ASSERT_EQ(cpuset, parse_cpu_list("4-27"));
  const CpuPlan p = plan_cpus(std::string("0000:3b:00.0"), root.str(), cpuset);
  EXPECT_EQ(p.cpus, parse_cpu_list("8-15,24-27"));
  EXPECT_EQ(p.numa_node, 1);
  EXPECT_DOUBLE_EQ(p.quota_cpus, 6.0);
  EXPECT_EQ(p.threads, 6u);
  EXPECT_NE(p.explanation.find("12 CPUs of NUMA node 1"), std::string::npos) << p.explanation;
  EXPECT_NE(p.explanation.find("capped to 6 by the cgroup CPU quota of 6.00 CPUs"), std::string::npos) << p.explanation;
  const CpuPlan q = plan_cpus(std::string("0000:18:00.0"), root.str(), cpuset);
  EXPECT_EQ(q.cpus, parse_cpu_list("4-7,16-23"));
  EXPECT_EQ(q.numa_node, 0);
  EXPECT_EQ(q.threads, 6u);
  // What a pool sized without a GPU gets: the whole cpuset, capped the same way.
  EXPECT_EQ(internal::usable_cpus(root.str()), 6u);
  EXPECT_DOUBLE_EQ(cgroup_cpu_quota(root.str()), 6.0);
}

TEST(CpuPlan, ANodeWhoseCpuListIsMissingKeepsTheMaskAndSaysSo) {
  TempDir root;
  put(root, "/sys/bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  const CpuPlan p = plan_cpus(std::string("0000:17:00.0"), root.str(), {0, 1, 2});
  EXPECT_EQ(p.cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p.numa_node, -1);
  EXPECT_EQ(p.threads, 3u);
  EXPECT_NE(p.explanation.find("the CPUs of the GPU's NUMA node 1 are unknown"), std::string::npos) << p.explanation;
}

}  // namespace
}  // namespace stoker
