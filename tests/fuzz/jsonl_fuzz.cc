// libFuzzer target for the JSON Lines readers of `stoker pack text` and `pack samples`: any byte string must
// be read to its end or stop at a problem naming a line within it, never crash; the
// documents it hands out are the key's strings. Seed corpus: tests/fuzz/corpus/jsonl/.
//
// Build and run as tests/fuzz/tar_fuzz.cc says (target jsonl_fuzz).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pack/text_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view lines(reinterpret_cast<const char*>(data), size);
  uint64_t count = 0, docs = 0, doc_bytes = 0;
  const auto problem = stoker::internal::read_json_lines(
      lines, "text", [&](std::string_view d) { ++docs, doc_bytes += d.size(); }, count);
  uint64_t newlines = 0;
  for (char c : lines) newlines += c == '\n';
  if (count > newlines + 1 || docs > count) __builtin_trap();
  if (problem && (problem->line == 0 || problem->line > count || problem->why.empty())) __builtin_trap();
  if (doc_bytes > size) __builtin_trap();
  // pack samples' reader: lists of integers under a key, as each dtype.
  uint64_t objects = 0;
  std::vector<uint8_t> out;
  const auto bad = stoker::internal::read_json_objects(
      lines,
      [&](const nlohmann::json& j) -> std::string {
        for (auto t : {stoker::DType::kUint16, stoker::DType::kInt32, stoker::DType::kInt64}) {
          size_t n = 0;
          const std::string why = stoker::internal::json_integers(j, "tokens", t, out, &n);
          if (why.empty() && out.size() != n * stoker::dtype_size(t)) __builtin_trap();
        }
        ++objects;
        return {};
      },
      count);
  if (objects > count || (bad && bad->why.empty())) __builtin_trap();
  return 0;
}
