// Padded batches under a token budget (padded_batches.h).
#include "pipeline/padded_batches.h"

#include <algorithm>
#include <cstring>

#include "stoker/error.h"
#include "util/convert.h"

namespace stoker::internal {

namespace {

// "shard: record r (source 'key')": the record's key read only for the message.
std::string sample_name(const Context& ctx, int key_field, uint64_t i) {
  auto [s, r] = ctx.dataset->locate(i);
  std::string name = ctx.record_name(s, r);
  if (key_field < 0) return name;
  try {
    const Record rec = ctx.dataset->read(i);
    const auto k = rec.fields.at(static_cast<size_t>(key_field));
    name += " (source '" + std::string(k.begin(), k.end()) + "')";
  } catch (const std::exception&) {
    // Unreadable here (a remote record not cached): the record's place names it alone.
  }
  return name;
}

}  // namespace

PaddedFacts plan_padded_batches(const LoaderOptions& opt, Context& ctx) {
  if (opt.doc_ids || opt.cu_seqlens)
    throw_error(ErrorCode::kInvalidArgument,
                std::string(opt.doc_ids ? "doc_ids" : "cu_seqlens") +
                    ": a max_tokens batch holds one sample per row; its attention_mask says where each ends");
  PaddedFacts f;
  f.fields = packed_facts(opt, ctx.dataset->schema());
  const std::vector<uint32_t> lengths = sample_lengths(ctx, f.fields);
  const PackingRules rules{0, opt.pack_window, opt.long_samples, opt.order.seed};
  const int key = f.fields.key_field;
  f.plan = std::make_shared<const TokenBatchPlan>(
      plan_token_batches(lengths, opt.max_tokens, rules, [&](uint64_t i) { return sample_name(ctx, key, i); }));

  const ElemType tt = opt.token_type_is_stored ? f.fields.stored_type : opt.token_type;
  check_token_type(tt);
  // A slot holds the budget: B x L <= max_tokens positions, and B <= max_tokens indexes.
  const int64_t M = static_cast<int64_t>(opt.max_tokens);
  f.tokens_t = ctx.add_tensor("tokens", tt, {M});
  if (opt.targets) f.targets_t = ctx.add_tensor("targets", tt, {M});
  f.attention_t = ctx.add_tensor("attention_mask", ElemType::kUint8, {M});
  f.index_t = ctx.add_tensor("index", ElemType::kInt64, {M});
  if (opt.position_ids) f.position_t = ctx.add_tensor("position_ids", ElemType::kInt32, {M});
  if (opt.loss_mask) f.mask_t = ctx.add_tensor("loss_mask", ElemType::kUint8, {M});
  return f;
}

uint64_t shape_padded_views(const PaddedFacts& f, uint64_t unit, std::vector<TensorView>& views) {
  const int64_t B = static_cast<int64_t>(f.plan->size(unit));
  const int64_t L = f.plan->width(unit);
  for (size_t t = 0; t < views.size(); ++t)
    views[t].shape = static_cast<int>(t) == f.index_t ? std::vector<int64_t>{B} : std::vector<int64_t>{B, L};
  return static_cast<uint64_t>(B);
}

namespace {

class PaddedWork final : public RecordWork {
 public:
  PaddedWork(const Context& ctx, const PaddedFacts& f) : ctx_(ctx), f_(f), plan_(*f.plan) {}

  void plan_locked(const Run& run, Job& job, std::vector<Use>& uses) const override {
    // One unit per batch: the planned batch; each of its samples one use (its row).
    const uint64_t unit = run.order->at(run.sched->position(job.k, 0));
    job.samples.assign(1, unit);
    for (uint64_t x = plan_.begin[unit]; x < plan_.begin[unit + 1]; ++x)
      uses.push_back(Use{0, plan_.samples[x], x, 1});
  }

  void prepare(Job& job) const override {
    const uint64_t unit = job.samples[0];
    const uint64_t B = plan_.size(unit);
    const uint32_t L = plan_.width(unit);
    uint64_t padding = 0;
    for (uint64_t i = 0; i < B; ++i) {
      const uint64_t x = plan_.begin[unit] + i;
      const uint32_t len = plan_.lengths[x];
      const uint32_t pad = L - len;
      const size_t at = i * L;
      padding += pad;
      const int64_t gi = static_cast<int64_t>(plan_.samples[x]);
      std::memcpy(ctx_.tensor_ptr(job, f_.index_t) + i * 8, &gi, 8);
      uint8_t* att = ctx_.tensor_ptr(job, f_.attention_t) + at;
      std::memset(att, 1, len);
      std::memset(att + len, 0, pad);
      fill_pad(job, f_.tokens_t, at + len, pad);
      fill_pad(job, f_.targets_t, at + len, pad);
      if (f_.position_t >= 0) {
        int32_t* pos = reinterpret_cast<int32_t*>(ctx_.tensor_ptr(job, f_.position_t)) + at;
        std::fill(pos + len, pos + L, 0);
      }
      if (f_.mask_t >= 0) std::memset(ctx_.tensor_ptr(job, f_.mask_t) + at + len, 0, pad);
    }
    job.padding = padding;
  }

