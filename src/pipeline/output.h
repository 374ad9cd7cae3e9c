// Output: one output of a Loader's batches, planned when the Loader opens, before any
// batch. The one description of an output for both feeds (a dataset's, a mixture's)
// and for the producers that fill a dataset's slots.
//
// A dense output holds one fixed-shape value per sample, laid out in a batch's memory at
// `offset`; any other kind (text, bytes, variable-length arrays) is gathered per sample
// and goes out as values + B + 1 offsets.
//
// Threading: a plain value, fixed once planned; read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stoker/batch.h"

namespace stoker::internal {

struct Output {
  std::string name;
  TensorKind kind = TensorKind::kDense;
  ElemType dtype = ElemType::kUint8;
  /// Dense: one sample's shape (without the batch dimension). Otherwise: the shape after
  /// the first dimension (empty for text and bytes).
  std::vector<int64_t> shape;
  /// Dense: one sample's bytes. Otherwise: bytes of one row of the first dimension.
  size_t item_bytes = 0;
  /// Dense: where the batch's values start in its memory (a ring slot, a mixture's
  /// batch), set when that memory is laid out.
  size_t offset = 0;
  /// Out as one int32 array [total + 1] (kRagged): 0, then the running sum of every
  /// sample's int32 values, in sample order (cu_seqlens).
  bool cumulative = false;

  static Output dense(std::string name, ElemType dtype, std::vector<int64_t> shape) {
    return Output(std::move(name), TensorKind::kDense, dtype, std::move(shape));
  }
  static Output variable(std::string name, TensorKind kind, ElemType dtype, std::vector<int64_t> inner) {
    return Output(std::move(name), kind, dtype, std::move(inner));
  }
  /// Same kind, dtype, shape and summing: one can stand for the other.
  bool same_layout(const Output& o) const noexcept {
    return kind == o.kind && dtype == o.dtype && shape == o.shape && cumulative == o.cumulative;
  }

  Output() = default;

 private:
  Output(std::string n, TensorKind k, ElemType t, std::vector<int64_t> s)
      : name(std::move(n)), kind(k), dtype(t), shape(std::move(s)), item_bytes(elem_size(t)) {
    for (int64_t d : shape) item_bytes *= static_cast<size_t>(d);
  }
};

}  // namespace stoker::internal
