// The Loader on datasets of typed fields: every field kind round-trips through a batch,
// per-field transforms (RandomResizedCrop, CenterCrop, Follow) and their errors, and the
// version-1 names that stay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/loader.h"
#include "benchlib/image_encode.h"
#include "util/loader_util.h"
#include "util/test_util.h"

namespace stoker {
namespace {

using testing::TempDir;

std::span<const uint8_t> as_span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// What record i of the every-kind dataset holds.
struct Sample {
  std::string key;
  std::vector<uint8_t> jpg;
  int64_t cls = 0;
  float score = 0;
  double weight = 0;
  std::vector<float> emb;    // [3, 2]
  std::vector<float> boxes;  // [n, 4], n = i % 4 (0 included)
  std::string txt;           // unicode, empty for every 5th
  std::vector<uint8_t> raw;  // empty for every 3rd
};

Sample make_sample(int i) {
  Sample s;
  s.key = "dir/ключ-" + std::to_string(i);
  s.jpg = testing::make_jpeg(40 + i % 7, 30 + i % 5, static_cast<uint32_t>(i));
  s.cls = i * 7 - 20;
  s.score = 0.25f * static_cast<float>(i);
  s.weight = -1.5 * i;
  for (int k = 0; k < 6; ++k) s.emb.push_back(static_cast<float>(i * 10 + k));
  for (int b = 0; b < i % 4; ++b)
    for (int k = 0; k < 4; ++k) s.boxes.push_back(static_cast<float>(i + b * 0.5 + k));
  s.txt = i % 5 == 0 ? "" : "caption " + std::to_string(i) + " — 画像 ✓";
  s.raw = i % 3 == 0 ? std::vector<uint8_t>{} : testing::random_bytes(static_cast<size_t>(i * 3), static_cast<uint32_t>(i));
  return s;
}

Schema every_kind_schema() {
  Schema s;
  s.fields.push_back(Field{kKeyField, FieldKind::kText, DType::kNone, 0, {}});
  s.fields.push_back(Field{"jpg", FieldKind::kImage, DType::kNone, 0, {}});
  s.fields.push_back(Field{"cls", FieldKind::kInt64, DType::kNone, 0, {}});
  s.fields.push_back(Field{"score", FieldKind::kFloat32, DType::kNone, 0, {}});
  s.fields.push_back(Field{"weight", FieldKind::kFloat64, DType::kNone, 0, {}});
  s.fields.push_back(Field{"emb", FieldKind::kNdarray, DType::kFloat32, 0, {3, 2}});
  s.fields.push_back(Field{"boxes", FieldKind::kVarArray, DType::kFloat32, 0, {4}});
  s.fields.push_back(Field{"txt", FieldKind::kText, DType::kNone, 0, {}});
  s.fields.push_back(Field{"raw", FieldKind::kBytes, DType::kNone, 0, {}});
  return s;
}

void write_every_kind(const std::string& dir, int n, bool zstd) {
  DatasetWriterOptions o;
  o.shard_size = 20 << 10;  // several shards
  if (zstd) o.shard.compression = Compression::kZstd;
  DatasetWriter w(dir, every_kind_schema(), o);
  for (int i = 0; i < n; ++i) {
    const Sample s = make_sample(i);
    const auto cls = bytes_of(std::vector<int64_t>{s.cls});
    const auto score = bytes_of(std::vector<float>{s.score});
    const auto weight = bytes_of(std::vector<double>{s.weight});
    const auto emb = bytes_of(s.emb), boxes = bytes_of(s.boxes);
    std::vector<std::span<const uint8_t>> f = {as_span(s.key), s.jpg, cls, score, weight, emb, boxes, as_span(s.txt), s.raw};
    w.add(f);
  }
  w.finish();
}

std::string ragged_item(const TensorView& v, uint64_t i) {
  const auto* p = static_cast<const char*>(v.data);
  return std::string(p + v.offsets[i], p + v.offsets[i + 1]);
}

class LoaderFields : public ::testing::TestWithParam<bool> {};

TEST_P(LoaderFields, EveryFieldKindRoundTripsAsStored) {
  TempDir dir;
  const int n = 37;
  write_every_kind(dir.str("ds"), n, GetParam());
  LoaderOptions o = testing::default_options(dir.str("ds"), 8);
  o.order.kind = OrderKind::kShuffled;
  o.threads = 2;
  o.fields["jpg"].kind = FieldTransform::Kind::kAsStored;
  Loader loader(o);
  std::set<int64_t> seen;
  while (auto b = loader.next()) {
    const TensorView& index = (*b)["index"];
    ASSERT_EQ(index.shape, std::vector<int64_t>{static_cast<int64_t>(b->size())});
    EXPECT_EQ((*b)["cls"].dtype, ElemType::kInt64);
    EXPECT_EQ((*b)["score"].dtype, ElemType::kFloat32);
    EXPECT_EQ((*b)["weight"].dtype, ElemType::kFloat64);
    EXPECT_EQ((*b)["emb"].shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), 3, 2}));
    EXPECT_EQ((*b)["boxes"].kind, TensorKind::kRagged);
    EXPECT_EQ((*b)["txt"].kind, TensorKind::kText);
    EXPECT_EQ((*b)[kKeyField].kind, TensorKind::kText);
    EXPECT_EQ((*b)["raw"].kind, TensorKind::kBytes);
    EXPECT_EQ((*b)["jpg"].kind, TensorKind::kBytes);
    const auto* boxes = static_cast<const float*>((*b)["boxes"].data);
    for (uint64_t j = 0; j < b->size(); ++j) {
      const int64_t i = static_cast<const int64_t*>(index.data)[j];
      seen.insert(i);
      const Sample s = make_sample(static_cast<int>(i));
      EXPECT_EQ(static_cast<const int64_t*>((*b)["cls"].data)[j], s.cls);
      EXPECT_EQ(static_cast<const float*>((*b)["score"].data)[j], s.score);
      EXPECT_EQ(static_cast<const double*>((*b)["weight"].data)[j], s.weight);
      EXPECT_EQ(std::vector<float>(static_cast<const float*>((*b)["emb"].data) + 6 * j,
                                   static_cast<const float*>((*b)["emb"].data) + 6 * j + 6),
                s.emb);
      const int64_t* bo = (*b)["boxes"].offsets;
      EXPECT_EQ(std::vector<float>(boxes + 4 * bo[j], boxes + 4 * bo[j + 1]), s.boxes) << "sample " << i;
      EXPECT_EQ(ragged_item((*b)["txt"], j), s.txt);
      EXPECT_EQ(ragged_item((*b)[kKeyField], j), s.key);
      const std::string raw = ragged_item((*b)["raw"], j), jpg = ragged_item((*b)["jpg"], j);
      EXPECT_EQ(std::vector<uint8_t>(raw.begin(), raw.end()), s.raw);
      EXPECT_EQ(std::vector<uint8_t>(jpg.begin(), jpg.end()), s.jpg);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
}

INSTANTIATE_TEST_SUITE_P(RawAndZstd, LoaderFields, ::testing::Bool());

TEST(LoaderFieldsSpec, TheFirstImageFieldIsDecodedByDefaultUnderItsOwnName) {
  TempDir dir;
  write_every_kind(dir.str("ds"), 10, false);
  LoaderOptions o = testing::default_options(dir.str("ds"), 4);
  o.transform.size = 32;
  Loader loader(o);
  auto b = loader.next();
  ASSERT_TRUE(b);
  EXPECT_EQ((*b)["jpg"].shape, (std::vector<int64_t>{4, 32, 32, 3}));
  EXPECT_EQ((*b)["jpg"].kind, TensorKind::kDense);
  EXPECT_EQ(b->find("image"), nullptr);  // version-2 data keeps its field names
}

TEST(LoaderFieldsSpec, CenterCropMatchesTheEvalDecodeOfTheSameBytes) {
  TempDir dir;
  write_every_kind(dir.str("ds"), 9, false);
  LoaderOptions o = testing::default_options(dir.str("ds"), 9);
  o.order.kind = OrderKind::kSequential;
  FieldTransform& f = o.fields["jpg"];
  f.kind = FieldTransform::Kind::kCenterCrop;
  f.size = 24;
  f.resize = 28;
  Loader loader(o);
  auto b = loader.next();
  ASSERT_TRUE(b);
  ImageDecoder dec;
  ImageTransform t;
  t.kind = ImageTransform::Kind::kEval;
  t.size = 24;
  t.eval_crop_fraction = 24.f / 28.f;
  std::vector<uint8_t> want(24 * 24 * 3);
  for (int i = 0; i < 9; ++i) {
    dec.decode(make_sample(i).jpg, t, 0, want.data(), want.size());
    EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>((*b)["jpg"].data) + i * want.size(), want.data(), want.size()), 0)
        << "sample " << i;
  }
}

