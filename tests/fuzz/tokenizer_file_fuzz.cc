// libFuzzer target for the tokenizer file readers (tiktoken ranks files and
// tokenizer.json): any byte string, read as either, must open or raise stoker::Error,
// never crash; a tokenizer that opens must encode text and decode it back. SentencePiece
// files are parsed by libsentencepiece (not built with the fuzzer's instrumentation) and
// are not fuzzed here. Seed corpus: tests/fuzz/corpus/tokenizer_file/.
//
// Build and run as tests/fuzz/tar_fuzz.cc says (target tokenizer_file_fuzz).
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "stoker/error.h"
#include "stoker/tokenizer.h"

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/stoker-tokenizer-fuzz-XXXXXX";
    return std::string(mkdtemp(tmpl));
  }();
  return dir;
}

void try_open(const std::string& path, const uint8_t* data, size_t size, const stoker::TokenizerOptions& o) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                               static_cast<std::streamsize>(size));
  try {
    auto tok = stoker::open_tokenizer(path, o);
    const std::string text = "Hello, wörld 🎉  <|x|> 123";
    if (tok->decode(tok->encode(text)) != text) __builtin_trap();
  } catch (const stoker::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::TokenizerOptions o;
  o.pattern = R"( ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  o.special_tokens = {{"<|x|>", 1u << 20}};
  try_open(scratch_dir() + "/f.tiktoken", data, size, o);
  try_open(scratch_dir() + "/tokenizer.json", data, size, {});
  return 0;
}