  std::unique_ptr<Worker> worker() const override { return std::make_unique<RowWriter>(*this); }
  uint64_t records_per_batch() const override {
    const uint64_t n = std::max<uint64_t>(1, plan_.batches());
    return std::max<uint64_t>(1, (plan_.samples.size() + n - 1) / n);
  }

 private:
  // Positions [at, at + count) of a token output: pad_id.
  void fill_pad(Job& job, int t, size_t at, uint32_t count) const {
    if (t < 0 || count == 0) return;
    const ElemType dt = ctx_.tensors[static_cast<size_t>(t)].dtype;
    const size_t es = elem_size(dt);
    const int64_t id = ctx_.opt->pad_id;
    uint8_t* first = ctx_.tensor_ptr(job, t) + at * es;
    widen_tokens_le(reinterpret_cast<const uint8_t*>(&id), ElemType::kInt64, 1, dt, first);
    for (uint32_t i = 1; i < count; ++i) std::memcpy(first + i * es, first, es);
  }

  class RowWriter final : public Worker {
   public:
    explicit RowWriter(const PaddedWork& w) : w_(w) {}
    void put(const Run& /*run*/, Job& job, const Use& use, const std::vector<std::span<const uint8_t>>& fields,
             const std::string& where) override {
      const PackedFacts& f = w_.f_.fields;
      const Context& ctx = w_.ctx_;
      const TokenBatchPlan& plan = w_.plan_;
      const uint64_t unit = job.samples[0];
      const uint64_t i = use.piece - plan.begin[unit];
      const uint32_t L = plan.width(unit);
      const uint32_t len = plan.lengths[use.piece];
      const std::span<const uint8_t> toks = sample_tokens(f, fields, ids_);
      const size_t tsize = elem_size(f.stored_type);
      if (toks.size() / tsize < len) {  // not what the batches were planned for
        std::string key;
        if (f.key_field >= 0) {
          const auto k = fields[static_cast<size_t>(f.key_field)];
          key = " (source '" + std::string(k.begin(), k.end()) + "')";
        }
        throw_error(ErrorCode::kDataLoss, where + key + ": holds " + std::to_string(toks.size() / tsize) +
                                              " tokens, " + std::to_string(len) + " when the batches were planned");
      }
      const size_t at = i * L;
      const Output& to = ctx.tensors[static_cast<size_t>(w_.f_.tokens_t)];
      const size_t osize = elem_size(to.dtype);
      widen_tokens_le(toks.data(), f.stored_type, len, to.dtype, ctx.tensor_ptr(job, w_.f_.tokens_t) + at * osize);
      // Targets: one later while the sample lasts; its last token has none (pad_id, mask 0).
      const uint32_t with_target = len - 1;
      if (w_.f_.targets_t >= 0) {
        uint8_t* tg = ctx.tensor_ptr(job, w_.f_.targets_t) + at * osize;
        widen_tokens_le(toks.data() + tsize, f.stored_type, with_target, to.dtype, tg);
        w_.fill_pad(job, w_.f_.targets_t, at + with_target, 1);
      }
      if (w_.f_.position_t >= 0) {
        int32_t* pos = reinterpret_cast<int32_t*>(ctx.tensor_ptr(job, w_.f_.position_t)) + at;
        for (uint32_t k = 0; k < len; ++k) pos[k] = static_cast<int32_t>(k);
      }
      if (w_.f_.mask_t >= 0) {
        uint8_t* m = ctx.tensor_ptr(job, w_.f_.mask_t) + at;
        if (f.mask_field >= 0) {
          const uint8_t* stored = fields[static_cast<size_t>(f.mask_field)].data() + 1;
          for (uint32_t k = 0; k < with_target; ++k) m[k] = stored[k] != 0;
        } else {
          std::memset(m, 1, with_target);
        }
        m[with_target] = 0;
      }
    }

   private:
    const PaddedWork& w_;
    std::vector<uint32_t> ids_;  // a text document's ids
  };

  const Context& ctx_;
  const PaddedFacts f_;
  const TokenBatchPlan& plan_;
};

}  // namespace

std::unique_ptr<RecordWork> make_padded_work(const Context& ctx, const PaddedFacts& facts) {
  return std::make_unique<PaddedWork>(ctx, facts);
}

}  // namespace stoker::internal