// A blocky image and its mask: each 8x8 block has one of four colours, and the mask
// stores the block's class (0..3) as a palette index.
const uint8_t kColors[4][3] = {{230, 20, 20}, {20, 230, 20}, {20, 20, 230}, {230, 230, 20}};

struct Pair {
  std::vector<uint8_t> png_image, png_mask;
};

Pair make_pair_images(int w, int h, uint32_t seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3), idx(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint32_t c = ((x / 8) * 7 + (y / 8) * 13 + seed) % 4;
      idx[static_cast<size_t>(y) * w + x] = static_cast<uint8_t>(c);
      std::memcpy(&rgb[(static_cast<size_t>(y) * w + x) * 3], kColors[c], 3);
    }
  std::vector<uint8_t> palette;
  for (const auto& c : kColors) palette.insert(palette.end(), c, c + 3);
  return {testing::encode_png(rgb, w, h, testing::PngColor::kRgb, 8),
          testing::encode_png(idx, w, h, testing::PngColor::kPalette, 8, palette)};
}

int nearest_class(const uint8_t* rgb, int* dist) {
  int best = -1, best_d = 1 << 30;
  for (int c = 0; c < 4; ++c) {
    int d = 0;
    for (int k = 0; k < 3; ++k) d += std::abs(rgb[k] - kColors[c][k]);
    if (d < best_d) best_d = d, best = c;
  }
  *dist = best_d;
  return best;
}

