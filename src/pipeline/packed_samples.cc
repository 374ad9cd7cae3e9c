// Packed samples through the record producer (packed_samples.h).
#include "pipeline/packed_samples.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>

#include "pipeline/token_counts.h"
#include "stoker/error.h"
#include "util/convert.h"

namespace stoker::internal {

namespace {

int packed_field(const Schema& schema, const char* name) {
  const int i = schema.find(name);
  if (i < 0) return -1;
  const Field& f = schema.fields[static_cast<size_t>(i)];
  return f.kind == FieldKind::kVarArray && f.shape.empty() ? i : -2;
}

}  // namespace

namespace {

// The records' text field: `name`, or the one text field besides `__key__`.
int text_field(const LoaderOptions& opt, const Schema& schema) {
  if (!opt.text_field.empty()) {
    const int i = schema.find(opt.text_field);
    if (i < 0 || schema.fields[static_cast<size_t>(i)].kind != FieldKind::kText)
      throw_error(ErrorCode::kInvalidArgument, "text_field: " + opt.path + " has no text field '" + opt.text_field +
                                                   "' (schema " + schema.to_string() + ")");
    return i;
  }
  int found = -1;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& fd = schema.fields[i];
    if (fd.kind != FieldKind::kText || fd.name == kKeyField) continue;
    if (found >= 0)
      throw_error(ErrorCode::kInvalidArgument, "tokenizer: " + opt.path + " has several text fields (schema " +
                                                   schema.to_string() + "); name one with text_field");
    found = static_cast<int>(i);
  }
  if (found < 0)
    throw_error(ErrorCode::kInvalidArgument, "tokenizer: " + opt.path + " has no text field to tokenise (schema " +
                                                 schema.to_string() + ")");
  return found;
}

}  // namespace

std::span<const uint8_t> sample_tokens(const PackedFacts& f, const std::vector<std::span<const uint8_t>>& fields,
                                       std::vector<uint32_t>& ids) {
  if (!f.tokenizer) return fields[static_cast<size_t>(f.tokens_field)];
  ids.clear();
  document_ids(f, fields[static_cast<size_t>(f.text_field)], ids);
  return {reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * 4};
}

void document_ids(const PackedFacts& f, std::span<const uint8_t> text, std::vector<uint32_t>& out) {
  if (f.bos) out.push_back(*f.bos);
  f.tokenizer->encode(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), out);
  if (f.eos) out.push_back(*f.eos);
}

PackedFacts packed_facts(const LoaderOptions& opt, const Schema& schema) {
  PackedFacts f;
  f.key_field = schema.key_field();
  if (!opt.tokenizer.empty()) {
    f.text_field = text_field(opt, schema);
    f.tokenizer = open_tokenizer(opt.tokenizer, opt.tokenizer_options);
    f.tokenizer_path = opt.tokenizer;
    f.tokenizer_options = opt.tokenizer_options;
    f.token_counts_dir = token_counts_dir(opt.token_counts_dir);
    f.bos = opt.bos;
    f.eos = opt.eos;
    for (const auto& id : {opt.bos, opt.eos})
      if (id && *id >= f.tokenizer->vocab_size())
        throw_error(ErrorCode::kInvalidArgument, "bos/eos id " + std::to_string(*id) + " is not below " +
                                                     opt.tokenizer + "'s vocabulary size " +
                                                     std::to_string(f.tokenizer->vocab_size()));
    f.stored_type = ElemType::kUint32;
    return f;
  }
  f.tokens_field = packed_field(schema, "tokens");
  const auto stored =
      f.tokens_field >= 0 ? elem_type_of(schema.fields[static_cast<size_t>(f.tokens_field)].dtype) : std::nullopt;
  if (!stored || !is_token_type(*stored))
    throw_error(ErrorCode::kInvalidArgument,
                std::string(opt.max_tokens ? "max_tokens: padded batches of samples need" : "seq_len: packing samples into rows needs") +
                " records with a 1-D var-array field 'tokens' of uint16, "
                "uint32, int32 or int64 (or text and a tokenizer), and " + opt.path + " has schema " +
                    schema.to_string());
  f.stored_type = *stored;
  f.mask_field = packed_field(schema, "loss_mask");
  if (f.mask_field >= 0) {
    const DType md = schema.fields[static_cast<size_t>(f.mask_field)].dtype;
    if (md != DType::kUint8 && md != DType::kBool) f.mask_field = -2;
  }
  if (f.mask_field == -2)
    throw_error(ErrorCode::kInvalidArgument, opt.path + ": the field 'loss_mask' must be a 1-D uint8 or bool "
                                                        "var-array (one 0/1 per token), schema " + schema.to_string());
  return f;
}

