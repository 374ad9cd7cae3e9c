// The mixture feed (mixture_feed.h).
#include "pipeline/mixture_feed.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>

#include "pipeline/dataset_feed.h"
#include "stoker/error.h"
#include "stoker/mixture.h"
#include "util/log.h"

namespace stoker::internal {

namespace {

// A mixture batch's own memory (its samples are copies): the dense outputs in `mem`,
// each variable-size output's values and B + 1 offsets.
struct OwnedLease : SlotLease {
  // Not zeroed: every byte a view shows is copied in. Taken fresh per batch, it is
  // mostly the block the batch before gave back (a consumer drops a batch before asking
  // for the next), still in cache.
  std::unique_ptr<uint8_t[]> mem;
  std::vector<std::vector<uint8_t>> values;
  std::vector<std::vector<int64_t>> offsets;
};

size_t align_up(size_t n) { return (n + 63) / 64 * 64; }

const char* kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::kDense: return "dense";
    case TensorKind::kRagged: return "variable-length";
    case TensorKind::kText: return "text";
    case TensorKind::kBytes: return "bytes";
  }
  return "?";
}

std::string describe(const Output& o) {
  std::string d = std::string(kind_name(o.kind)) + " " + elem_type_name(o.dtype);
  if (!o.shape.empty() || o.kind == TensorKind::kDense) {
    d += o.kind == TensorKind::kDense ? " [B" : " [n";
    for (int64_t x : o.shape) d += ", " + std::to_string(x);
    d += "]";
  }
  return d;
}

// A source's tuner figures added to the mixture's: knobs and budgets summed (the threads'
// budget is one, shared), its changes named by source. The source with the latest change
// goes last, so the list ends with the mixture's last change.
void add_tune(TuneStats& m, const TuneStats& t, const std::string& source) {
  if (!t.enabled) return;
  m.settled = m.enabled ? m.settled && t.settled : t.settled;
  m.enabled = true;
  m.threads += t.threads;
  m.threads_max = std::max(m.threads_max, t.threads_max);
  m.slots += t.slots;
  m.slots_max += t.slots_max;
  m.queue_depth += t.queue_depth;
  m.queue_depth_max += t.queue_depth_max;
  m.memory_budget += t.memory_budget;
  m.noise = std::max(m.noise, t.noise);
  std::vector<std::string> named;
  for (const std::string& c : t.changes) named.push_back(source + ": " + c);
  const bool latest = t.last_change_s >= m.last_change_s;
  m.changes.insert(latest ? m.changes.end() : m.changes.begin(), named.begin(), named.end());
  if (latest) m.last_change_s = t.last_change_s;
}

class MixtureFeed final : public Feed {
 public:
  MixtureFeed(const LoaderOptions& options, RankInfo rank);

  std::optional<Batch> next(bool block, bool* would_wait) override;
  void set_epoch(uint64_t e) override;
  uint64_t epoch() const noexcept override { return epoch_; }
  uint64_t num_batches() const override { return sched->num_batches(); }
  uint64_t epoch_samples() const noexcept override { return order->size(); }
  OrderState state() const override;
  void load_state(const OrderState& s) override;
  void close() override;
  /// The sources' summed figures (their runs), this run's batches and samples.
  LoaderStats stats() const override;
  const LoaderOptions& options() const noexcept override { return opt; }
  const std::vector<Output>& outputs() const noexcept override { return out_specs; }
  const Schema& schema() const noexcept override { return src.front().feed->schema(); }
  const std::vector<std::string>& class_names() const noexcept override {
    static const std::vector<std::string> none;
    return none;
  }