// The share of output pixels whose decoded colour names a class other than the mask's,
// among pixels whose colour is clearly one class (block edges blend under the resize).
// `mask_channels` 1: the mask holds class ids; 3: the palette's colours.
double mask_mismatch(const uint8_t* img, const uint8_t* mask, int S, int mask_channels) {
  int checked = 0, wrong = 0;
  for (int p = 0; p < S * S; ++p) {
    int d = 0;
    const int want = nearest_class(img + 3 * p, &d);
    if (d > 30) continue;  // an edge pixel: a blend of two colours
    int got = mask[p];
    if (mask_channels == 3) {
      got = nearest_class(mask + 3 * p, &d);
      if (d > 30) continue;
    }
    ++checked;
    wrong += got != want;
  }
  return checked ? static_cast<double>(wrong) / checked : 1.0;
}

void write_pairs(const std::string& dir, int n) {
  Schema s;
  s.fields.push_back(Field{kKeyField, FieldKind::kText, DType::kNone, 0, {}});
  s.fields.push_back(Field{"img.png", FieldKind::kImage, DType::kNone, 0, {}});
  s.fields.push_back(Field{"seg.png", FieldKind::kImage, DType::kNone, 0, {}});
  DatasetWriter w(dir, s);
  for (int i = 0; i < n; ++i) {
    const Pair p = make_pair_images(64 + 8 * (i % 5), 48 + 8 * (i % 3), static_cast<uint32_t>(i));
    const std::string key = "pair" + std::to_string(i);
    std::vector<std::span<const uint8_t>> f = {as_span(key), p.png_image, p.png_mask};
    w.add(f);
  }
  w.finish();
}

