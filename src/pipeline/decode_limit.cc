#include "pipeline/decode_limit.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/order.h"

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
    std::vector<uint8_t> stored;  // what the loader reads
    RecordLocation loc;
    std::string where;
  };
  std::vector<Item> items;
  items.reserve(take);
  DecodeLimit out;
  for (uint64_t i = 0; i < take; ++i) {
    const uint64_t g = take == n ? i : i * n / take;
    auto [s, r] = ds->locate(g);
    auto reader = ds->shard(s);
    items.push_back({g, reader->read_stored(r), reader->location(r), ds->shard_path(s)});
    out.bytes_in_memory += items.back().stored.size();
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