 private:
  LoaderOptions opt;
  RankInfo rank;
  std::vector<MixtureSource> sizes;
  struct Source {
    std::unique_ptr<Feed> feed;
    uint64_t epoch = UINT64_MAX;  // the source epoch the feed runs (UINT64_MAX: none yet)
    std::optional<Batch> cur;     // the batch holding positions [cur_pos, cur_pos + size)
    uint64_t cur_pos = 0, next_pos = 0;  // next_pos: where the feed's next batch starts
    std::vector<const TensorView*> views;  // per output (outs' order): `cur`'s; null for "source"
    std::map<std::string, std::string> own_name;  // mixture output name -> this source's (source_fields)
    const std::string& own(const std::string& name) const {
      auto it = own_name.find(name);
      return it == own_name.end() ? name : it->second;
    }
  };
  std::vector<Source> src;
  std::shared_ptr<TuneThreadBudget> shared_threads;  // threads="auto": the sources' one CPU budget
  uint64_t epoch_ = 0, start_consumed = 0;
  std::unique_ptr<MixtureOrder> order;
  std::unique_ptr<RankSchedule> sched;
  uint64_t next_k = 0;
  uint64_t table_block = UINT64_MAX;
  std::vector<MixtureOrder::Draw> table;  // the draws of block table_block
  std::atomic<uint64_t> batches_out{0}, samples_out{0};  // stats() may run on any thread
  // The outputs, planned from the sources' feeds when the mixture opens.
  struct Out {
    Output spec;              // dense: offset in the batch's memory, item_bytes a sample's
    bool is_source = false;   // the mixture's own "source"
    int var = -1;             // variable-size: its place in OwnedLease::values
  };
  std::vector<Out> outs;
  std::vector<Output> out_specs;  // outs' specs (outputs())
  size_t batch_bytes = 0, vars = 0;

  void start() {
    order = std::make_unique<MixtureOrder>(sizes, opt.order.seed, epoch_, opt.samples_per_epoch);
    sched = std::make_unique<RankSchedule>(rank_schedule(order->size(), opt, rank, start_consumed));
    next_k = 0;
    table_block = UINT64_MAX;
    batches_out = samples_out = 0;  // stats() count the current run, as a Loader's do
  }

  std::string source_name(size_t s) const { return "mixture source " + std::to_string(s) + " (" + opt.sources[s] + ")"; }