// The worst mismatch over three epochs of random crops and flips.
double worst_mismatch(const std::string& dir, const FieldTransform& mask_spec, uint64_t seed) {
  LoaderOptions o = testing::default_options(dir, 6);
  o.order.seed = seed;
  o.threads = 2;
  FieldTransform& img = o.fields["img.png"];
  img.kind = FieldTransform::Kind::kRandomResizedCrop;
  img.size = 40;
  img.scale_min = 0.1f;
  o.fields["seg.png"] = mask_spec;
  const int C = mask_spec.kind == FieldTransform::Kind::kFollow ? mask_spec.channels : 3;
  Loader loader(o);
  double worst = 0;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    loader.set_epoch(epoch);
    while (auto b = loader.next()) {
      EXPECT_EQ((*b)["seg.png"].shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), 40, 40, C}));
      for (uint64_t j = 0; j < b->size(); ++j)
        worst = std::max(worst, mask_mismatch(static_cast<const uint8_t*>((*b)["img.png"].data) + j * 40 * 40 * 3,
                                              static_cast<const uint8_t*>((*b)["seg.png"].data) + j * 40 * 40 * C, 40, C));
    }
  }
  return worst;
}

TEST(LoaderFieldsFollow, AMaskFollowingItsImageStaysAlignedUnderRandomCropsAndFlips) {
  TempDir dir;
  write_pairs(dir.str("ds"), 24);
  FieldTransform follow;
  follow.kind = FieldTransform::Kind::kFollow;
  follow.follow = "img.png";
  EXPECT_EQ(worst_mismatch(dir.str("ds"), follow, 5), 0.0);
  follow.channels = 3;  // the palette's colours: the same geometry
  EXPECT_EQ(worst_mismatch(dir.str("ds"), follow, 6), 0.0);
  // The same check catches a mask that draws its own crop and flip: it is not vacuous.
  FieldTransform own;
  own.kind = FieldTransform::Kind::kRandomResizedCrop;
  own.size = 40;
  own.scale_min = 0.1f;
  EXPECT_GT(worst_mismatch(dir.str("ds"), own, 5), 0.2);
}

