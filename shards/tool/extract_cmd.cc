// `stoker extract DATASET OUT`: records back out as files.
#include <cstdio>

#include "cli.h"
#include "stoker/dataset.h"
#include "interrupt.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

int extract_cmd(const Args& args) {
  ArgParser p(args);
  p.check_known({"threads"});
  if (p.positional().size() != 2) throw_error(ErrorCode::kInvalidArgument, "usage: stoker extract DATASET OUT");
  ExtractOptions o;
  const int64_t threads = p.get_int("threads", 0);
  if (threads < 0 || threads > 1024) throw_error(ErrorCode::kInvalidArgument, "--threads must be 0..1024");
  o.threads = static_cast<int>(threads);
  o.progress = true;
  PackSummary s;
  const int rc = run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    s = extract_dataset(p.positional()[0], p.positional()[1], o);
    return 0;
  });
  if (rc != 0) return rc;
  const double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
  std::printf("extracted %llu records from %llu shard%s into %s (%s) in %.2f s, %.1f MB/s\n",
              static_cast<unsigned long long>(s.records), static_cast<unsigned long long>(s.shards),
              s.shards == 1 ? "" : "s", p.positional()[1].c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              s.seconds, s.bytes / secs / 1e6);
  const auto& meta = read_manifest(p.positional()[0]).meta;
  if (auto it = meta.find("fast_crop"); it != meta.end() && it->second == "1") {
    std::printf("  packed with --fast-crop: the JPEGs were losslessly rewritten, so they decode to the\n"
                "  same pixels as the originals but are not byte-identical to them\n");
  }
  return 0;
}

}  // namespace

STOKER_COMMAND("extract", "DATASET OUT [--threads N]",
               "Write a dataset's records back out as files, named by their __key__ (an ImageFolder tree for images, "
               "tokens.bin for tokens).",
               extract_cmd);

}  // namespace stoker::cli
