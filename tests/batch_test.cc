// Batch slot memory (batch.h): host_slot_allocator().
#include "stoker/batch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "util/test_util.h"

namespace stoker {
namespace {

// Slot memory: 2 MiB and up on huge-page boundaries, advised for THP where the kernel
// has it (image batches, and a token ring's one block); smaller slots page-aligned.
TEST(HostSlotAllocator, LargeSlotsGoOnHugePagesSmallOnesArePageAligned) {
  auto a = host_slot_allocator();
  for (size_t bytes : {size_t{4096}, size_t{300} << 10, size_t{2} << 20, (size_t{9} << 20) + 12345}) {
    auto* p = static_cast<uint8_t*>(a->allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u) << bytes;
    std::memset(p, 0xA5, bytes);  // all of it is there to write
    EXPECT_EQ(p[bytes - 1], 0xA5);
    if (bytes >= (size_t{2} << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u) << bytes;
      if (testing::thp_available()) {
        EXPECT_EQ(testing::thp_eligible(p), 1) << bytes;
      }
    }
    a->deallocate(p, bytes);
  }
}

}  // namespace
}  // namespace stoker
