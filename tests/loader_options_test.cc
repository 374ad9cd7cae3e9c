// Options the Loader once accepted silently: std of 0 (a division by zero per pixel),
// mean/std given on the pixel scale (0..255) although pixels are normalised as
// x / 255, next-token targets asked of a dataset of records, a rank outside the world.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

// Four 20x20 images, label 0.
void make_images(const std::string& dir) {
  testing::write_image_dataset(dir, {.count = 4,
                                     .classes = 1,
                                     .class_names = false,
                                     .size = [](int) { return std::pair<int, int>{20, 20}; }});
}

// The message of the kInvalidArgument that constructing a Loader with `o` throws.
std::string refusal(const LoaderOptions& o) {
  try {
    Loader l(o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(LoaderOptions, NormalisationOutsideTheZeroToOneScaleIsRefusedNamingTheOption) {
  TempDir dir;
  make_images(dir.str());
  auto o = testing::image_options(dir.str());
  o.pixel_format = PixelFormat::kF32CHW;
  o.std[1] = 0;
  EXPECT_NE(refusal(o).find("std[1]"), std::string::npos);
  o.std[1] = 58.4f;  // pixel scale
  EXPECT_NE(refusal(o).find("0..1 scale"), std::string::npos);
  o.std[1] = 0.224f;
  o.mean[0] = 123.7f;
  EXPECT_NE(refusal(o).find("mean[0]"), std::string::npos);
  o.mean[0] = 0.485f;
  Loader ok(o);  // the defaults' scale is fine
  EXPECT_TRUE(ok.next().has_value());
}

TEST(LoaderOptions, TargetsOnRecordsAndABadRankAreRefused) {
  TempDir dir;
  make_images(dir.str());
  auto o = testing::image_options(dir.str());
  o.targets = true;
  const std::string t = refusal(o);
  EXPECT_NE(t.find("targets"), std::string::npos) << t;
  EXPECT_NE(t.find("jpeg:"), std::string::npos) << t;  // says what the dataset holds
  o.targets = false;
  o.rank = 3;
  o.world_size = 2;
  const std::string r = refusal(o);
  EXPECT_NE(r.find("0 <= rank < world_size"), std::string::npos) << r;
}

}  // namespace
}  // namespace stoker
