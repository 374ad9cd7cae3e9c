// Document boundaries for pack_tokens (token_docs.h).
#include "pack/token_docs.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "stoker/error.h"

namespace stoker::internal {

namespace {

template <typename T>
void scan_eos(const uint8_t* p, size_t n, T eos, uint64_t first, std::vector<uint64_t>& starts) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    if (v == eos) starts.push_back(first + i + 1);
  }
}

}  // namespace

std::vector<uint64_t> eos_doc_starts(const StreamReader& read, uint64_t tokens, DType dtype, int64_t eos,
                                     const std::string& file) {
  int64_t lo = 0, hi = 0;
  switch (dtype) {
    case DType::kUint16: hi = 0xFFFF; break;
    case DType::kUint32: hi = 0xFFFFFFFFll; break;
    case DType::kInt32: lo = INT32_MIN, hi = INT32_MAX; break;
    case DType::kInt64: lo = INT64_MIN, hi = INT64_MAX; break;
    default: throw_error(ErrorCode::kInvalidArgument, file + ": --eos needs uint16, uint32, int32 or int64 tokens");
  }
  if (eos < lo || eos > hi)
    throw_error(ErrorCode::kInvalidArgument, file + ": --eos " + std::to_string(eos) + " is not a " +
                                                 dtype_name(dtype) + " token");
  std::vector<uint64_t> starts{0};
  const size_t elem = dtype_size(dtype);
  constexpr uint64_t kPiece = 1 << 22;  // tokens per read
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(tokens, kPiece) * elem));
  for (uint64_t first = 0; first < tokens; first += kPiece) {
    const uint64_t n = std::min(kPiece, tokens - first);
    read(first, n, buf.data());
    switch (dtype) {
      case DType::kUint16: scan_eos<uint16_t>(buf.data(), n, static_cast<uint16_t>(eos), first, starts); break;
      case DType::kUint32: scan_eos<uint32_t>(buf.data(), n, static_cast<uint32_t>(eos), first, starts); break;
      case DType::kInt32: scan_eos<int32_t>(buf.data(), n, static_cast<int32_t>(eos), first, starts); break;
      default: scan_eos<int64_t>(buf.data(), n, eos, first, starts); break;
    }
  }
  // An id that never occurs would make the whole stream one document, silently: most
  // likely the wrong id (or the tokenizer's BOS).
  if (starts.size() == 1)
    throw_error(ErrorCode::kInvalidArgument, file + ": --eos " + std::to_string(eos) + " never occurs in its " +
                                                 std::to_string(tokens) + " " + dtype_name(dtype) +
                                                 " tokens; check the end-of-document id of the tokenizer");
  if (starts.back() >= tokens) starts.pop_back();  // an EOS as the last token starts nothing
  return starts;
}

std::vector<uint64_t> megatron_doc_starts(const MegatronIndex& idx) {
  std::vector<uint64_t> seq_at(idx.sizes.size() + 1, 0);  // stream position of each sequence
  for (size_t i = 0; i < idx.sizes.size(); ++i) seq_at[i + 1] = seq_at[i] + static_cast<uint64_t>(idx.sizes[i]);
  const uint64_t total = seq_at.back();
  std::vector<uint64_t> starts;
  for (int64_t d : idx.doc_idx) {
    const uint64_t p = seq_at.at(static_cast<size_t>(d));
    if (p >= total && !starts.empty()) break;  // the end, or empty documents at it
    if (starts.empty() || p > starts.back()) starts.push_back(p);  // an empty document folds into the next
  }
  if (starts.empty() || starts[0] != 0) starts.insert(starts.begin(), 0);
  return starts;
}

std::vector<uint8_t> record_doc_starts(const std::vector<uint64_t>& starts, uint64_t begin, uint64_t end,
                                       const std::string& file) {
  // The last start at or before `begin`, then every start in (begin, end].
  auto it = std::upper_bound(starts.begin(), starts.end(), begin);
  const uint64_t back = begin - *(it - 1);
  // Readers take every position in the record to be at most end - (the first entry).
  if (end - *(it - 1) > static_cast<uint64_t>(INT32_MAX))
    throw_error(ErrorCode::kInvalidArgument,
                file + ": the document holding token " + std::to_string(begin) + " started " + std::to_string(back) +
                    " tokens before it: positions in documents this long pass what int32 holds; with --eos: is the "
                    "id right?");
  std::vector<uint8_t> out;
  auto put = [&](int64_t v) {
    const uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(v));
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(u >> (8 * i)));
  };
  put(-static_cast<int64_t>(back));
  for (; it != starts.end() && *it <= end; ++it) put(static_cast<int64_t>(*it - begin));
  return out;
}

}  // namespace stoker::internal