  // The outputs every source has, each agreeing across them; the others named in one warning.
  void plan_outputs() {
    std::vector<std::vector<Output>> specs;
    for (size_t s = 0; s < src.size(); ++s) {
      specs.push_back(src[s].feed->outputs());
      if (s >= opt.source_fields.size()) continue;
      for (const auto& rename : opt.source_fields[s]) {
        const std::string& from = rename.first;
        const std::string& to = rename.second;
        auto it = std::find_if(specs[s].begin(), specs[s].end(), [&](const Output& o) { return o.name == from; });
        if (it == specs[s].end()) {
          std::string have;
          for (const Output& o : specs[s]) have += (have.empty() ? "" : ", ") + o.name;
          throw_error(ErrorCode::kInvalidArgument, "source_fields: " + source_name(s) + " has no output '" + from +
                                                       "' to call '" + to + "' (it has " + have + ")");
        }
        it->name = to;
        src[s].own_name[to] = from;
      }
    }
    auto find = [](const std::vector<Output>& v, const std::string& name) -> const Output* {
      for (const Output& o : v)
        if (o.name == name) return &o;
      return nullptr;
    };
    std::string left_out;
    auto leave_out = [&](const std::string& name) {
      std::string without;
      for (size_t s = 0; s < src.size(); ++s)
        if (!find(specs[s], name)) without += (without.empty() ? "" : ", ") + std::to_string(s) + " (" + opt.sources[s] + ")";
      left_out += (left_out.empty() ? "'" : "; '") + name + "' (not in source" + (without.find(',') != std::string::npos ? "s " : " ") + without + ")";
    };
    size_t off = 0;
    for (size_t s = 0; s < src.size(); ++s)
      for (const Output& o : specs[s]) {
        if (o.name == "source")
          throw_error(ErrorCode::kInvalidArgument, source_name(s) + " has an output named 'source', the name the mixture gives its own");
        bool everywhere = true, seen_before = false;
        for (size_t t = 0; t < src.size(); ++t) {
          const Output* other = find(specs[t], o.name);
          if (!other) everywhere = false;
          else if (t < s) seen_before = true;
          else if (!o.same_layout(*other))
            throw_error(ErrorCode::kInvalidArgument, "mixture sources disagree on '" + o.name + "': " + source_name(s) +
                                                         " delivers " + describe(o) + ", " + source_name(t) + " " + describe(*other));
        }
        if (seen_before) continue;
        if (!everywhere) {
          leave_out(o.name);
          continue;
        }
        Out x;
        x.spec = o;
        if (o.kind == TensorKind::kDense) {
          x.spec.offset = off;
          off += align_up(o.item_bytes * opt.batch_size);
        } else {
          x.var = static_cast<int>(vars++);
        }
        outs.push_back(std::move(x));
      }
    if (std::all_of(outs.begin(), outs.end(), [](const Out& o) { return o.spec.name == "index" || o.spec.name == "__key__"; }))
      throw_error(ErrorCode::kInvalidArgument,
                  "mixture sources share no output but index and __key__ (" + left_out +
                      "): batches would carry no data. Name their fields alike with source_fields (Python: "
                      "source_fields=[{\"jpg\": \"image\"}, {\"png\": \"image\"}]), one map per source");
    Out so;
    so.spec = Output::dense("source", ElemType::kInt64, {});
    so.is_source = true;
    so.spec.offset = off;
    off += align_up(so.spec.item_bytes * opt.batch_size);
    // After the dense outputs, as a Loader's batches have its own (every output planned
    // is in source 0, whose outputs come dense first).
    outs.insert(std::find_if(outs.begin(), outs.end(), [](const Out& o) { return o.var >= 0; }), std::move(so));
    batch_bytes = off;
    for (const Out& o : outs) out_specs.push_back(o.spec);
    if (!left_out.empty()) {
      const std::string msg = "mixture: leaving out outputs that not every source has: " + left_out;
      if (opt.warning_sink) opt.warning_sink(msg);
      else log_warn(msg);
    }
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

  // Source s's feed at position `pos` of its epoch `e`: started there unless it runs
  // that epoch and has not passed `pos` (another epoch, or a resume).
  void seek(uint32_t s, uint64_t e, uint64_t pos) {
    Source& x = src[s];
    if (x.epoch == e && pos >= x.cur_pos) return;
    x.cur.reset();
    x.feed->set_epoch(e);
    if (pos > 0) {
      OrderState st = x.feed->state();
      st.consumed = pos;
      x.feed->load_state(st);
    }
    x.epoch = e;
    x.cur_pos = x.next_pos = pos;
  }

  // Source s's batch holding sample `pos` of its epoch `e`, and the sample's place in it.
  std::pair<const Batch*, uint64_t> sample(uint32_t s, uint64_t e, uint64_t pos) {
    Source& x = src[s];
    seek(s, e, pos);
    while (!x.cur || pos >= x.cur_pos + x.cur->size()) {
      x.cur.reset();  // its slot back to the source's ring first
      x.cur = x.feed->next(true, nullptr);
      if (!x.cur)
        throw std::logic_error("mixture source " + std::to_string(s) + " ended its epoch before sample " +
                               std::to_string(pos));
      x.cur_pos = x.next_pos;
      x.next_pos += x.cur->size();
      // Each batch's outputs found once, not per sample.
      x.views.clear();
      for (const Out& o : outs) {
        const TensorView* t = o.is_source ? nullptr : x.cur->find(x.own(o.spec.name));
        if (!o.is_source && !t) throw std::logic_error(source_name(s) + " delivered no '" + o.spec.name + "' as planned");
        x.views.push_back(t);
      }
    }
    return {&*x.cur, pos - x.cur_pos};
  }

  // max_tokens: source s's planned batch `pos` of its epoch `e`, whole (each unit of a
  // source's order is one of its batches). The batches before it that this rank does
  // not take are read and dropped, as other ranks' samples are.
  Batch planned_batch(uint32_t s, uint64_t e, uint64_t pos) {
    Source& x = src[s];
    seek(s, e, pos);
    for (;;) {
      std::optional<Batch> b = x.feed->next(true, nullptr);
      if (!b)
        throw std::logic_error("mixture source " + std::to_string(s) + " ended its epoch before batch " +
                               std::to_string(pos));
      const uint64_t at = x.next_pos++;
      x.cur_pos = x.next_pos;  // none held: seek() goes on from the next one
      if (at == pos) return std::move(*b);
    }
  }

  std::optional<Batch> next_planned_batch();
};

// A source's batch handed on whole (max_tokens), with the mixture's "source" beside it.
struct PassedLease : SlotLease {
  Batch batch;
  std::vector<int64_t> source;
};

MixtureFeed::MixtureFeed(const LoaderOptions& options, RankInfo r) : opt(options), rank(r) {
  if (opt.max_tokens > 0) opt.batch_size = 1;  // a batch is one source's planned batch
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
    if (opt.threads && opt.threads != LoaderOptions::kAutoThreads) so.threads = std::max<unsigned>(1, opt.threads / static_cast<unsigned>(opt.sources.size()));
    // threads="auto": their tuners draw decode threads from one CPU budget, and split the
    // memory budget of the ring.
    if (opt.threads == LoaderOptions::kAutoThreads) {
      if (!shared_threads) shared_threads = std::make_shared<TuneThreadBudget>();
      so.memory_limit = std::max<uint64_t>(1, tune_memory_budget(opt.memory_limit) / opt.sources.size());
    }
    Source x;
    try {
      x.feed = open_dataset_feed(so, RankInfo{0, 1}, shared_threads);
    } catch (const Error& e) {
      // Which source an option does not fit (a field it lacks, ...).
      throw Error(e.code(), source_name(s) + ": " + e.what());
    }
    sizes.push_back(MixtureSource{x.feed->epoch_samples(), opt.weights[s]});
    src.push_back(std::move(x));
  }
  plan_outputs();
  start();
}

