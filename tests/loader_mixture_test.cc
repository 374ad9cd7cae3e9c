// Loader over a weighted mixture (LoaderOptions::sources): every sample is its source's
// row or record with every output the sources share (text, bytes, ragged and __key__
// too, document outputs of token data), the proportions hold, the sequence is
// deterministic, the same for world sizes 1, 2 and 3, and resumes on another world size;
// sources that disagree on a field are named.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/pack.h"
#include "util/test_util.h"

using namespace stoker;
using stoker::testing::TempDir;
using stoker::testing::write_file;

namespace {

constexpr uint32_t N = 16;

// Source s's stream: token t is (s * 20000 + t * 7) % 65521, so a row names its source and place.
uint16_t tok(int s, uint64_t t) { return static_cast<uint16_t>((s * 20000 + t * 7) % 65521); }

std::string make_source(TempDir& dir, int s, uint64_t tokens) {
  std::vector<uint8_t> b(tokens * 2);
  for (uint64_t t = 0; t < tokens; ++t) {
    const uint16_t v = tok(s, t);
    std::memcpy(b.data() + 2 * t, &v, 2);
  }
  const std::string bin = dir.str("s" + std::to_string(s) + ".bin"), out = dir.str("ds" + std::to_string(s));
  write_file(bin, b);
  TokensPackOptions o;
  o.seq_len = N;
  o.rows_per_record = 5;
  o.zstd_level = 1;
  pack_tokens(bin, out, o);
  return out;
}

struct Mix {
  TempDir dir;
  std::vector<std::string> paths;
  Mix() {
    paths.push_back(make_source(dir, 0, 4001 * N + 1));  // 4001 rows
    paths.push_back(make_source(dir, 1, 700 * N + 1));   // 700 rows: runs out, sub-epochs
  }
  LoaderOptions options(uint64_t batch, int rank, int world) const {
    LoaderOptions o;
    o.sources = paths;
    o.weights = {1, 1};  // half each: source 1 repeats ~3.4 times an epoch
    o.batch_size = batch;
    o.rank = rank;
    o.world_size = world;
    o.threads = 1;
    o.order.seed = 17;
    return o;
  }
};

using Sample = std::pair<int64_t, int64_t>;  // (source, index)

// The batch's samples, each checked against its source's stream.
std::vector<Sample> samples_of(const Batch& b) {
  std::vector<Sample> out;
  const auto* src = static_cast<const int64_t*>(b["source"].data);
  const auto* idx = static_cast<const int64_t*>(b["index"].data);
  const auto* t = static_cast<const uint16_t*>(b["tokens"].data);
  EXPECT_EQ(b["source"].shape, (std::vector<int64_t>{static_cast<int64_t>(b.size())}));
  for (uint64_t j = 0; j < b.size(); ++j) {
    for (uint32_t i = 0; i < N; i += 5)
      EXPECT_EQ(t[j * N + i], tok(static_cast<int>(src[j]), static_cast<uint64_t>(idx[j]) * N + i))
          << "sample " << j << " token " << i;
    out.emplace_back(src[j], idx[j]);
  }
  return out;
}

std::vector<Sample> epoch_of(Loader& l) {
  std::vector<Sample> all;
  while (auto b = l.next()) {
    auto s = samples_of(*b);
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

}  // namespace

TEST(LoaderMixture, SamplesAreTheirSourcesRowsInProportion) {
  Mix m;
  Loader l(m.options(32, 0, 1));
  EXPECT_EQ(l.epoch_samples(), 4701u);
  const auto all = epoch_of(l);
  ASSERT_EQ(all.size(), 4701u);
  std::map<int64_t, uint64_t> count;
  std::map<int64_t, std::set<int64_t>> distinct;
  for (auto [s, i] : all) {
    count[s]++;
    distinct[s].insert(i);
  }
  EXPECT_NEAR(double(count[0]) / all.size(), 0.5, 0.02);
  EXPECT_NEAR(double(count[1]) / all.size(), 0.5, 0.02);
  EXPECT_EQ(distinct[1].size(), 700u);  // the small source ran through all its rows (several times)
  // Within a batch of 32 both sources appear (not runs of one).
  Loader again(m.options(32, 0, 1));
  auto b = again.next();
  std::set<int64_t> in_first;
  for (auto [s, i] : samples_of(*b)) in_first.insert(s);
  EXPECT_EQ(in_first.size(), 2u);
}

TEST(LoaderMixture, DeterministicPerSeedAndEpoch) {
  Mix m;
  Loader a(m.options(16, 0, 1)), b(m.options(16, 0, 1));
  const auto x = epoch_of(a), y = epoch_of(b);
  EXPECT_EQ(x, y);
  b.set_epoch(1);
  EXPECT_NE(epoch_of(b), x);
  a.set_epoch(0);
  EXPECT_EQ(epoch_of(a), x);  // again, from its start
}

TEST(LoaderMixture, WorldSizesCoverTheSameSamplesPerStepAndResumeOnAnother) {
  Mix m;
  const uint64_t B = 4;
  Loader one(m.options(B, 0, 1));
  const auto S = epoch_of(one);  // the epoch's sequence
  for (int W : {2, 3}) {
    std::vector<std::vector<std::vector<Sample>>> per_rank(W);
    for (int r = 0; r < W; ++r) {
      Loader l(m.options(B, r, W));
      while (auto b = l.next()) per_rank[r].push_back(samples_of(*b));
    }
    for (size_t k = 0; k < per_rank[0].size(); ++k) {
      std::multiset<Sample> got, want;
      for (int r = 0; r < W; ++r)
        if (k < per_rank[r].size()) got.insert(per_rank[r][k].begin(), per_rank[r][k].end());
      // The final step is padded with the epoch's first samples (RankSchedule, no drop_last).
      for (size_t p = k * W * B; p < k * W * B + got.size(); ++p) want.insert(S[p % S.size()]);
      ASSERT_EQ(got, want) << "world " << W << " step " << k;
    }
  }
  // Two ranks take 50 steps; three ranks resume from their state and finish the epoch.
  std::multiset<Sample> seen;
  OrderState st;
  for (int r = 0; r < 2; ++r) {
    Loader l(m.options(B, r, 2));
    for (int k = 0; k < 50; ++k) {
      auto b = l.next();
      ASSERT_TRUE(b);
      for (auto s : samples_of(*b)) seen.insert(s);
    }
    st = l.state();
  }
  EXPECT_EQ(st.consumed, 50 * 2 * B);
  for (int r = 0; r < 3; ++r) {
    Loader l(m.options(B, r, 3));
    l.load_state(st);
    for (auto s : epoch_of(l)) seen.insert(s);
  }
  std::multiset<Sample> want(S.begin(), S.end());
  ASSERT_GE(seen.size(), S.size());
  EXPECT_LT(seen.size() - S.size(), 3u);  // three ranks pad the final step
  want.insert(S.begin(), S.begin() + static_cast<long>(seen.size() - S.size()));
  EXPECT_EQ(seen, want);
}

TEST(LoaderMixture, BadMixturesAreNamed) {
  Mix m;
  auto o = m.options(8, 0, 1);
  o.weights = {1};
  EXPECT_THROW(Loader{o}, Error);
  o.weights = {1, -2};
  EXPECT_THROW(Loader{o}, Error);
  o = m.options(8, 0, 1);
  o.on_error = OnError::kSkip;
  EXPECT_THROW(Loader{o}, Error);
}

// Source s's record i of a dataset of typed fields: what a mixture's sample must hold.
struct Typed {
  std::string key;
  std::vector<uint8_t> jpg;
  int64_t cls;
  std::vector<float> boxes;  // [i % 4, 4]
  std::string txt;           // empty for every 5th
  std::vector<uint8_t> raw;
};

Typed typed(int s, int i) {
  Typed t;
  t.key = "s" + std::to_string(s) + "/ключ-" + std::to_string(i);
  t.jpg = stoker::testing::make_jpeg(20 + i % 5, 16, static_cast<uint32_t>(s * 1000 + i));
  t.cls = s * 1000 + i;
  for (int b = 0; b < i % 4; ++b)
    for (int k = 0; k < 4; ++k) t.boxes.push_back(static_cast<float>(s * 100 + i + b * 0.5 + k));
  t.txt = i % 5 == 0 ? "" : "caption " + std::to_string(s) + "/" + std::to_string(i);
  t.raw = stoker::testing::random_bytes(static_cast<size_t>(i % 7), static_cast<uint32_t>(s * 1000 + i));
  return t;
}

// n records of source s; `cls_type` the cls field's kind, `with_raw` whether it has "raw".
std::string write_typed(TempDir& dir, int s, int n, FieldKind cls_type = FieldKind::kInt64, bool with_raw = true) {
  Schema sc;
  sc.fields.push_back(Field{kKeyField, FieldKind::kText, DType::kNone, 0, {}});
  sc.fields.push_back(Field{"jpg", FieldKind::kImage, DType::kNone, 0, {}});
  sc.fields.push_back(Field{"cls", cls_type, DType::kNone, 0, {}});
  sc.fields.push_back(Field{"boxes", FieldKind::kVarArray, DType::kFloat32, 0, {4}});
  sc.fields.push_back(Field{"txt", FieldKind::kText, DType::kNone, 0, {}});
  if (with_raw) sc.fields.push_back(Field{"raw", FieldKind::kBytes, DType::kNone, 0, {}});
  const std::string out = dir.str("typed" + std::to_string(s) + (with_raw ? "" : "-noraw") +
                                  (cls_type == FieldKind::kInt64 ? "" : "-f"));
  DatasetWriterOptions o;
  o.shard_size = 8 << 10;  // several shards
  DatasetWriter w(out, sc, o);
  for (int i = 0; i < n; ++i) {
    const Typed t = typed(s, i);
    std::vector<uint8_t> cls(8);
    if (cls_type == FieldKind::kInt64) std::memcpy(cls.data(), &t.cls, 8);
    else cls.resize(4);  // float32 0
    std::vector<uint8_t> boxes(t.boxes.size() * 4);
    if (!boxes.empty()) std::memcpy(boxes.data(), t.boxes.data(), boxes.size());
    auto str = [](const std::string& x) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(x.data()), x.size()); };
    std::vector<std::span<const uint8_t>> f = {str(t.key), t.jpg, cls, boxes, str(t.txt)};
    if (with_raw) f.push_back(t.raw);
    w.add(f);
  }
  w.finish();
  return out;
}

