// libFuzzer target for encoding: any byte string, tokenised with cl100k_base's pattern
// over a small ranks file (every byte and some merges), must give ids that decode to
// the text with its invalid UTF-8 replaced (U+FFFD per maximal subpart), with special
// tokens allowed or not. Exercises the UTF-8 repair, PCRE2 splitting on arbitrary
// valid UTF-8, both merge loops (short and long pieces) and the special-token cutter.
// Seed corpus: tests/fuzz/corpus/tokenize/.
//
// Build and run as tests/fuzz/tar_fuzz.cc says (target tokenize_fuzz).
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "stoker/tokenizer.h"
#include "text/tiktoken_file.h"
#include "text/utf8_repair.h"
#include "util/base64.h"

namespace {

using stoker::testing::base64;

const stoker::Tokenizer& tokenizer() {
  static const std::unique_ptr<stoker::Tokenizer> tok = [] {
    char tmpl[] = "/tmp/stoker-tokenize-fuzz-XXXXXX";
    const std::string path = std::string(mkdtemp(tmpl)) + "/small.tiktoken";
    std::ofstream f(path);
    uint32_t rank = 0;
    for (int b = 0; b < 256; ++b) f << base64(std::string(1, static_cast<char>(b))) << ' ' << rank++ << '\n';
    for (const char* t : {"  ", "    ", "aa", "aaaa", "th", "the", " the", "\xc3\xa9", "\n\n", "<|", "|>"})
      f << base64(t) << ' ' << rank++ << '\n';
    f.close();
    stoker::TokenizerOptions o;
    o.pattern = std::string(stoker::internal::find_known_encoding("cl100k_base")->pattern);
    o.special_tokens = {{"<|endoftext|>", 1000}, {"<|end", 1001}};
    return stoker::open_tokenizer(path, o);
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string scratch;
  const std::string want(stoker::internal::repair_utf8(text, scratch));
  const stoker::Tokenizer& tok = tokenizer();
  if (tok.decode(tok.encode(text, stoker::SpecialTokens::every())) != want) __builtin_trap();
  // cl100k_base's pattern matches every character, so nothing is dropped.
  if (tok.decode(tok.encode(text)) != want) __builtin_trap();
  return 0;
}
