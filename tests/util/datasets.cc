#include "util/datasets.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "stoker/dataset.h"
#include "util/bytes.h"
#include "util/test_util.h"

namespace stoker::testing {

void write_image_dataset(const std::string& dir, const ImageDatasetSpec& spec) {
  DatasetWriterOptions o;
  o.shard_size = spec.shard_size;
  Schema schema{{Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}}};
  if (spec.keys) schema.fields.push_back(Field{kKeyField, FieldKind::kText});
  DatasetWriter w(dir, schema, o);
  for (int i = 0; i < spec.count; ++i) {
    const auto [width, height] = spec.size(i);
    const auto jpeg = make_jpeg(width, height, static_cast<uint32_t>(i), spec.quality);
    const auto label = internal::le64(i % spec.classes);
    char key[32];
    const int key_len = std::snprintf(key, sizeof key, "img-%05d", i);
    std::vector<std::span<const uint8_t>> f{jpeg, label};
    if (spec.keys) f.emplace_back(reinterpret_cast<const uint8_t*>(key), static_cast<size_t>(key_len));
    w.add(f);
  }
  if (spec.class_names)
    for (int c = 0; c < spec.classes; ++c) w.manifest().class_names.push_back(std::string(1, static_cast<char>('a' + c)));
  w.finish();
}

void write_token_dataset(const std::string& dir, uint64_t tokens, uint32_t L, uint32_t R, bool zstd,
                         uint64_t shard_size) {
  DatasetWriterOptions o;
  o.shard_size = shard_size;
  if (zstd) o.shard.compression = Compression::kZstd;
  DatasetWriter w(dir, Schema{{Field{"tokens", FieldKind::kTokens, DType::kUint16, L}}}, o);
  const uint64_t rows = (tokens - 1) / L;
  for (uint64_t r0 = 0; r0 < rows; r0 += R) {
    std::vector<uint8_t> buf;
    for (uint64_t r = r0; r < std::min<uint64_t>(rows, r0 + R); ++r)
      for (uint64_t t = r * L; t <= r * L + L; ++t) {
        const uint16_t v = static_cast<uint16_t>(t % 65521);
        buf.push_back(v & 0xFF);
        buf.push_back(v >> 8);
      }
    std::vector<std::span<const uint8_t>> f{buf};
    w.add(f);
  }
  w.finish();
}

Manifest write_bytes_dataset(const std::string& dir, const BytesDatasetSpec& spec) {
  DatasetWriterOptions o;
  o.shard_size = spec.shard_size;
  o.shard.fsync = false;
  DatasetWriter w(dir, Schema{{Field{"data", FieldKind::kBytes}, Field{"label", FieldKind::kInt64}}}, o);
  for (int i = 0; i < spec.count; ++i) {
    const auto payload = random_bytes(spec.size(i), static_cast<uint32_t>(i) + spec.seed);
    const auto label = internal::le64(i);
    std::vector<std::span<const uint8_t>> f{payload, label};
    w.add(f);
  }
  return w.finish();
}

std::vector<uint32_t> lognormal_lengths(size_t n, uint32_t max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> d(4.0, 0.8);
  std::vector<uint32_t> len(n);
  for (auto& x : len) x = std::clamp<uint32_t>(static_cast<uint32_t>(d(rng)), 1, max_len);
  return len;
}

void write_sample_dataset(const std::string& dir, const std::vector<uint32_t>& lengths, bool with_mask) {
  Schema schema{{Field{"__key__", FieldKind::kText}, Field{"tokens", FieldKind::kVarArray, DType::kUint32, 0, {}}}};
  if (with_mask) schema.fields.push_back(Field{"loss_mask", FieldKind::kVarArray, DType::kUint8, 0, {}});
  DatasetWriterOptions wo;
  wo.shard_size = 64 << 10;  // several shards
  DatasetWriter w(dir, schema, wo);
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<uint32_t> t(lengths[i]);
    std::vector<uint8_t> m(lengths[i]);
    for (uint32_t k = 0; k < lengths[i]; ++k) {
      t[k] = static_cast<uint32_t>(i * 1000 + k);
      m[k] = k % 3 != 0;
    }
    const std::string key = "conv/" + std::to_string(i);
    std::span<const uint8_t> tb(reinterpret_cast<const uint8_t*>(t.data()), t.size() * 4);
    std::vector<std::span<const uint8_t>> f{{reinterpret_cast<const uint8_t*>(key.data()), key.size()}, tb};
    if (with_mask) f.push_back(m);
    w.add(f);
  }
  w.finish();
}

}  // namespace stoker::testing