template <typename T = uint8_t>
std::vector<T> item(const TensorView& v, uint64_t j, size_t row_elems = 1) {
  const auto* p = static_cast<const T*>(v.data);
  return std::vector<T>(p + v.offsets[j] * static_cast<int64_t>(row_elems), p + v.offsets[j + 1] * static_cast<int64_t>(row_elems));
}

LoaderOptions typed_mix(const std::vector<std::string>& paths) {
  LoaderOptions o;
  o.sources = paths;
  o.weights = {1, 2};
  o.batch_size = 7;
  o.rank = 0;
  o.world_size = 1;
  o.threads = 2;
  o.order.seed = 5;
  o.samples_per_epoch = 100;  // more than both hold: each starts epochs of its own
  o.fields["jpg"].kind = FieldTransform::Kind::kAsStored;
  return o;
}

// Text, bytes and variable-length fields mix too: `__key__`, the image as stored, a
// ragged array, text and bytes of each sample are its own record's.
TEST(LoaderMixture, EveryFieldTheSourcesShareIsCarriedKeysToo) {
  TempDir dir;
  const std::vector<std::string> paths = {write_typed(dir, 0, 23), write_typed(dir, 1, 31)};
  Loader l(typed_mix(paths));
  std::vector<int> count(2, 0);
  while (auto b = l.next()) {
    const uint64_t n = b->size();
    const auto& key = (*b)[kKeyField];
    EXPECT_EQ(key.kind, TensorKind::kText);
    EXPECT_EQ((*b)["jpg"].kind, TensorKind::kBytes);
    const auto& boxes = (*b)["boxes"];
    EXPECT_EQ(boxes.kind, TensorKind::kRagged);
    EXPECT_EQ(boxes.dtype, ElemType::kFloat32);
    EXPECT_EQ(boxes.shape, (std::vector<int64_t>{boxes.offsets[n], 4}));
    EXPECT_EQ(key.offsets[0], 0);
    for (uint64_t j = 0; j < n; ++j) {
      const int64_t s = static_cast<const int64_t*>((*b)["source"].data)[j];
      const int64_t i = static_cast<const int64_t*>((*b)["index"].data)[j];
      const Typed want = typed(static_cast<int>(s), static_cast<int>(i));
      const auto k = item<char>(key, j);
      EXPECT_EQ(std::string(k.begin(), k.end()), want.key) << "sample " << j;
      EXPECT_EQ(item((*b)["jpg"], j), want.jpg);
      EXPECT_EQ(static_cast<const int64_t*>((*b)["cls"].data)[j], want.cls);
      EXPECT_EQ(item<float>(boxes, j, 4), want.boxes);
      const auto txt = item<char>((*b)["txt"], j);
      EXPECT_EQ(std::string(txt.begin(), txt.end()), want.txt);
      EXPECT_EQ(item((*b)["raw"], j), want.raw);
      count[static_cast<size_t>(s)]++;
    }
  }
  EXPECT_EQ(count[0] + count[1], 100);
  EXPECT_NEAR(count[1], 67, 7);
}

