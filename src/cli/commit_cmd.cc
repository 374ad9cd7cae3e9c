// `stoker commit OUT`: publish the MANIFEST of a dataset packed in parts (commit.h).
#include <cstdio>

#include "cli.h"
#include "stoker/commit.h"
#include "stoker/remote.h"

namespace stoker::cli {
namespace {

struct CommitArgs {
  std::string dir;
  bool clean = false;
};

int run_commit(const CommitArgs& a) {
  CommitOptions o;
  o.clean = a.clean;
  const CommitReport r = commit_parts(*open_dataset_store(a.dir), o);
  const char* what = r.outcome == CommitReport::Outcome::kCommitted          ? "committed"
                     : r.outcome == CommitReport::Outcome::kAlreadyCommitted ? "already committed"
                                                                            : "lost the race";
  if (r.outcome == CommitReport::Outcome::kCommitLostRace)
    std::printf("%s: another commit published %s/MANIFEST while this one ran; this one wrote nothing\n", what,
                a.dir.c_str());
  else
    std::printf("%s %s: %u parts, %llu shards, %llu records (%s) in %.2f s\n", what, a.dir.c_str(), r.parts,
                static_cast<unsigned long long>(r.shards), static_cast<unsigned long long>(r.records),
                format_bytes(static_cast<double>(r.bytes)).c_str(), r.seconds);
  if (!r.strays.empty()) {
    std::printf("  %zu stray file%s in no dataset%s:\n", r.strays.size(), r.strays.size() == 1 ? "" : "s",
                r.strays_removed ? " (removed)" : " (remove them with --clean)");
    for (const std::string& s : r.strays) std::printf("    %s\n", s.c_str());
  }
  std::fflush(stdout);
  return r.outcome == CommitReport::Outcome::kCommitLostRace ? 3 : 0;
}

void setup(CLI::App& tool) {
  auto a = std::make_shared<CommitArgs>();
  CLI::App* c = tool.add_subcommand(
      "commit",
      "Publish the MANIFEST of a dataset packed in parts (pack ... --part I/N): checks that all N parts are complete "
      "and their shard indexes sound, then merges their part manifests. Refuses, naming them, when parts are missing "
      "or incomplete; idempotent; of two concurrent commits one publishes and the other exits 3.");
  c->add_option("OUT", a->dir, "the directory the parts were packed into")->required();
  c->add_flag("--clean", a->clean, "remove the stray shard and pending files no manifest names (listed either way)");
  on_run(c, [a] { return run_commit(*a); });
}

}  // namespace

STOKER_COMMAND("commit", setup);

}  // namespace stoker::cli
