// `stoker verify PATH...`: checks every checksum; one line per problem.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "stoker/verify.h"

namespace stoker::cli {
namespace {

int run_verify(const Args& args) {
  ArgParser p(args, {"quiet"});
  p.check_known({"quiet", "threads"});
  if (p.positional().empty()) {
    std::cerr << "usage: stoker verify PATH... (dataset directories or shard files)\n";
    return 2;
  }
  const bool tty = ::isatty(2) && !p.flag("quiet");
  const unsigned threads = static_cast<unsigned>(p.get_int("threads", 0));
  size_t problems = 0;
  uint64_t records = 0, shards = 0, bytes = 0, fast_crop = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (const std::string& path : p.positional()) {
    auto last = std::chrono::steady_clock::now();
    VerifyReport r = verify_path(path, threads, [&](uint64_t done) {
      if (!tty) return;
      auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(200)) return;
      last = now;
      double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "\rverifying %s: %s checked, %.0f MB/s   ", path.c_str(), format_bytes(static_cast<double>(done)).c_str(),
                   done / 1e6 / std::max(s, 1e-3));
    });
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    for (const auto& pr : r.problems) std::cout << "FAIL " << pr.to_string() << "\n";
    problems += r.problems.size();
    records += r.records;
    shards += r.shards;
    bytes += r.bytes;
    fast_crop += r.fast_crop_indexes;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %llu shards, %llu records, %s checked in %.2f s (%.0f MB/s), %zu problem%s\n",
              problems ? "FAILED" : "OK", static_cast<unsigned long long>(shards), static_cast<unsigned long long>(records),
              format_bytes(static_cast<double>(bytes)).c_str(), s, bytes / 1e6 / std::max(s, 1e-6), problems,
              problems == 1 ? "" : "s");
  if (fast_crop)
    std::printf("  %llu fast-crop JPEG indexes checked\n", static_cast<unsigned long long>(fast_crop));
  return problems ? 1 : 0;
}

}  // namespace

STOKER_COMMAND("verify", "PATH... [--threads N] [--quiet]",
               "Check every checksum of datasets or shard files; exit 1 and one line per problem when any is found.",
               run_verify);

}  // namespace stoker::cli
