#include "benchlib/decode_limit.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <span>
#include <thread>
#include <vector>

#include "pipeline/packed_samples.h"
#include "pipeline/producer.h"
#include "pipeline/video_fields.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/order.h"
#include "util/convert.h"
#include "util/huge_pages.h"

namespace stoker::internal {

uint64_t decode_limit_default_records(const Dataset& ds, uint64_t max_bytes, uint64_t min_records) {
  const uint64_t records = ds.record_count();
  const uint64_t mean = std::max<uint64_t>(1, ds.manifest().total_bytes() / std::max<uint64_t>(1, records));
  return std::min(records, std::max(min_records, max_bytes / mean));
}

std::vector<uint64_t> decode_limit_records(uint64_t records, uint64_t max_records) {
  const uint64_t take = std::min<uint64_t>(records, std::max<uint64_t>(1, max_records));
  std::vector<uint64_t> picked(take);
  for (uint64_t i = 0; i < take; ++i) picked[i] = take == records ? i : i * records / take;
  return picked;
}

std::vector<uint64_t> decode_limit_visits(uint64_t records, uint64_t max_records, const OrderOptions& order) {
  std::vector<uint64_t> picked = decode_limit_records(records, max_records);
  // A shuffled loader meets its records scattered, and work whose cost follows what came
  // before runs slower on them than in index order: a tokenizer's tables stay in the
  // CPU's caches while neighbouring documents share their words.
  if (order.kind != OrderKind::kShuffled) return picked;
  const Permutation shuffle(picked.size(), order.seed);
  std::vector<uint64_t> visits(picked.size());
  for (uint64_t i = 0; i < visits.size(); ++i) visits[i] = picked[shuffle(i)];
  return visits;
}

struct DecodeLimitMeter::Impl {
  struct Item {
    uint64_t index;
    std::span<const uint8_t> stored;  // what the loader reads
    RecordLocation loc;
    std::string where;
  };
  LoaderOptions opt;
  std::shared_ptr<Dataset> ds;
  bool token_data = false;
  bool packed = false;  // samples of varying length, or text tokenised here (opt.seq_len)
  PackedFacts pack;
  Context ctx;
  ImageFacts facts;
  VideoFacts video;
  size_t sample_bytes = 0;
  PageBuffer arena;
  std::vector<Item> items;
  uint64_t next = 0;  // records started over every run: passes continue across runs
  DecodeLimit out;
};

DecodeLimitMeter::DecodeLimitMeter(const LoaderOptions& opt, uint64_t max_records) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = opt;
  m.ds = Dataset::open(opt.path);
  if (m.ds->record_count() == 0)
    throw_error(ErrorCode::kInvalidArgument, opt.path + " holds 0 records: there is nothing to measure the decode of");
  const Schema& schema = m.ds->schema();
  const int tokens = schema.find("tokens");
  m.token_data = tokens >= 0 && schema.fields[static_cast<size_t>(tokens)].kind == FieldKind::kTokens;
  // Image data: the loader's plan of every field, and one sample's tensors (a batch of
  // one, laid out as the loader lays out a slot).
  m.ctx.opt = &m.opt;
  m.ctx.order_opt = m.opt.order;
  m.packed = !m.token_data && (opt.seq_len > 0 || opt.max_tokens > 0);
  if (m.packed) {
    m.pack = packed_facts(m.opt, schema);
  } else if (!m.token_data) {
    m.facts = plan_image_fields(m.opt, schema, m.ctx);
    m.video = plan_video_fields(m.opt, schema, m.ctx);
    for (auto& t : m.ctx.tensors) {
      t.offset = m.sample_bytes;
      m.sample_bytes += (t.item_bytes + 255) / 256 * 256;
    }
  }
  Dataset& ds = *m.ds;
  const std::vector<uint64_t> picked =
      decode_limit_visits(ds.record_count(), decode_limit_record_count(ds, max_records), opt.order);
  m.items.reserve(picked.size());
  for (uint64_t g : picked) {
    auto [s, r] = ds.locate(g);
    m.out.bytes_in_memory += ds.shard(s)->location(r).stored_size;
  }
  // The records sit in memory as the loader's reads do: on huge pages where the kernel
  // has them (its IO slab), so the limit is not lowered by page walks the pipeline avoids.
  const size_t arena_bytes = std::max<uint64_t>(1, m.out.bytes_in_memory);
  try {
    m.arena = PageBuffer(arena_bytes);
  } catch (const std::system_error&) {
    throw Error(ErrorCode::kResourceExhausted, "cannot map " + std::to_string(arena_bytes) + " bytes for the decode limit's records");
  }
  size_t at = 0;
  for (uint64_t g : picked) {
    auto [s, r] = ds.locate(g);
    auto reader = ds.shard(s);
    const std::vector<uint8_t> stored = reader->read_stored(r);
    if (stored.size() > arena_bytes - at)
      throw Error(ErrorCode::kDataLoss, ds.shard_path(s) + ": record " + std::to_string(r) + " read back longer than its index says");
    std::memcpy(m.arena.get() + at, stored.data(), stored.size());
    m.items.push_back({g, {m.arena.get() + at, stored.size()}, reader->location(r),
                       ds.shard_path(s) + ": record " + std::to_string(r)});
    at += stored.size();
  }
  m.out.records_in_memory = m.items.size();
}

