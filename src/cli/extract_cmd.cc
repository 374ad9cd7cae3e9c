// `stoker extract DATASET OUT`: records back out as files.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "interrupt.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

struct ExtractArgs {
  std::string dataset, out;
  int threads = 0;
  bool skip_bad = false;
};

int extract_cmd(const ExtractArgs& a) {
  ExtractOptions o;
  o.threads = a.threads;
  o.skip_bad = a.skip_bad;
  o.progress = true;
  PackSummary s;
  const int rc = run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    s = extract_dataset(a.dataset, a.out, o);
    return 0;
  });
  if (rc != 0) return rc;
  const double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
  std::printf("extracted %llu records from %llu shard%s into %s (%s) in %.2f s, %.1f MB/s\n",
              static_cast<unsigned long long>(s.records), static_cast<unsigned long long>(s.shards),
              s.shards == 1 ? "" : "s", a.out.c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              s.seconds, s.bytes / secs / 1e6);
  if (!s.skipped.empty()) {
    std::printf("  skipped %zu bad record%s:\n", s.skipped.size(), s.skipped.size() == 1 ? "" : "s");
    for (const std::string& line : s.skipped) std::printf("    %s\n", line.c_str());
  }
  const auto& meta = read_manifest(a.dataset).meta;
  if (auto it = meta.find("fast_crop"); it != meta.end() && it->second == "1") {
    std::printf("  packed with --fast-crop: the JPEGs were losslessly rewritten, so they decode to the\n"
                "  same pixels as the originals but are not byte-identical to them\n");
  }
  return 0;
}

void setup(CLI::App& tool) {
  auto a = std::make_shared<ExtractArgs>();
  CLI::App* c = tool.add_subcommand(
      "extract", "Write a dataset's records back out as files, named by their __key__ (an ImageFolder tree for images, "
      "tokens.bin for tokens).");
  c->add_option("DATASET", a->dataset, "dataset directory")->required();
  c->add_option("OUT", a->out, "directory to write (absent or empty; it appears only when complete)")->required();
  c->add_flag("--skip-bad", a->skip_bad, "skip records whose checksum fails (listed at the end) instead of stopping");
  c->add_option("--threads", a->threads, "threads (0: the CPUs allowed)")->check(CLI::Range(0, 1024))->capture_default_str();
  on_run(c, [a] { return extract_cmd(*a); });
}

}  // namespace

STOKER_COMMAND("extract", setup);

}  // namespace stoker::cli