std::vector<uint32_t> sample_lengths(const Context& ctx, PackedFacts& f) {
  const Dataset& dataset = *ctx.dataset;
  std::vector<uint32_t> lengths;
  if (f.tokenizer) {
    TokenCounts counts = document_token_counts(
        ctx, TokenCountsOf{f.text_field, f.tokenizer.get(), f.tokenizer_path, f.tokenizer_options}, f.token_counts_dir);
    const uint32_t around = (f.bos ? 1u : 0u) + (f.eos ? 1u : 0u);
    for (uint32_t& n : counts.counts) n = n > UINT32_MAX - around ? UINT32_MAX : n + around;
    lengths = std::move(counts.counts);
    f.counts = std::move(counts.report);
  } else {
    const size_t tok = static_cast<size_t>(f.tokens_field);
    const uint64_t tsize = elem_size(f.stored_type);
    lengths.reserve(dataset.record_count());
    for_each_record_location(ctx, [&](size_t s, uint64_t r, const RecordLocation& loc) {
      const uint64_t n = loc.field_sizes[tok] / tsize;
      if (f.mask_field >= 0 && loc.field_sizes[static_cast<size_t>(f.mask_field)] != n)
        throw_error(ErrorCode::kDataLoss, ctx.record_name(s, r) + ": 'loss_mask' has " +
                                              std::to_string(loc.field_sizes[static_cast<size_t>(f.mask_field)]) +
                                              " entries for " + std::to_string(n) + " tokens");
      lengths.push_back(static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX)));
    });
  }
  return lengths;
}

PackedFacts plan_packed_samples(const LoaderOptions& opt, Context& ctx) {
  const Dataset& dataset = *ctx.dataset;
  PackedFacts f = packed_facts(opt, dataset.schema());
  const std::vector<uint32_t> lengths = sample_lengths(ctx, f);
  PackingRules rules{opt.seq_len, opt.pack_window, opt.long_samples, opt.order.seed};
  f.plan = std::make_shared<const PackPlan>(plan_packing(lengths, rules, [&](uint64_t i) {
    auto [s, r] = dataset.locate(i);
    return ctx.record_name(s, r);
  }));

  const ElemType tt = opt.token_type_is_stored ? f.stored_type : opt.token_type;
  check_token_type(tt);
  const int64_t N = opt.seq_len;
  f.tokens_t = ctx.add_tensor("tokens", tt, {N});
  if (opt.targets) f.targets_t = ctx.add_tensor("targets", tt, {N});
  f.index_t = ctx.add_tensor("index", ElemType::kInt64, {});
  if (opt.position_ids) f.position_t = ctx.add_tensor("position_ids", ElemType::kInt32, {N});
  if (opt.loss_mask) f.mask_t = ctx.add_tensor("loss_mask", ElemType::kUint8, {N});
  if (opt.doc_ids) f.doc_ids_t = ctx.add_tensor("doc_ids", ElemType::kInt32, {N});
  if (opt.cu_seqlens) {
    Output v = Output::variable("cu_seqlens", TensorKind::kRagged, ElemType::kInt32, {});
    v.cumulative = true;
    f.seqlens_var = ctx.add_var(std::move(v));
  }
  f.samples_var = ctx.add_var(Output::variable("sample_index", TensorKind::kRagged, ElemType::kInt64, {}));
  return f;
}