DecodeLimitMeter::~DecodeLimitMeter() = default;

const DecodeLimit& DecodeLimitMeter::result() const { return impl_->out; }

void DecodeLimitMeter::run(unsigned threads, double seconds, bool full_pass) {
  Impl& m = *impl_;
  const Schema& schema = m.ds->schema();
  const auto& items = m.items;
  threads = std::max(1u, threads);
  // A full pass: until every record held has been started once, counting every run.
  const uint64_t pass_end = full_pass ? std::max<uint64_t>(m.next, items.size()) : 0;
  std::atomic<uint64_t> next{m.next}, done{0}, raw_bytes{0}, tokens{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;  // a bad record ends the measurement with its error
  std::mutex error_mu;
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::duration<double>(seconds);
  auto work = [&] {
    ImageDecoder dec;
    MediaDecoders video;
    std::vector<uint8_t> raw, pixels;
    std::vector<DecodeResult> results;
    std::vector<uint32_t> ids;
    std::vector<uint8_t> row;  // a packed sample's tokens as the loader writes them
    PageBuffer mem(std::max<size_t>(1, m.sample_bytes));
    Job job;
    job.mem = mem.get();
    job.var.assign(m.ctx.vars.size(), std::vector<std::vector<uint8_t>>(1));
    for (;;) {
      const uint64_t k = next++;
      if (failed || (k >= pass_end && std::chrono::steady_clock::now() >= deadline)) break;
      const Impl::Item& it = items[k % items.size()];
      if (m.token_data) {
        raw.resize(it.loc.raw_size);
        unpack_record_into(schema, it.loc, it.stored, raw, it.where);
      } else if (m.packed) {
        // The sample's tokens (text: tokenised) written out once, as a row's piece is.
        const auto fields = record_fields(schema, it.loc, it.stored, raw, it.where);
        const std::span<const uint8_t> toks = sample_tokens(m.pack, fields, ids);
        const size_t n = toks.size() / elem_size(m.pack.stored_type);
        const ElemType out = m.opt.token_type_is_stored ? m.pack.stored_type : m.opt.token_type;
        row.resize(std::max<size_t>(1, n * elem_size(out)));
        widen_tokens_le(toks.data(), m.pack.stored_type, n, out, row.data());
        tokens += n;
      } else {
        // The same checks, slicing and per-field work as the loader's decode workers.
        const auto fields = record_fields(schema, it.loc, it.stored, raw, it.where);
        put_image_fields(m.ctx, m.facts, 0, job, 0, fields, it.index, dec, pixels, results, it.where);
        put_video_fields(m.ctx, m.video, m.facts.key_field, 0, job, 0, fields, it.index, video, it.where);
      }
      done++;
      raw_bytes += it.loc.raw_size;
    }
  };
  auto worker = [&] {
    try {
      work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!first_error) first_error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
  // Each thread took one index past the last record it did.
  m.next += done;
  m.out.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.out.samples += done;
  m.out.raw_bytes += raw_bytes;
  m.out.tokens += tokens;
  m.out.samples_per_s = m.out.samples / std::max(m.out.seconds, 1e-9);
}

DecodeLimit measure_decode_limit(const LoaderOptions& opt, unsigned threads, double seconds, uint64_t max_records) {
  DecodeLimitMeter m(opt, max_records);
  m.run(threads, seconds, true);
  return m.result();
}

}  // namespace stoker::internal