TEST(LoaderMixture, SourcesThatDisagreeOnAFieldAreNamed) {
  TempDir dir;
  const std::vector<std::string> paths = {write_typed(dir, 0, 9), write_typed(dir, 1, 9, FieldKind::kFloat32)};
  try {
    Loader l(typed_mix(paths));
    FAIL() << "sources with 'cls' int64 and float32 mixed";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(m.find("'cls'"), std::string::npos) << m;
    EXPECT_NE(m.find(paths[0]), std::string::npos) << m;
    EXPECT_NE(m.find(paths[1]), std::string::npos) << m;
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
  }
  // A field a spec asks for that a source lacks: that source's error, naming it.
  auto o = typed_mix({paths[0], write_typed(dir, 1, 9, FieldKind::kInt64, false)});
  o.fields["raw"].kind = FieldTransform::Kind::kAsStored;
  try {
    Loader l(o);
    FAIL() << "fields['raw'] on a source without it";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mixture source 1"), std::string::npos) << m;
    EXPECT_NE(m.find("'raw'"), std::string::npos) << m;
  }
}

TEST(LoaderMixture, OutputsNotEverySourceHasAreLeftOutWithAWarning) {
  TempDir dir;
  const std::vector<std::string> paths = {write_typed(dir, 0, 9), write_typed(dir, 1, 9, FieldKind::kInt64, false)};
  auto o = typed_mix(paths);
  std::vector<std::string> warnings;
  o.warning_sink = [&](const std::string& w) { warnings.push_back(w); };
  Loader l(o);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("'raw'"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(paths[1]), std::string::npos) << warnings[0];
  auto b = l.next();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->find("raw"), nullptr);
  EXPECT_NE(b->find(kKeyField), nullptr);
  EXPECT_NE(b->find("boxes"), nullptr);
}

