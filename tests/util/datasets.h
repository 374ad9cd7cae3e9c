// Dataset fixtures shared by the test suites: small image and token datasets written
// with the real DatasetWriter, with contents the tests can recompute.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "stoker/dataset.h"

namespace stoker::testing {

struct ImageDatasetSpec {
  int count = 0;
  /// Roll to a new shard past this many bytes (several shards for small datasets).
  uint64_t shard_size = 64 << 10;
  /// Label of image i is i % classes.
  int classes = 5;
  /// Write Manifest::class_names ("a", "b", ... one per class).
  bool class_names = true;
  /// {width, height} of image i: varied by default, so crops and resizes differ.
  std::function<std::pair<int, int>(int)> size = [](int i) {
    return std::pair<int, int>{40 + (i * 7) % 50, 30 + (i * 11) % 40};
  };
  int quality = 85;
  /// Add a third field, "__key__" (text "img-NNNNN", N = i): what error messages name.
  bool keys = false;
};

/// Fields "jpeg" (make_jpeg(w, h, seed i)) and "label" (int64 i % classes), and
/// "__key__" when spec.keys.
void write_image_dataset(const std::string& dir, const ImageDatasetSpec& spec);

/// Tokens: a stream of `tokens` values (position % 65521, uint16), rows of seq_len L
/// (each row holds L + 1 tokens, the last shared with the next row), R rows a record.
void write_token_dataset(const std::string& dir, uint64_t tokens, uint32_t L, uint32_t R, bool zstd = false,
                         uint64_t shard_size = 16 << 10);

struct BytesDatasetSpec {
  int count = 0;
  uint64_t shard_size = 64 << 10;
  /// Length of record i's "data": random bytes seeded with i + seed.
  std::function<size_t(int)> size = [](int i) { return static_cast<size_t>(3000 + (i * 53) % 2000); };
  uint32_t seed = 0;
};

/// Fields "data" (kBytes, random) and "label" (int64 i), shards not fsynced: the opaque
/// records the remote and cache tests move around. Returns the manifest written.
Manifest write_bytes_dataset(const std::string& dir, const BytesDatasetSpec& spec);

/// n sample lengths drawn log-normal (mu 4, sigma 0.8: median ~55 tokens) from `seed`,
/// clamped to [1, max_len].
std::vector<uint32_t> lognormal_lengths(size_t n, uint32_t max_len, uint32_t seed);

/// Samples of varying length: "__key__" ("conv/i"), a uint32 var-array "tokens" (sample
/// i holds i * 1000 + k, k < lengths[i]: every delivered token says which sample and
/// place it is) and with `with_mask` a uint8 "loss_mask" (k % 3 != 0); several shards.
void write_sample_dataset(const std::string& dir, const std::vector<uint32_t>& lengths, bool with_mask);

}  // namespace stoker::testing
