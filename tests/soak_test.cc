// Soak: many epochs through one Loader; memory must be set by the ring, not by time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "util/bytes.h"
#include "util/datasets.h"
#include "util/test_util.h"

namespace stoker {
namespace {

uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(Soak, TwentyEpochsKeepRssFlat) {
  if (kSanitized) GTEST_SKIP() << "RSS says nothing under a sanitizer (freed memory is quarantined); the plain build runs this";
  testing::TempDir dir;
  testing::ImageDatasetSpec spec;
  spec.count = 96;
  spec.shard_size = 256ull << 20;  // one shard
  spec.classes = 3;
  spec.class_names = false;
  spec.size = [](int i) { return std::pair<int, int>{64 + i % 32, 48 + i % 16}; };
  testing::write_image_dataset(dir.str(), spec);
  LoaderOptions o;
  o.path = dir.str();
  o.batch_size = 16;
  o.transform.size = 48;
  o.threads = 2;
  o.rank = 0;
  o.world_size = 1;
  Loader l(o);
  uint64_t after_first = 0, peak = 0;
  for (uint64_t e = 0; e < 20; ++e) {
    l.set_epoch(e);
    uint64_t n = 0;
    while (auto b = l.next()) n += b->size();
    ASSERT_EQ(n, 96u);
    const uint64_t rss = rss_bytes();
    if (e == 0) after_first = rss;
    peak = std::max(peak, rss);
  }
  // Bound: after the first epoch has touched every allocation (ring, IO slab, decoder
  // scratch, thread stacks), 19 more epochs may add at most 4 MiB (allocator noise),
  // far less than one epoch's worth of decoded images would.
  EXPECT_LT(peak - after_first, 4u << 20) << "RSS after epoch 1: " << after_first << ", peak: " << peak;
}

}  // namespace
}  // namespace stoker