// Token sources packed with document boundaries mix with their document outputs: each
// sample's position_ids and loss_mask are its row's in its source alone, and cu_seqlens
// is summed again over the mixture's batch (a piece ends at each document start).
TEST(LoaderMixture, DocumentOutputsMixWithTheirRows) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int s = 0; s < 2; ++s) {
    std::vector<uint8_t> b;
    const uint64_t tokens = (300 + 200 * s) * N + 1;
    for (uint64_t t = 0; t < tokens; ++t) {
      const uint16_t v = (t * 2654435761u + s) % 23 == 0 ? 0 : static_cast<uint16_t>(1 + t % 999);  // 0: EOS
      b.push_back(static_cast<uint8_t>(v));
      b.push_back(static_cast<uint8_t>(v >> 8));
    }
    const std::string bin = dir.str("d" + std::to_string(s) + ".bin");
    write_file(bin, b);
    TokensPackOptions po;
    po.seq_len = N;
    po.rows_per_record = 7;
    po.eos = 0;
    pack_tokens(bin, dir.str("docs" + std::to_string(s)), po);
    paths.push_back(dir.str("docs" + std::to_string(s)));
  }
  auto opts = [&](const std::string& path) {
    LoaderOptions o;
    o.path = path;
    o.batch_size = 9;
    o.rank = 0;
    o.world_size = 1;
    o.threads = 2;
    o.position_ids = o.loss_mask = o.cu_seqlens = true;
    return o;
  };
  // Each source alone: index -> (position_ids, loss_mask) of its row.
  std::vector<std::map<int64_t, std::pair<std::vector<int32_t>, std::vector<uint8_t>>>> alone(2);
  for (int s = 0; s < 2; ++s) {
    Loader l(opts(paths[static_cast<size_t>(s)]));
    while (auto b = l.next())
      for (uint64_t j = 0; j < b->size(); ++j) {
        const auto* p = static_cast<const int32_t*>((*b)["position_ids"].data) + j * N;
        const auto* m = static_cast<const uint8_t*>((*b)["loss_mask"].data) + j * N;
        alone[static_cast<size_t>(s)][static_cast<const int64_t*>((*b)["index"].data)[j]] = {
            std::vector<int32_t>(p, p + N), std::vector<uint8_t>(m, m + N)};
      }
  }
  auto o = opts("");
  o.sources = paths;
  o.weights = {1, 1};
  Loader l(o);
  uint64_t samples = 0, pieces = 0;
  while (auto b = l.next()) {
    const uint64_t n = b->size();
    const auto* pos = static_cast<const int32_t*>((*b)["position_ids"].data);
    const auto* mask = static_cast<const uint8_t*>((*b)["loss_mask"].data);
    std::vector<int32_t> want_cu{0};
    for (uint64_t j = 0; j < n; ++j) {
      const int64_t s = static_cast<const int64_t*>((*b)["source"].data)[j];
      const int64_t i = static_cast<const int64_t*>((*b)["index"].data)[j];
      const auto& want = alone.at(static_cast<size_t>(s)).at(i);
      EXPECT_EQ(std::vector<int32_t>(pos + j * N, pos + j * N + N), want.first) << "source " << s << " row " << i;
      EXPECT_EQ(std::vector<uint8_t>(mask + j * N, mask + j * N + N), want.second) << "source " << s << " row " << i;
      for (uint32_t x = 1; x < N; ++x)
        if (want.first[x] == 0) want_cu.push_back(static_cast<int32_t>(j * N + x));
      want_cu.push_back(static_cast<int32_t>((j + 1) * N));
    }
    const auto& cu = (*b)["cu_seqlens"];
    EXPECT_EQ(cu.kind, TensorKind::kRagged);
    ASSERT_EQ(cu.shape, (std::vector<int64_t>{static_cast<int64_t>(want_cu.size())}));
    const auto* c = static_cast<const int32_t*>(cu.data);
    EXPECT_EQ(std::vector<int32_t>(c, c + want_cu.size()), want_cu);
    EXPECT_EQ(cu.offsets[n], static_cast<int64_t>(want_cu.size()));
    for (uint64_t j = 0; j < n; ++j) EXPECT_EQ(c[cu.offsets[j + 1] - 1], static_cast<int32_t>((j + 1) * N));
    samples += n;
    pieces += want_cu.size() - 1 - n;
  }
  EXPECT_EQ(samples, 800u);
  EXPECT_GT(pieces, 100u);  // the rows hold document starts
}

