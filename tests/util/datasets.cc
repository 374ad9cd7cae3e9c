#include "util/datasets.h"

#include <algorithm>
#include <cstdio>
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

}  // namespace stoker::testing
