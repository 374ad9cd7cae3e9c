// Tokenizer throughput: tokens/s of Tokenizer::encode over documents, on 1 and 2
// threads (each thread encodes every document; items/s is all threads' tokens over wall
// time, so a core's share is items/s / threads).
//
//   STOKER_BENCH_TOKENIZER=cl100k_base.tiktoken STOKER_BENCH_TEXT=docs.txt \
//     build/tokenizer_bench --benchmark_min_time=2
//
// The documents are the text file cut at blank lines. bench/text_bench.sh makes both
// files and runs the references (npm tiktoken, Hugging Face tokenizers) on the same
// documents in the same run.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "stoker/tokenizer.h"

namespace stoker {
namespace {

struct Input {
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::string> docs;
  std::string problem;
};

// The documents of a text: its runs between blank lines ("\n\n").
std::vector<std::string> documents(const std::string& text) {
  std::vector<std::string> docs;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) docs.push_back(text.substr(pos, end - pos));
    pos = end + 2;
  }
  return docs;
}

const Input& input(const char* tokenizer_env) {
  static std::map<std::string, Input> cache;
  Input& in = cache[tokenizer_env];
  if (in.tok || !in.problem.empty()) return in;
  const char* tok = std::getenv(tokenizer_env);
  const char* text = std::getenv("STOKER_BENCH_TEXT");
  if (!tok || !text) {
    in.problem = std::string("set ") + tokenizer_env + " and STOKER_BENCH_TEXT (bench/text_bench.sh does)";
    return in;
  }
  std::ifstream f(text, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  in.docs = documents(ss.str());
  in.tok = open_tokenizer(tok);
  return in;
}

void encode_all(benchmark::State& state, const char* tokenizer_env) {
  const Input& in = input(tokenizer_env);
  if (!in.problem.empty()) {
    state.SkipWithError(in.problem.c_str());
    return;
  }
  std::vector<uint32_t> ids;
  int64_t tokens = 0, bytes = 0;
  for (auto _ : state) {
    for (const std::string& d : in.docs) {
      ids.clear();
      in.tok->encode(d, ids);
      tokens += static_cast<int64_t>(ids.size());
      bytes += static_cast<int64_t>(d.size());
    }
  }
  state.SetItemsProcessed(tokens);
  state.SetBytesProcessed(bytes);
}

void BM_Tokenizer_Cl100k(benchmark::State& state) { encode_all(state, "STOKER_BENCH_TOKENIZER"); }
void BM_Tokenizer_ByteLevelJson(benchmark::State& state) { encode_all(state, "STOKER_BENCH_TOKENIZER_JSON"); }
BENCHMARK(BM_Tokenizer_Cl100k)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tokenizer_ByteLevelJson)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace stoker