// Image datasets mix the same way: each sample is what its own dataset's loader gives
// for that record (eval transform: no random draw), with its label.
TEST(LoaderMixture, ImageDatasetsMixToo) {
  TempDir dir;
  std::vector<std::string> paths;
  for (int s = 0; s < 2; ++s) {
    SampleImageFolderOptions so;
    so.images = 24 + 12 * s;
    so.classes = 3;
    so.seed = 40 + s;
    so.threads = 2;
    make_sample_imagefolder(dir.str("src" + std::to_string(s)), so);
    pack_imagefolder(dir.str("src" + std::to_string(s)), dir.str("img" + std::to_string(s)));
    paths.push_back(dir.str("img" + std::to_string(s)));
  }
  auto base = [](const std::string& path) {
    LoaderOptions o;
    o.path = path;
    o.batch_size = 5;
    o.rank = 0;
    o.world_size = 1;
    o.threads = 2;
    o.transform.kind = ImageTransform::Kind::kEval;
    o.transform.size = 32;
    o.order.kind = OrderKind::kSequential;
    return o;
  };
  // Each dataset alone: index -> (image bytes, label).
  std::vector<std::map<int64_t, std::pair<std::vector<uint8_t>, int64_t>>> alone(2);
  std::vector<std::map<int64_t, std::vector<char>>> keys(2);  // and its __key__
  for (int s = 0; s < 2; ++s) {
    Loader l(base(paths[s]));
    while (auto b = l.next()) {
      const auto& im = (*b)["image"];
      const size_t per = im.bytes() / b->size();
      for (uint64_t j = 0; j < b->size(); ++j) {
        keys[s][static_cast<const int64_t*>((*b)["index"].data)[j]] = item<char>((*b)[kKeyField], j);
        const auto* p = static_cast<const uint8_t*>(im.data) + j * per;
        alone[s][static_cast<const int64_t*>((*b)["index"].data)[j]] = {
            std::vector<uint8_t>(p, p + per), static_cast<const int64_t*>((*b)["label"].data)[j]};
      }
    }
  }
  auto o = base("");
  o.sources = paths;
  o.weights = {2, 1};
  o.order.kind = OrderKind::kShuffled;
  o.samples_per_epoch = 90;  // more than both hold: each starts epochs of its own
  Loader l(o);
  std::vector<int> count(2, 0);
  while (auto b = l.next()) {
    const auto& im = (*b)["image"];
    ASSERT_EQ(im.shape, (std::vector<int64_t>{static_cast<int64_t>(b->size()), 32, 32, 3}));
    const size_t per = im.bytes() / b->size();
    for (uint64_t j = 0; j < b->size(); ++j) {
      const int64_t s = static_cast<const int64_t*>((*b)["source"].data)[j];
      const int64_t i = static_cast<const int64_t*>((*b)["index"].data)[j];
      const auto& want = alone.at(static_cast<size_t>(s)).at(i);
      const auto* p = static_cast<const uint8_t*>(im.data) + j * per;
      EXPECT_EQ(std::vector<uint8_t>(p, p + per), want.first) << "source " << s << " index " << i;
      EXPECT_EQ(static_cast<const int64_t*>((*b)["label"].data)[j], want.second);
      EXPECT_EQ(item<char>((*b)[kKeyField], j), keys.at(static_cast<size_t>(s)).at(i));
      EXPECT_FALSE(keys.at(static_cast<size_t>(s)).at(i).empty());
      count[static_cast<size_t>(s)]++;
    }
  }
  EXPECT_EQ(count[0] + count[1], 90);
  EXPECT_NEAR(count[0], 60, 6);
}