namespace {

class PackedWork final : public RecordWork {
 public:
  PackedWork(const Context& ctx, const PackedFacts& f) : ctx_(ctx), f_(f), plan_(*f.plan), N_(plan_.seq_len) {}

  void plan_locked(const Run& run, Job& job, std::vector<Use>& uses) const override {
    // Every piece of the batch, grouped by sample: one use (one read, one tokenising) per
    // sample, however many of the batch's rows hold a piece of it.
    struct Ref {
      uint64_t sample;
      uint32_t j;
      uint64_t piece;
    };
    std::vector<Ref> refs;
    for (uint64_t j = 0; j < job.samples.size(); ++j) {
      const uint64_t row = run.order->at(run.sched->position(job.k, j));
      job.samples[j] = row;
      for (uint64_t p = plan_.row_begin[row]; p < plan_.row_begin[row + 1]; ++p)
        refs.push_back(Ref{plan_.pieces[p].sample, static_cast<uint32_t>(j), p});
    }
    std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) {
      return a.sample != b.sample ? a.sample < b.sample : a.piece < b.piece;
    });
    job.refs.clear();
    for (size_t i = 0; i < refs.size(); ++i) {
      if (i == 0 || refs[i].sample != refs[i - 1].sample)
        uses.push_back(Use{refs[i].j, refs[i].sample, job.refs.size(), 0});
      job.refs.emplace_back(refs[i].j, refs[i].piece);
      uses.back().count++;
    }
  }

  void prepare(Job& job) const override {
    uint64_t padding = 0;
    for (uint32_t j = 0; j < job.samples.size(); ++j) {
      const uint64_t row = job.samples[j];
      const auto pieces = plan_.row(row);
      const uint32_t used = plan_.used(row);
      const uint32_t pad = N_ - used;
      padding += pad;
      const int64_t gi = static_cast<int64_t>(row);
      std::memcpy(ctx_.tensor_ptr(job, f_.index_t) + j * 8, &gi, 8);
      fill_tokens(job, f_.tokens_t, j, used, pad);
      fill_tokens(job, f_.targets_t, j, used, pad);
      if (f_.position_t >= 0) {
        int32_t* pos = reinterpret_cast<int32_t*>(ctx_.tensor_ptr(job, f_.position_t)) + size_t{j} * N_;
        for (uint32_t i = 0; i < pad; ++i) pos[used + i] = static_cast<int32_t>(i);
      }
      if (f_.mask_t >= 0) std::memset(ctx_.tensor_ptr(job, f_.mask_t) + size_t{j} * N_ + used, 0, pad);
      if (f_.doc_ids_t >= 0) {
        int32_t* ids = reinterpret_cast<int32_t*>(ctx_.tensor_ptr(job, f_.doc_ids_t)) + size_t{j} * N_;
        std::fill(ids + used, ids + N_, static_cast<int32_t>(pieces.size()));
      }
      if (f_.seqlens_var >= 0) {
        auto& v = job.var[static_cast<size_t>(f_.seqlens_var)][j];
        v.clear();
        for (const PackedPiece& p : pieces) append(v, static_cast<int32_t>(p.len));
        if (pad > 0) append(v, static_cast<int32_t>(pad));
      }
      auto& sv = job.var[static_cast<size_t>(f_.samples_var)][j];
      sv.clear();
      for (const PackedPiece& p : pieces) append(sv, static_cast<int64_t>(p.sample));
    }
    job.padding = padding;
  }

  std::unique_ptr<Worker> worker() const override { return std::make_unique<PieceWriter>(*this); }
  uint64_t records_per_batch() const override {
    const uint64_t rows = std::max<uint64_t>(1, plan_.rows());
    return ctx_.opt->batch_size * std::max<uint64_t>(1, (plan_.pieces.size() + rows - 1) / rows);
  }

 private:
  template <typename T>
  static void append(std::vector<uint8_t>& v, T x) {
    const size_t at = v.size();
    v.resize(at + sizeof(T));
    std::memcpy(v.data() + at, &x, sizeof(T));
  }
  // Padding positions [used, used + pad) of row j of a token output: pad_id.
  void fill_tokens(Job& job, int t, uint32_t j, uint32_t used, uint32_t pad) const {
    if (t < 0 || pad == 0) return;
    const Output& o = ctx_.tensors[static_cast<size_t>(t)];
    const int64_t id = ctx_.opt->pad_id;
    const size_t es = elem_size(o.dtype);
    uint8_t* first = ctx_.tensor_ptr(job, t) + j * o.item_bytes + size_t{used} * es;
    widen_tokens_le(reinterpret_cast<const uint8_t*>(&id), ElemType::kInt64, 1, o.dtype, first);
    for (uint32_t i = 1; i < pad; ++i) std::memcpy(first + i * es, first, es);
  }

  class PieceWriter final : public Worker {
   public:
    explicit PieceWriter(const PackedWork& w) : w_(w) {}
    void put(const Run& /*run*/, Job& job, const Use& use, const std::vector<std::span<const uint8_t>>& fields,
             const std::string& where) override {
      const PackedFacts& f = w_.f_;
      std::span<const uint8_t> toks;
      std::shared_ptr<const std::vector<uint32_t>> kept;
      // A split document's rows are one group of consecutive positions, which may
      // straddle batches: the ids of the last few such documents are kept, so each is
      // tokenised about once. Other samples go through this worker's own buffer.
      if (split_document(job, use)) {
        kept = w_.recent_.get(use.record, [&] {
          auto ids = std::make_shared<std::vector<uint32_t>>();
          document_ids(f, fields[static_cast<size_t>(f.text_field)], *ids);
          return ids;
        });
        toks = {reinterpret_cast<const uint8_t*>(kept->data()), kept->size() * 4};
      } else {
        toks = sample_tokens(f, fields, ids_);
      }
      const std::span<const uint8_t> mask =
          f.mask_field >= 0 ? fields[static_cast<size_t>(f.mask_field)] : std::span<const uint8_t>{};
      for (uint32_t x = 0; x < use.count; ++x) {
        const auto [j, piece] = job.refs[use.piece + x];
        const PackedPiece& p = w_.plan_.pieces[piece];
        if (toks.size() / elem_size(f.stored_type) < p.end) {  // not what the rows were planned for
          std::string key;
          if (f.key_field >= 0) {
            const auto k = fields[static_cast<size_t>(f.key_field)];
            key = " (source '" + std::string(k.begin(), k.end()) + "')";
          }
          throw_error(ErrorCode::kDataLoss, where + key + ": holds " +
                                                std::to_string(toks.size() / elem_size(f.stored_type)) + " tokens, " +
                                                std::to_string(p.end) + " when the rows were planned");
        }
        write_piece(job, j, piece, p, toks, mask);
      }
    }

    bool would_wait(const Job& job, const Use& use) const override {
      return split_document(job, use) && w_.recent_.in_progress(use.record);
    }

   private:
    bool split_document(const Job& job, const Use& use) const {
      return w_.f_.tokenizer && w_.plan_.pieces[job.refs[use.piece].second].end > w_.N_;
    }
    // Piece `p` (plan index `piece`) of row j: its tokens and targets, and per position
    // the sample's position, its place in the row and the mask of its target.
    void write_piece(Job& job, uint32_t j, uint64_t piece, const PackedPiece& p, std::span<const uint8_t> toks,
                     std::span<const uint8_t> mask) const {
      const PackedFacts& f = w_.f_;
      const Context& ctx = w_.ctx_;
      const size_t tsize = elem_size(f.stored_type);
      const uint32_t N = w_.N_;
      // Inputs: the piece's tokens; targets: one later, while the sample lasts.
      const Output& to = ctx.tensors[static_cast<size_t>(f.tokens_t)];
      const size_t osize = elem_size(to.dtype);
      widen_tokens_le(toks.data() + size_t{p.start} * tsize, f.stored_type, p.len, to.dtype,
                      ctx.tensor_ptr(job, f.tokens_t) + j * to.item_bytes + size_t{p.at} * osize);
      const uint32_t with_target = std::min(p.len, p.end - p.start - 1);  // the sample's last input has none
      if (f.targets_t >= 0) {
        uint8_t* tg = ctx.tensor_ptr(job, f.targets_t) + j * to.item_bytes + size_t{p.at} * osize;
        widen_tokens_le(toks.data() + size_t{p.start + 1} * tsize, f.stored_type, with_target, to.dtype, tg);
        if (with_target < p.len) {
          const int64_t id = ctx.opt->pad_id;
          widen_tokens_le(reinterpret_cast<const uint8_t*>(&id), ElemType::kInt64, 1, to.dtype,
                          tg + size_t{with_target} * osize);
        }
      }
      const size_t row_at = size_t{j} * N + p.at;
      if (f.position_t >= 0) {
        int32_t* pos = reinterpret_cast<int32_t*>(ctx.tensor_ptr(job, f.position_t)) + row_at;
        const uint32_t first = ctx.opt->position_ids_from_row_start ? 0 : p.start;
        for (uint32_t i = 0; i < p.len; ++i) pos[i] = static_cast<int32_t>(first + i);
      }
      if (f.mask_t >= 0) {
        uint8_t* m = ctx.tensor_ptr(job, f.mask_t) + row_at;
        if (!mask.empty()) {
          const uint8_t* stored = mask.data() + p.start + 1;
          for (uint32_t i = 0; i < with_target; ++i) m[i] = stored[i] != 0;
        } else {
          std::memset(m, 1, with_target);
        }
        if (with_target < p.len) m[with_target] = 0;
      }
      if (f.doc_ids_t >= 0) {
        int32_t* ids = reinterpret_cast<int32_t*>(ctx.tensor_ptr(job, f.doc_ids_t)) + row_at;
        std::fill(ids, ids + p.len, static_cast<int32_t>(piece - w_.plan_.row_begin[job.samples[j]]));
      }
    }

    const PackedWork& w_;
    std::vector<uint32_t> ids_;  // a text document's ids
  };

  // The ids of the last few split documents tokenised (any thread). A document another
  // decoder is tokenising is waited for, not tokenised twice: two decoders often reach
  // the rows of one long document together.
  class RecentDocuments {
   public:
    using Ids = std::shared_ptr<const std::vector<uint32_t>>;
    explicit RecentDocuments(size_t capacity) : capacity_(capacity) {}
    /// The ids of `record`: kept, being made by another thread, or made here by make()
    /// (whose error, if it throws, every thread waiting for it gets).
    template <typename Make>
    Ids get(uint64_t record, Make&& make) {
      std::shared_future<Ids> ids;
      std::promise<Ids> mine;
      bool ours = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [r, f] : docs_)
          if (r == record) ids = f;
        if (!ids.valid()) {
          ids = mine.get_future().share();
          ours = true;
          docs_.emplace_back(record, ids);
          if (docs_.size() > capacity_) docs_.pop_front();
        }
      }
      if (ours) {
        try {
          mine.set_value(make());
        } catch (...) {
          mine.set_exception(std::current_exception());
        }
      }
      return ids.get();
    }
    /// Whether another thread is making the ids of `record` now.
    bool in_progress(uint64_t record) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [r, f] : docs_)
        if (r == record) return f.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
      return false;
    }

   private:
    std::mutex mu_;
    size_t capacity_;
    std::deque<std::pair<uint64_t, std::shared_future<Ids>>> docs_;
  };

  const Context& ctx_;
  const PackedFacts f_;
  const PackPlan& plan_;
  const uint32_t N_;
  mutable RecentDocuments recent_{2 * std::max(1u, ctx_.threads) + 2};
};

}  // namespace

std::unique_ptr<RecordWork> make_packed_work(const Context& ctx, const PackedFacts& facts) {
  return std::make_unique<PackedWork>(ctx, facts);
}

}  // namespace stoker::internal
