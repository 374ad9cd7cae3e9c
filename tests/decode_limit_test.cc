// The in-memory decode limit (benchlib/decode_limit.h) does the whole record as the
// loader does: every field the loader decodes is decoded here too (a bad mask fails it,
// named like the loader names it, only when the mask is asked to Follow its image), the
// same spec errors, and token datasets still unpack.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "benchlib/decode_limit.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/order.h"
#include "util/datasets.h"
#include "benchlib/image_encode.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

constexpr int kRecords = 12;
constexpr int kBadMask = 5;  // its PNG keeps the signature, loses its body

// __key__, jpg (JPEG), png (gray mask of the same size), cls.
void write_image_mask_dataset(const std::string& dir) {
  Schema s;
  s.fields.push_back(Field{kKeyField, FieldKind::kText, DType::kNone, 0, {}});
  s.fields.push_back(Field{"jpg", FieldKind::kImage, DType::kNone, 0, {}});
  s.fields.push_back(Field{"png", FieldKind::kImage, DType::kNone, 0, {}});
  s.fields.push_back(Field{"cls", FieldKind::kInt64, DType::kNone, 0, {}});
  DatasetWriter w(dir, s);
  for (int i = 0; i < kRecords; ++i) {
    const int width = 48 + i, height = 40 + i % 3;
    const std::string key = "sample-" + std::to_string(i);
    const std::vector<uint8_t> jpg = testing::make_jpeg(width, height, static_cast<uint32_t>(i));
    std::vector<uint8_t> mask(static_cast<size_t>(width) * height);
    for (size_t p = 0; p < mask.size(); ++p) mask[p] = static_cast<uint8_t>(p % static_cast<size_t>(width) < static_cast<size_t>(width / 2) ? 1 : 2);
    std::vector<uint8_t> png = testing::encode_png(mask, width, height, testing::PngColor::kGray, 8);
    if (i == kBadMask) png.resize(24);
    const int64_t cls = i % 3;
    uint8_t c[8];
    std::memcpy(c, &cls, 8);
    std::vector<std::span<const uint8_t>> f = {
        {reinterpret_cast<const uint8_t*>(key.data()), key.size()}, jpg, png, {c, 8}};
    w.add(f);
  }
  w.finish();
}

LoaderOptions options_for(const std::string& path) {
  LoaderOptions o;
  o.path = path;
  o.transform.kind = ImageTransform::Kind::kTrain;
  o.transform.size = 32;
  return o;
}

TEST(DecodeLimit, TheFirstImageAloneLeavesTheMaskAsStored) {
  TempDir d;
  write_image_mask_dataset(d.str("ds"));
  // The loader's default: jpg decoded, png delivered as its bytes (not decoded).
  const auto l = internal::measure_decode_limit(options_for(d.str("ds")), 2, 0.01, 1000);
  EXPECT_EQ(l.records_in_memory, static_cast<uint64_t>(kRecords));
  EXPECT_GE(l.samples, static_cast<uint64_t>(kRecords));  // at least one pass
  EXPECT_GT(l.samples_per_s, 0);
}

TEST(DecodeLimit, AFollowingMaskIsDecodedAndABadOneIsNamed) {
  TempDir d;
  write_image_mask_dataset(d.str("ds"));
  LoaderOptions o = options_for(d.str("ds"));
  o.fields["jpg"].kind = FieldTransform::Kind::kRandomResizedCrop;
  o.fields["jpg"].size = 32;
  o.fields["png"].kind = FieldTransform::Kind::kFollow;
  o.fields["png"].follow = "jpg";
  try {
    internal::measure_decode_limit(o, 2, 0.01, 1000);
    FAIL() << "the truncated mask of record " << kBadMask << " was not decoded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("record " + std::to_string(kBadMask)), std::string::npos) << m;
    EXPECT_NE(m.find("(source 'sample-" + std::to_string(kBadMask) + "')"), std::string::npos) << m;
  }
  // 5 records evenly spread over 12 are 0, 2, 4, 7 and 9: without the bad one, Follow
  // runs through.
  const auto l = internal::measure_decode_limit(o, 2, 0.01, 5);
  EXPECT_EQ(l.records_in_memory, 5u);
  EXPECT_GE(l.samples, 5u);
}

