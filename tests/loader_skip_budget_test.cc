// OnError::kSkip with a budget: a shard whose header is damaged is named once (not once
// per record), and an epoch that skips more than max_skipped stops with kDataLoss
// naming the count and the first reasons instead of quietly delivering (almost) nothing.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "util/bytes.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// 120 small images in several shards; returns the records of the shard whose header
// gets a flipped bit.
uint64_t make_with_broken_shard(const std::string& dir, std::string* broken_path) {
  DatasetWriterOptions wo;
  wo.shard_size = 24 << 10;
  DatasetWriter w(dir, Schema{{Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}}}, wo);
  for (int i = 0; i < 120; ++i) {
    auto jpeg = testing::make_jpeg(24 + i % 5, 20 + i % 3, static_cast<uint32_t>(i));
    std::vector<uint8_t> label(8);
    internal::put_u64(label.data(), static_cast<uint64_t>(i % 4));
    std::vector<std::span<const uint8_t>> f{jpeg, label};
    w.add(f);
  }
  w.finish();
  auto ds = Dataset::open(dir);
  EXPECT_GE(ds->shard_count(), 3u);
  *broken_path = ds->shard_path(1);
  auto bytes = testing::read_file(*broken_path);
  bytes[40] ^= 0x04;  // one bit of the header
  testing::write_file(*broken_path, bytes);
  return ds->manifest().shards[1].records;
}

LoaderOptions skip_options(const std::string& dir) {
  LoaderOptions o;
  o.path = dir;
  o.batch_size = 8;
  o.transform.size = 16;
  o.threads = 2;
  o.rank = 0;
  o.world_size = 1;
  o.on_error = OnError::kSkip;
  o.order.kind = OrderKind::kSequential;
  return o;
}

TEST(LoaderSkipBudget, ABrokenShardIsNamedOnceAndWithinTheBudgetTheEpochGoesOn) {
  TempDir dir;
  std::string broken;
  const uint64_t lost = make_with_broken_shard(dir.str(), &broken);
  ASSERT_GT(lost, 5u);
  auto o = skip_options(dir.str());
  o.max_skipped = std::numeric_limits<double>::infinity();
  Loader l(o);
  ::testing::internal::CaptureStderr();
  uint64_t n = 0;
  while (auto b = l.next()) n += b->size();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(n, 120 - lost);
  EXPECT_EQ(l.stats().skipped, lost);
  // One line for the shard, none per record.
  EXPECT_EQ(count_of(err, "stoker: warning: skipping"), 1u) << err;
  EXPECT_EQ(count_of(err, "every record of " + broken), 1u) << err;
}

TEST(LoaderSkipBudget, PastTheBudgetNextThrowsNamingTheCountAndTheReason) {
  TempDir dir;
  std::string broken;
  const uint64_t lost = make_with_broken_shard(dir.str(), &broken);
  for (double budget : {5.0, 0.02}) {  // a count; a fraction (2 % of 120: 2 samples)
    SCOPED_TRACE("max_skipped " + std::to_string(budget));
    auto o = skip_options(dir.str());
    o.max_skipped = budget;
    Loader l(o);
    try {
      ::testing::internal::CaptureStderr();
      while (l.next()) {
      }
      ::testing::internal::GetCapturedStderr();
      FAIL() << "an epoch losing " << lost << " of 120 samples went through";
    } catch (const Error& e) {
      ::testing::internal::GetCapturedStderr();
      const std::string what = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << what;
      const std::string allowed = budget >= 1 ? "(5)" : "(2)";
      EXPECT_NE(what.find("samples skipped in this epoch, more than max_skipped allows " + allowed), std::string::npos)
          << what;
      EXPECT_NE(what.find("every record of " + broken), std::string::npos) << what;
    }
  }
}

TEST(LoaderSkipBudget, TheDefaultBudgetStopsAnEpochThatLosesAShardOfMoreThan100) {
  TempDir dir;
  DatasetWriterOptions wo;
  wo.shard_size = 1 << 20;
  {
    DatasetWriter w(dir.str(), Schema{{Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}}}, wo);
    for (int i = 0; i < 300; ++i) {
      auto jpeg = testing::make_jpeg(16, 16, static_cast<uint32_t>(i));
      std::vector<uint8_t> label(8);
      std::vector<std::span<const uint8_t>> f{jpeg, label};
      w.add(f);
    }
    w.finish();
  }
  auto ds = Dataset::open(dir.str());
  ASSERT_EQ(ds->shard_count(), 1u);
  auto bytes = testing::read_file(ds->shard_path(0));
  bytes[40] ^= 0x01;
  testing::write_file(ds->shard_path(0), bytes);
  auto o = skip_options(dir.str());
  Loader l(o);
  EXPECT_EQ(l.num_batches(), 38u);
  ::testing::internal::CaptureStderr();
  try {
    while (l.next()) {
    }
    ::testing::internal::GetCapturedStderr();
    FAIL() << "an epoch of no samples went through under the default budget";
  } catch (const Error& e) {
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("101 samples skipped"), std::string::npos) << e.what();
    EXPECT_EQ(count_of(err, "stoker: warning: skipping"), 1u) << err;
  }
}

TEST(LoaderSkipBudget, ANegativeBudgetIsInvalid) {
  TempDir dir;
  std::string broken;
  make_with_broken_shard(dir.str(), &broken);
  auto o = skip_options(dir.str());
  o.max_skipped = -1;
  try {
    Loader l(o);
    FAIL() << "max_skipped -1 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_skipped"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker
