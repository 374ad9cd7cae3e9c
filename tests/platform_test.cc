// The platform readings (util/platform.h) on fixture sysfs/procfs trees: a PCI device's
// NUMA node and the node's CPU list, the allowed CPUs of /proc/self/status, the usable
// CPU count (allowed set capped by the cgroup quota), sysfs values trimmed and missing
// ones unknown, and the open-file limit raised towards the hard limit. The cgroup quota
// itself: cpu_test.cc (CgroupQuota).
#include "util/platform.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>
#include <vector>

#include "util/test_util.h"

namespace stoker {
namespace {

using testing::put;
using testing::TempDir;

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

}  // namespace
}  // namespace stoker