TEST(DecodeLimit, SpecErrorsAreTheLoadersOwn) {
  TempDir d;
  write_image_mask_dataset(d.str("ds"));
  LoaderOptions o = options_for(d.str("ds"));
  o.fields["nope"].kind = FieldTransform::Kind::kRandomResizedCrop;
  try {
    internal::measure_decode_limit(o, 1, 0.01, 1000);
    FAIL() << "a spec naming a field the dataset lacks was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("fields['nope']: the dataset has no field 'nope'"), std::string::npos)
        << e.what();
  }
}

TEST(DecodeLimit, SlicesAddUpAndACompletingRunDoesWhatIsLeftOfAPass) {
  TempDir d;
  write_image_mask_dataset(d.str("ds"));
  internal::DecodeLimitMeter m(options_for(d.str("ds")), 1000);
  EXPECT_EQ(m.result().records_in_memory, static_cast<uint64_t>(kRecords));
  EXPECT_EQ(m.result().samples, 0u);
  m.run(2, 0, false);  // a slice of no time does nothing
  EXPECT_EQ(m.result().samples, 0u);
  m.run(2, 0, true);  // exactly one pass: every record once
  EXPECT_EQ(m.result().samples, static_cast<uint64_t>(kRecords));
  m.run(2, 0, true);  // the pass is done: nothing left to complete
  EXPECT_EQ(m.result().samples, static_cast<uint64_t>(kRecords));
  m.run(1, 0.05, false);  // timed slices add on
  EXPECT_GE(m.result().samples, static_cast<uint64_t>(kRecords));
  EXPECT_GT(m.result().seconds, 0);
  EXPECT_NEAR(m.result().samples_per_s, m.result().samples / m.result().seconds, 1e-6 * m.result().samples_per_s);
}

TEST(DecodeLimit, TokenDatasetsUnpackEveryRecord) {
  TempDir d;
  testing::write_token_dataset(d.str("tok"), 5000, 64, 4, /*zstd=*/true);
  LoaderOptions o;
  o.path = d.str("tok");
  const auto l = internal::measure_decode_limit(o, 1, 0.01, 1000);
  EXPECT_GE(l.samples, l.records_in_memory);
  EXPECT_GT(l.raw_bytes, 0u);
}

TEST(DecodeLimit, HoldsEveryRecordWhileTheyFitItsBytesAndAtLeastItsFloor) {
  TempDir d;
  testing::write_sample_dataset(d.str("ds"), std::vector<uint32_t>(3000, 20), false);  // ~100 bytes a record
  auto ds = Dataset::open(d.str("ds"));
  const uint64_t mean = ds->manifest().total_bytes() / ds->record_count();
  EXPECT_EQ(internal::decode_limit_default_records(*ds), 3000u) << "small records: all of them";
  EXPECT_EQ(internal::decode_limit_default_records(*ds, 2500 * mean, 100), 2500u) << "as many as the bytes hold";
  EXPECT_EQ(internal::decode_limit_default_records(*ds, 10 * mean, 100), 100u) << "large records: the floor";
  EXPECT_EQ(internal::decode_limit_default_records(*ds, 10 * mean, 5000), 3000u) << "never more than there are";
}

TEST(DecodeLimit, AShuffledLoadersLimitVisitsItsRecordsShuffledAndTheOthersInIndexOrder) {
  // A tokenizer is faster on documents in index order (neighbours share words,
  // its tables stay cached) than in the shuffled order the loader meets them in.
  OrderOptions order;
  order.seed = 7;
  const std::vector<uint64_t> picked = internal::decode_limit_records(100000, 2000);
  const std::vector<uint64_t> visits = internal::decode_limit_visits(100000, 2000, order);
  ASSERT_EQ(visits.size(), picked.size());
  EXPECT_TRUE(std::is_permutation(visits.begin(), visits.end(), picked.begin())) << "the same records";
  size_t ascending = 0;
  for (size_t i = 1; i < visits.size(); ++i) ascending += visits[i] > visits[i - 1];
  EXPECT_GT(ascending, visits.size() / 4);
  EXPECT_LT(ascending, visits.size() * 3 / 4) << "not in index order";
  EXPECT_EQ(internal::decode_limit_visits(100000, 2000, order), visits) << "the same order for the same seed";
  order.seed = 8;
  EXPECT_NE(internal::decode_limit_visits(100000, 2000, order), visits);
  for (OrderKind kind : {OrderKind::kSequential, OrderKind::kChunkLocal}) {
    order.kind = kind;
    EXPECT_EQ(internal::decode_limit_visits(100000, 2000, order), picked) << order_kind_name(kind);
  }
}

}  // namespace
}  // namespace stoker
