// libFuzzer target for the JSON Lines reader of `stoker pack text`: any byte string must
// be read to its end or stop at a problem naming a line within it, never crash; the
// documents it hands out are the key's strings. Seed corpus: tests/fuzz/corpus/jsonl/.
//
// Build and run as tests/fuzz/tar_fuzz.cc says (target jsonl_fuzz).
#include <cstddef>
#include <cstdint>
#include <string_view>

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
  return 0;
}