TEST(LoaderFieldsSpec, BadSpecsAreNamedWithTheirParameter) {
  TempDir dir;
  write_pairs(dir.str("ds"), 4);
  auto error_of = [&](const std::map<std::string, FieldTransform>& fields) -> std::string {
    LoaderOptions o = testing::default_options(dir.str("ds"), 2);
    o.fields = fields;
    try {
      Loader loader(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      return e.what();
    }
    return "no error";
  };
  FieldTransform rrc;
  rrc.kind = FieldTransform::Kind::kRandomResizedCrop;
  FieldTransform t = rrc;
  t.size = 0;
  EXPECT_NE(error_of({{"img.png", t}}).find("size"), std::string::npos);
  t = rrc;
  t.scale_min = 0;
  EXPECT_NE(error_of({{"img.png", t}}).find("scale"), std::string::npos);
  t = rrc;
  t.scale_max = 1.5f;
  EXPECT_NE(error_of({{"img.png", t}}).find("scale"), std::string::npos);
  const std::string unknown = error_of({{"caption", rrc}});
  EXPECT_NE(unknown.find("'caption'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("seg.png"), std::string::npos) << unknown;  // lists what there is
  FieldTransform follow;
  follow.kind = FieldTransform::Kind::kFollow;
  follow.follow = kKeyField;  // not an image
  EXPECT_NE(error_of({{"img.png", rrc}, {"seg.png", follow}}).find("Follow"), std::string::npos);
  follow.follow = "img.png";  // an image, but not transformed: nothing to follow
  FieldTransform stored;
  EXPECT_NE(error_of({{"img.png", stored}, {"seg.png", follow}}).find("Follow"), std::string::npos);
  EXPECT_NE(error_of({{kKeyField, rrc}}).find("image"), std::string::npos);  // a transform on text
}

TEST(LoaderFieldsErrors, ABadImageNamesItsSourceKey) {
  TempDir dir;
  Schema s;
  s.fields.push_back(Field{kKeyField, FieldKind::kText, DType::kNone, 0, {}});
  s.fields.push_back(Field{"jpg", FieldKind::kImage, DType::kNone, 0, {}});
  {
    DatasetWriter w(dir.str("ds"), s);
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> img = testing::make_jpeg(32, 32, static_cast<uint32_t>(i));
      if (i == 2) img.resize(img.size() / 3);  // truncated
      const std::string key = "class_a/photo_" + std::to_string(i) + ".jpg";
      std::vector<std::span<const uint8_t>> f = {as_span(key), img};
      w.add(f);
    }
    w.finish();
  }
  LoaderOptions o = testing::default_options(dir.str("ds"), 4);
  o.transform.kind = ImageTransform::Kind::kEval;
  o.transform.size = 16;
  o.order.kind = OrderKind::kSequential;
  o.transform.allow_dct_scaling = false;
  Loader loader(o);
  try {
    while (loader.next()) {
    }
    FAIL() << "the truncated image was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("class_a/photo_2.jpg"), std::string::npos) << e.what();
  }
}


// Records of very different sizes, read in one batch, share IO buffers (one per run of
// reads up to 1 MiB; a longer read has its own): each arrives byte for byte, on every
// engine, with O_DIRECT and buffered (the reads then start on 64-byte boundaries).
TEST(LoaderFieldsReads, RecordsOfMixedSizesArriveByteExactFromSharedReadBuffers) {
  TempDir dir;
  const size_t sizes[] = {1, 100, 5000, (13u << 20) / 10, 3000, 700u << 10, 64, 4096, 4095};
  auto content = [](uint64_t i, size_t k) { return static_cast<uint8_t>((i * 131 + k * 7 + (k >> 9)) & 0xFF); };
  const uint64_t n = 45;
  {
    Schema s;
    s.fields = {Field{"__key__", FieldKind::kText}, Field{"raw", FieldKind::kBytes}};
    DatasetWriterOptions wo;
    wo.shard_size = 4 << 20;  // several shards
    DatasetWriter w(dir.str("ds"), s, wo);
    for (uint64_t i = 0; i < n; ++i) {
      const std::string key = "r/" + std::to_string(i);
      std::vector<uint8_t> raw(sizes[i % std::size(sizes)]);
      for (size_t k = 0; k < raw.size(); ++k) raw[k] = content(i, k);
      const std::vector<std::span<const uint8_t>> f = {as_span(key), raw};
      w.add(f);
    }
    w.finish();
  }
  for (IoEngineKind engine : {IoEngineKind::kAuto, IoEngineKind::kPread}) {
    for (bool direct : {true, false}) {
      SCOPED_TRACE(std::string(io_engine_kind_name(engine)) + (direct ? " O_DIRECT" : " buffered"));
      LoaderOptions o = testing::default_options(dir.str("ds"), 8);
      o.threads = 2;
      o.io.engine = engine;
      o.io.direct = direct;
      Loader l(o);
      std::vector<int> seen(n, 0);
      while (auto b = l.next()) {
        for (uint64_t j = 0; j < b->size(); ++j) {
          const uint64_t i = static_cast<uint64_t>(static_cast<const int64_t*>((*b)["index"].data)[j]);
          ASSERT_LT(i, n);
          seen[i]++;
          const std::string raw = ragged_item((*b)["raw"], j);
          ASSERT_EQ(raw.size(), sizes[i % std::size(sizes)]) << "record " << i;
          for (size_t k = 0; k < raw.size(); ++k)
            ASSERT_EQ(static_cast<uint8_t>(raw[k]), content(i, k)) << "record " << i << " byte " << k;
        }
      }
      for (uint64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "record " << i;
    }
  }
}

}  // namespace
}  // namespace stoker
