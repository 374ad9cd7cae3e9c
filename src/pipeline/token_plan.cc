// Token data's plan (producer.h: plan_token_rows, plan_token_outputs): the rows and
// records of the shard indexes, and the outputs LoaderOptions asks for — tokens,
// targets, index, and the document outputs of datasets packed with boundaries.
#include <algorithm>

#include "pipeline/producer.h"

namespace stoker::internal {

int tokens_field(const Schema& schema) {
  for (size_t i = 0; i < schema.fields.size(); ++i)
    if (schema.fields[i].kind == FieldKind::kTokens) return static_cast<int>(i);
  return -1;
}

void for_each_shard_at_hand(const Context& ctx, size_t shards, const std::function<void(size_t, uint64_t)>& fn) {
  const Dataset& dataset = *ctx.dataset;
  uint64_t first = 0;
  for (size_t s = 0; s < shards; ++s) {
    // A remote dataset: one shard at a time in the cache, its reader closed before the
    // pin goes (see cached_shards.h).
    ShardCache::Pin pin;
    if (ctx.cached) pin = ctx.cached->pin(s);
    struct Close {
      const Dataset& d;
      size_t s;
      bool remote;
      ~Close() {
        if (remote) d.close_shard(s);
      }
    } close{dataset, s, ctx.cached != nullptr};
    fn(s, first);
    first += dataset.manifest().shards[s].records;
  }
}

void for_each_record_location(const Context& ctx,
                              const std::function<void(size_t, uint64_t, const RecordLocation&)>& fn) {
  for_each_shard_at_hand(ctx, ctx.dataset->shard_count(), [&](size_t s, uint64_t) {
    auto r = ctx.dataset->shard(s);
    for (uint64_t i = 0; i < r->record_count(); ++i) fn(s, i, r->location(i));
  });
}

std::vector<uint64_t> plan_token_rows(const Context& ctx, TokenFacts& tok) {
  const Field& f = ctx.dataset->schema().fields[static_cast<size_t>(tok.field)];
  tok.seq_len = f.seq_len;
  tok.row_bytes = (static_cast<size_t>(tok.seq_len) + 1) * dtype_size(f.dtype);
  std::vector<uint64_t> groups;
  // Units are rows; groups are records (one per compressed chunk).
  for_each_record_location(ctx, [&](size_t, uint64_t, const RecordLocation& loc) {
    groups.push_back(loc.field_sizes[static_cast<size_t>(tok.field)] / tok.row_bytes);
    tok.capacity = std::max<size_t>(tok.capacity, loc.raw_size);
    tok.largest_stored = std::max<uint64_t>(tok.largest_stored, loc.stored_size);
  });
  return groups;
}

void plan_token_outputs(const LoaderOptions& opt, const Schema& schema, TokenFacts& tok, Context& ctx) {
  const Field& f = schema.fields[static_cast<size_t>(tok.field)];
  ElemType tt = opt.token_type_is_stored ? elem_type_of(f.dtype).value_or(ElemType::kUint8) : opt.token_type;
  if (tt != ElemType::kUint16 && tt != ElemType::kUint32 && tt != ElemType::kInt32 && tt != ElemType::kInt64)
    throw_error(ErrorCode::kInvalidArgument, "token_type must be uint16, uint32, int32 or int64");
  tok.tokens_t = ctx.add_tensor("tokens", tt, {static_cast<int64_t>(tok.seq_len)});
  if (opt.targets) tok.targets_t = ctx.add_tensor("targets", tt, {static_cast<int64_t>(tok.seq_len)});
  tok.index_t = ctx.add_tensor("index", ElemType::kInt64, {});
  if (!(opt.position_ids || opt.loss_mask || opt.doc_ids || opt.cu_seqlens)) return;
  const int d = schema.find("doc_starts");
  if (d < 0 || schema.fields[static_cast<size_t>(d)].kind != FieldKind::kVarArray ||
      schema.fields[static_cast<size_t>(d)].dtype != DType::kInt32)
    throw_error(ErrorCode::kInvalidArgument,
                opt.path + ": position_ids, loss_mask, doc_ids and cu_seqlens need document boundaries, which "
                           "this dataset was packed without; pack it with `stoker pack tokens FILE OUT --eos ID` "
                           "(or from a Megatron .bin/.idx pair)");
  tok.docs_field = d;
  const int64_t N = tok.seq_len;
  if (opt.position_ids) tok.position_t = ctx.add_tensor("position_ids", ElemType::kInt32, {N});
  // uint8, not bool: the torch of Debian 12 takes no bool tensors over DLPack.
  if (opt.loss_mask) tok.mask_t = ctx.add_tensor("loss_mask", ElemType::kUint8, {N});
  if (opt.doc_ids) tok.doc_ids_t = ctx.add_tensor("doc_ids", ElemType::kInt32, {N});
  if (opt.cu_seqlens) {
    Output v = Output::variable("cu_seqlens", TensorKind::kRagged, ElemType::kInt32, {});
    v.cumulative = true;
    tok.seqlens_var = ctx.add_var(std::move(v));
  }
}

}  // namespace stoker::internal