std::optional<Batch> MixtureFeed::next(bool block, bool* would_wait) {
  if (!block) {  // its next() waits on its sources and copies: always the caller's other thread
    *would_wait = true;
    return std::nullopt;
  }
  if (next_k >= sched->num_batches()) return std::nullopt;
  if (opt.max_tokens > 0) return next_planned_batch();
  const uint64_t k = next_k;
  const uint64_t n = sched->batch_length(k);
  auto lease = std::make_shared<OwnedLease>();
  lease->mem.reset(new uint8_t[batch_bytes]);
  lease->values.resize(vars);
  lease->offsets.assign(vars, std::vector<int64_t>(n + 1, 0));
  for (uint64_t j = 0; j < n; ++j) {
    const MixtureOrder::Draw d = draw_at(sched->position(k, j));
    const uint64_t i = sample(d.source, d.source_epoch, d.position).second;
    const std::vector<const TensorView*>& views = src[d.source].views;
    for (size_t t = 0; t < outs.size(); ++t) {
      const Out& o = outs[t];
      if (o.var < 0) {
        uint8_t* dst = lease->mem.get() + o.spec.offset + j * o.spec.item_bytes;
        if (o.is_source) {
          const int64_t v = d.source;
          std::memcpy(dst, &v, 8);
        } else {
          std::memcpy(dst, static_cast<const uint8_t*>(views[t]->data) + i * o.spec.item_bytes, o.spec.item_bytes);
        }
        continue;
      }
      const TensorView& v = *views[t];
      std::vector<uint8_t>& vals = lease->values[static_cast<size_t>(o.var)];
      std::vector<int64_t>& offs = lease->offsets[static_cast<size_t>(o.var)];
      int64_t r0 = v.offsets[i];
      const int64_t r1 = v.offsets[i + 1];
      if (o.spec.cumulative) {
        // Running int32 sums over the source's batch: this sample's lengths are the
        // differences from the entry before its first (its batch's sample 0 also holds
        // the leading 0), summed again over the mixture's batch.
        const auto* e = static_cast<const int32_t*>(v.data);
        int32_t prev = 0;
        if (i == 0) ++r0;
        else prev = e[r0 - 1];
        if (j == 0) vals.assign(4, 0);  // the leading 0
        int32_t sum;
        std::memcpy(&sum, vals.data() + vals.size() - 4, 4);
        for (int64_t r = r0; r < r1; ++r) {
          sum += e[r] - prev;
          prev = e[r];
          vals.insert(vals.end(), reinterpret_cast<const uint8_t*>(&sum), reinterpret_cast<const uint8_t*>(&sum) + 4);
        }
        offs[j + 1] = static_cast<int64_t>(vals.size() / 4);
        continue;
      }
      const auto* from = static_cast<const uint8_t*>(v.data) + static_cast<size_t>(r0) * o.spec.item_bytes;
      vals.insert(vals.end(), from, from + static_cast<size_t>(r1 - r0) * o.spec.item_bytes);
      offs[j + 1] = offs[j] + (r1 - r0);
    }
  }
  std::vector<TensorView> views;
  for (const Out& o : outs) {
    TensorView v;
    v.name = o.spec.name;
    v.dtype = o.spec.dtype;
    v.kind = o.spec.kind;
    if (o.var < 0) {
      v.data = lease->mem.get() + o.spec.offset;
      v.shape.push_back(static_cast<int64_t>(n));
    } else {
      std::vector<uint8_t>& vals = lease->values[static_cast<size_t>(o.var)];
      if (vals.empty()) vals.reserve(8);  // a valid pointer for an empty batch of values
      v.data = vals.data();
      v.offsets = lease->offsets[static_cast<size_t>(o.var)].data();
      v.shape.push_back(v.offsets[n]);
    }
    for (int64_t d : o.spec.shape) v.shape.push_back(d);
    views.push_back(std::move(v));
  }
  next_k++;
  batches_out++;
  samples_out += n;
  return Batch(std::move(views), std::move(lease), epoch_, k, n);
}

