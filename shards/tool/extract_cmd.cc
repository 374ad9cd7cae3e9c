// `stoker extract DATASET OUT`: records back out as files.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

struct ExtractArgs {
  std::string dataset, out;
  int threads = 0;
};

int extract_cmd(const ExtractArgs& a) {
  ExtractOptions o;
  o.threads = a.threads;
  o.progress = true;
  PackSummary s = extract_dataset(a.dataset, a.out, o);
  const double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
  std::printf("extracted %llu records from %llu shard%s into %s (%s) in %.2f s, %.1f MB/s\n",
              static_cast<unsigned long long>(s.records), static_cast<unsigned long long>(s.shards),
              s.shards == 1 ? "" : "s", a.out.c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              s.seconds, s.bytes / secs / 1e6);
  return 0;
}

void setup(CLI::App& tool) {
  auto a = std::make_shared<ExtractArgs>();
  CLI::App* c = tool.add_subcommand(
      "extract", "Write a dataset's records back out as files (an ImageFolder tree for images, tokens.bin for tokens).");
  c->add_option("DATASET", a->dataset, "dataset directory")->required();
  c->add_option("OUT", a->out, "directory to write")->required();
  c->add_option("--threads", a->threads, "threads (0: the CPUs allowed)")->check(CLI::Range(0, 1024))->capture_default_str();
  on_run(c, [a] { return extract_cmd(*a); });
}

}  // namespace

STOKER_COMMAND("extract", setup);

}  // namespace stoker::cli
