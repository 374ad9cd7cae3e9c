// MixtureFeed (mixture_feed.h).
#include "pipeline/mixture_feed.h"

#include <atomic>
#include <cstring>

#include "stoker/error.h"
#include "stoker/mixture.h"

namespace stoker::internal {

namespace {

// A mixture batch's own memory (its samples are copies).
struct OwnedLease : SlotLease {
  std::vector<uint8_t> mem;
};

size_t align_up(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

struct MixtureFeed::Impl {
  LoaderOptions opt;
  RankInfo rank;
  std::vector<MixtureSource> sizes;
  struct Source {
    std::unique_ptr<Loader> loader;
    uint64_t epoch = UINT64_MAX;  // the source epoch the loader runs (UINT64_MAX: none yet)
    std::optional<Batch> cur;     // the batch holding positions [cur_pos, cur_pos + size)
    uint64_t cur_pos = 0, next_pos = 0;  // next_pos: where the loader's next batch starts
    std::vector<const uint8_t*> data;    // per output (outs' order): `cur`'s, once checked
  };
  std::vector<Source> src;
  uint64_t epoch = 0, start_consumed = 0;
  std::unique_ptr<MixtureOrder> order;
  std::unique_ptr<RankSchedule> sched;
  uint64_t next_k = 0;
  uint64_t table_block = UINT64_MAX;
  std::vector<MixtureOrder::Draw> table;  // the draws of block table_block
  std::atomic<uint64_t> batches_out{0}, samples_out{0};  // stats() may run on any thread
  // Output layout, from the first batch seen: per dense output, its bytes a sample.
  struct Out {
    std::string name;
    ElemType dtype;
    std::vector<int64_t> inner;
    size_t sample_bytes = 0, offset = 0;
  };
  std::vector<Out> outs;
  size_t batch_bytes = 0;

  void start() {
    order = std::make_unique<MixtureOrder>(sizes, opt.order.seed, epoch, opt.samples_per_epoch);
    sched = std::make_unique<RankSchedule>(order->size(), opt.batch_size, rank.world_size, rank.rank, opt.drop_last,
                                           start_consumed);
    next_k = 0;
    table_block = UINT64_MAX;
    batches_out = samples_out = 0;  // stats() count the current run, as a Loader's do
  }

  MixtureOrder::Draw draw_at(uint64_t p) {
    const uint64_t b = p / MixtureOrder::kBlock;
    if (b != table_block) {
      const uint64_t begin = b * MixtureOrder::kBlock;
      table.resize(std::min(MixtureOrder::kBlock, order->size() - begin));
      order->draws(begin, table.size(), table.data());
      table_block = b;
    }
    return table[p - b * MixtureOrder::kBlock];
  }

  // Source s's batch holding sample `pos` of its epoch `e`, and the sample's place in it.
  std::pair<const Batch*, uint64_t> sample(uint32_t s, uint64_t e, uint64_t pos) {
    Source& x = src[s];
    if (x.epoch != e || pos < x.cur_pos) {  // another epoch, or a resume: start there
      x.cur.reset();
      x.loader->set_epoch(e);
      if (pos > 0) {
        OrderState st = x.loader->state();
        st.consumed = pos;
        x.loader->load_state(st);
      }
      x.epoch = e;
      x.cur_pos = x.next_pos = pos;
    }
    while (!x.cur || pos >= x.cur_pos + x.cur->size()) {
      x.cur.reset();  // its slot back to the source's ring first
      x.cur = x.loader->next();
      if (!x.cur)
        throw std::logic_error("mixture source " + std::to_string(s) + " ended its epoch before sample " +
                               std::to_string(pos));
      x.cur_pos = x.next_pos;
      x.next_pos += x.cur->size();
      // Each batch of a source checked and its outputs found once, not per sample.
      plan_outputs(*x.cur, s);
      x.data.clear();
      for (const Out& o : outs)
        x.data.push_back(o.name == "source" ? nullptr : static_cast<const uint8_t*>((*x.cur)[o.name].data));
    }
    return {&*x.cur, pos - x.cur_pos};
  }

  void plan_outputs(const Batch& b, uint32_t s) {
    if (!outs.empty()) {
      for (const Out& o : outs) {
        if (o.name == "source") continue;  // the feed's own
        const TensorView* t = b.find(o.name);
        if (!t || t->dtype != o.dtype || std::vector<int64_t>(t->shape.begin() + 1, t->shape.end()) != o.inner)
          throw_error(ErrorCode::kInvalidArgument, "mixture source " + std::to_string(s) + " (" + opt.sources[s] +
                                                       ") does not deliver '" + o.name + "' as source 0 does");
      }
      return;
    }
    size_t off = 0;
    for (const TensorView& t : b.tensors()) {
      // Mixtures carry dense outputs; `__key__` (every version-2 dataset has one) is left
      // out, any other text, bytes or ragged field is refused by name.
      if (t.kind != TensorKind::kDense && t.name == kKeyField) continue;
      if (t.kind != TensorKind::kDense)
        throw_error(ErrorCode::kInvalidArgument, "mixtures deliver dense outputs only; '" + t.name +
                                                     "' is not (text, bytes and variable-length fields are not mixed yet)");
      if (t.name == "source")
        throw_error(ErrorCode::kInvalidArgument, "mixture source " + std::to_string(s) + " (" + opt.sources[s] +
                                                     ") has an output named 'source', the name the mixture gives its own");
      Out o{t.name, t.dtype, std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()), 0, 0};
      o.sample_bytes = elem_size(t.dtype);
      for (int64_t d : o.inner) o.sample_bytes *= static_cast<size_t>(d);
      o.offset = off;
      off += align_up(o.sample_bytes * opt.batch_size);
      outs.push_back(std::move(o));
    }
    Out src_out{"source", ElemType::kInt64, {}, 8, off};
    off += align_up(8 * opt.batch_size);
    outs.push_back(src_out);
    batch_bytes = off;
  }
};

MixtureFeed::MixtureFeed(const LoaderOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = options;
  const LoaderOptions& opt = m.opt;
  if (opt.weights.size() != opt.sources.size())
    throw_error(ErrorCode::kInvalidArgument, "a mixture of " + std::to_string(opt.sources.size()) + " sources needs " +
                                                 std::to_string(opt.sources.size()) + " weights, got " +
                                                 std::to_string(opt.weights.size()));
  if (opt.on_error != OnError::kError)
    throw_error(ErrorCode::kInvalidArgument, "mixtures take on_error 'error' only (a skipped sample would shift a source's positions)");
  if (opt.batch_size == 0) throw_error(ErrorCode::kInvalidArgument, "batch_size must be >= 1");
  if (opt.rank >= 0 || opt.world_size >= 0) {
    if (opt.rank < 0 || opt.world_size < 1 || opt.rank >= opt.world_size)
      throw_error(ErrorCode::kInvalidArgument, "rank " + std::to_string(opt.rank) + " / world_size " +
                                                   std::to_string(opt.world_size) + " is not a valid pair");
    m.rank = RankInfo{static_cast<uint32_t>(opt.rank), static_cast<uint32_t>(opt.world_size)};
  } else {
    m.rank = rank_from_env();
  }
  for (size_t s = 0; s < opt.sources.size(); ++s) {
    LoaderOptions so = opt;
    so.sources.clear();
    so.weights.clear();
    so.path = opt.sources[s];
    so.rank = 0;
    so.world_size = 1;
    so.drop_last = false;
    so.batch_size = std::max<uint64_t>(opt.batch_size, 64);
    so.order.seed = mix64(opt.order.seed ^ (0x736f7572636531ull + s));  // its own order per source
    so.report_interval_s = 0;
    // The sources share the threads asked for (their decoders would otherwise contend
    // for the same CPUs, each source with the full count).
    if (opt.threads) so.threads = std::max<unsigned>(1, opt.threads / static_cast<unsigned>(opt.sources.size()));
    Impl::Source x;
    x.loader = std::make_unique<Loader>(so);
    m.sizes.push_back(MixtureSource{x.loader->epoch_samples(), opt.weights[s]});
    m.src.push_back(std::move(x));
  }
  m.start();
}

MixtureFeed::~MixtureFeed() = default;

std::optional<Batch> MixtureFeed::next() {
  Impl& m = *impl_;
  if (m.next_k >= m.sched->num_batches()) return std::nullopt;
  const uint64_t k = m.next_k;
  const uint64_t n = m.sched->batch_length(k);
  auto lease = std::make_shared<OwnedLease>();
  for (uint64_t j = 0; j < n; ++j) {
    const MixtureOrder::Draw d = m.draw_at(m.sched->position(k, j));
    const uint64_t i = m.sample(d.source, d.source_epoch, d.position).second;
    const std::vector<const uint8_t*>& data = m.src[d.source].data;
    if (lease->mem.empty()) lease->mem.resize(m.batch_bytes);
    for (size_t t = 0; t < m.outs.size(); ++t) {
      const Impl::Out& o = m.outs[t];
      uint8_t* dst = lease->mem.data() + o.offset + j * o.sample_bytes;
      if (!data[t]) {  // "source"
        const int64_t v = d.source;
        std::memcpy(dst, &v, 8);
        continue;
      }
      std::memcpy(dst, data[t] + i * o.sample_bytes, o.sample_bytes);
    }
  }
  std::vector<TensorView> views;
  for (const Impl::Out& o : m.outs) {
    TensorView v;
    v.name = o.name;
    v.data = lease->mem.data() + o.offset;
    v.dtype = o.dtype;
    v.shape.push_back(static_cast<int64_t>(n));
    for (int64_t d : o.inner) v.shape.push_back(d);
    views.push_back(std::move(v));
  }
  m.next_k++;
  m.batches_out++;
  m.samples_out += n;
  return Batch(std::move(views), std::move(lease), m.epoch, k, n);
}

void MixtureFeed::set_epoch(uint64_t e) {
  impl_->epoch = e;
  impl_->start_consumed = 0;
  impl_->start();
}

uint64_t MixtureFeed::epoch() const noexcept { return impl_->epoch; }
uint64_t MixtureFeed::num_batches() const { return impl_->sched->num_batches(); }
uint64_t MixtureFeed::epoch_samples() const noexcept { return impl_->order->size(); }

OrderState MixtureFeed::state() const {
  const Impl& m = *impl_;
  OrderState s = OrderState::start(m.opt.order, m.order->size(), m.epoch);
  s.consumed = m.sched->consumed_after(m.next_k);
  return s;
}

void MixtureFeed::load_state(const OrderState& s) {
  s.check_matches(impl_->opt.order, impl_->order->size());
  impl_->epoch = s.epoch;
  impl_->start_consumed = s.consumed;
  impl_->start();
}

LoaderStats MixtureFeed::stats() const {
  LoaderStats s;
  for (const auto& x : impl_->src) {
    const LoaderStats t = x.loader->stats();
    s.bytes_read += t.bytes_read;
    s.record_bytes += t.record_bytes;
    s.tokens = t.tokens;
    s.wall_s = std::max(s.wall_s, t.wall_s);
    s.decode.threads += t.decode.threads;
    s.decode.busy_s += t.decode.busy_s;
    s.decode.wait_s += t.decode.wait_s;
    s.decode.items += t.decode.items;
    s.io.threads += t.io.threads;
    s.io.busy_s += t.io.busy_s;
    s.io.wait_s += t.io.wait_s;
    s.io.items += t.io.items;
  }
  s.batches = impl_->batches_out;
  s.samples = impl_->samples_out;
  return s;
}

int MixtureFeed::rank() const noexcept { return static_cast<int>(impl_->rank.rank); }
int MixtureFeed::world_size() const noexcept { return static_cast<int>(impl_->rank.world_size); }

}  // namespace stoker::internal