std::optional<Batch> MixtureFeed::next_planned_batch() {
  const uint64_t k = next_k;
  const MixtureOrder::Draw d = draw_at(sched->position(k, 0));
  auto lease = std::make_shared<PassedLease>();
  lease->batch = planned_batch(d.source, d.source_epoch, d.position);
  const Batch& b = lease->batch;
  const uint64_t n = b.size();
  lease->source.assign(n, static_cast<int64_t>(d.source));
  std::vector<TensorView> views;
  for (const Out& o : outs) {
    TensorView v;
    if (o.is_source) {
      v.name = o.spec.name;
      v.dtype = o.spec.dtype;
      v.data = lease->source.data();
      v.shape = {static_cast<int64_t>(n)};
    } else {
      v = b[src[d.source].own(o.spec.name)];
      v.name = o.spec.name;
    }
    views.push_back(std::move(v));
  }
  next_k++;
  batches_out++;
  samples_out += n;
  return Batch(std::move(views), std::move(lease), epoch_, k, n);
}

void MixtureFeed::set_epoch(uint64_t e) {
  epoch_ = e;
  start_consumed = 0;
  start();
}

OrderState MixtureFeed::state() const {
  OrderState s = OrderState::start(opt.order, order->size(), epoch_);
  s.consumed = sched->consumed_after(next_k);
  return s;
}

void MixtureFeed::load_state(const OrderState& s) {
  s.check_matches(opt.order, order->size());
  epoch_ = s.epoch;
  start_consumed = s.consumed;
  start();
}

void MixtureFeed::close() {
  for (auto& x : src) x.feed->close();  // a source's next() in progress throws kCancelled
}

LoaderStats MixtureFeed::stats() const {
  LoaderStats s;
  for (const auto& x : src) {
    const LoaderStats t = x.feed->stats();
    s.bytes_read += t.bytes_read;
    s.record_bytes += t.record_bytes;
    s.tokens = t.tokens;
    s.tokenize = s.tokenize || t.tokenize;
    // Packed sources: the padding of the rows taken from them.
    s.padding_tokens += t.padding_tokens;
    s.truncated_tokens += t.truncated_tokens;
    s.empty_samples += t.empty_samples;
    s.plan_s += t.plan_s;
    s.plan_tokenised += t.plan_tokenised;
    s.wall_s = std::max(s.wall_s, t.wall_s);
    s.decode.threads += t.decode.threads;
    s.decode.busy_s += t.decode.busy_s;
    s.decode.wait_s += t.decode.wait_s;
    s.decode.items += t.decode.items;
    s.io.threads += t.io.threads;
    s.io.busy_s += t.io.busy_s;
    s.io.wait_s += t.io.wait_s;
    s.io.items += t.io.items;
    add_tune(s.tune, t.tune, source_name(&x - src.data()));
    // Remote sources: the fetches of all of them, each through its own cache.
    s.network.add_counts(t.network);
    s.network.requests_in_flight += t.network.requests_in_flight;
    s.network.cache_bytes += t.network.cache_bytes;
    s.network.cache_limit += t.network.cache_limit;
  }
  s.batches = batches_out;
  s.samples = samples_out;
  return s;
}

}  // namespace

std::unique_ptr<Feed> open_mixture_feed(const LoaderOptions& opt, RankInfo rank) {
  return std::make_unique<MixtureFeed>(opt, rank);
}

}  // namespace stoker::internal
