#include "benchlib/decode_limit.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <system_error>
#include <span>
#include <thread>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/order.h"
#include "util/huge_pages.h"

namespace stoker::internal {

DecodeLimit measure_decode_limit(const std::string& path, const ImageTransform& transform, unsigned threads,
                                 double seconds, uint64_t max_records, uint64_t seed) {
  auto ds = Dataset::open(path);
  const Schema& schema = ds->schema();
  int jpeg = -1;
  for (size_t i = 0; i < schema.fields.size(); ++i)
    if (schema.fields[i].kind == FieldKind::kJpeg) jpeg = static_cast<int>(i);
  const uint64_t n = ds->record_count();
  const uint64_t take = std::min<uint64_t>(n, std::max<uint64_t>(1, max_records));
  struct Item {
    uint64_t index;
    std::span<const uint8_t> stored;  // what the loader reads
    RecordLocation loc;
    std::string where;
  };
  std::vector<Item> items;
  items.reserve(take);
  DecodeLimit out;
  std::vector<uint64_t> picked(take);
  for (uint64_t i = 0; i < take; ++i) {
    picked[i] = take == n ? i : i * n / take;
    auto [s, r] = ds->locate(picked[i]);
    out.bytes_in_memory += ds->shard(s)->location(r).stored_size;
  }
  // The records sit in memory as the loader's reads do: on huge pages where the kernel
  // has them (its IO slab), so the limit is not lowered by page walks the pipeline avoids.
  const size_t arena_bytes = std::max<uint64_t>(1, out.bytes_in_memory);
  PageBuffer arena;
  try {
    arena = PageBuffer(arena_bytes);
  } catch (const std::system_error&) {
    throw Error(ErrorCode::kResourceExhausted, "cannot map " + std::to_string(arena_bytes) + " bytes for the decode limit's records");
  }
  size_t at = 0;
  for (uint64_t g : picked) {
    auto [s, r] = ds->locate(g);
    auto reader = ds->shard(s);
    const std::vector<uint8_t> stored = reader->read_stored(r);
    if (stored.size() > arena_bytes - at)
      throw Error(ErrorCode::kDataLoss, ds->shard_path(s) + ": record " + std::to_string(r) + " read back longer than its index says");
    std::memcpy(arena.get() + at, stored.data(), stored.size());
    items.push_back({g, {arena.get() + at, stored.size()}, reader->location(r), ds->shard_path(s)});
    at += stored.size();
  }
  out.records_in_memory = items.size();
  threads = std::max(1u, threads);
  std::atomic<uint64_t> next{0}, done{0}, raw_bytes{0};
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(seconds);
  auto worker = [&] {
    ImageDecoder dec;
    std::vector<uint8_t> raw, pixels(static_cast<size_t>(transform.size) * transform.size * 3);
    for (;;) {
      const uint64_t k = next++;
      // At least one full pass, then until the deadline.
      if (k >= items.size() && std::chrono::steady_clock::now() >= deadline) break;
      const Item& it = items[k % items.size()];
      raw.resize(it.loc.raw_size);
      // The same checks and unpacking as the loader, then decode (images) or nothing more.
      auto fields = unpack_record_into(schema, it.loc, it.stored, raw, it.where);
      if (jpeg >= 0 && transform.kind != ImageTransform::Kind::kNone)
        dec.decode(fields[jpeg], transform, sample_seed(seed, 0, it.index), pixels.data(), pixels.size());
      done++;
      raw_bytes += it.loc.raw_size;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.samples = done;
  out.raw_bytes = raw_bytes;
  out.samples_per_s = out.samples / std::max(out.seconds, 1e-9);
  return out;
}

}  // namespace stoker::internal
