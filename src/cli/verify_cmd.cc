// `stoker verify PATH...`: checks every checksum; one line per problem. URLs: remote_cmd.h.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli.h"
#include "remote_cmd.h"
#include "stoker/verify.h"

namespace stoker::cli {
namespace {

struct VerifyArgs {
  std::vector<std::string> paths;
  unsigned threads = 0;
  bool decode = false;
  bool quiet = false;
  std::string tmp_dir;
  RemoteArgs remote;
};

int run_verify(const VerifyArgs& a) {
  const bool tty = ::isatty(2) && !a.quiet;
  const unsigned threads = a.threads;
  size_t problems = 0;
  uint64_t records = 0, shards = 0, bytes = 0, fast_crop = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (const std::string& path : a.paths) {
    auto last = std::chrono::steady_clock::now();
    VerifyOptions vo;
    vo.threads = threads;
    vo.decode = a.decode;
    vo.progress = [&](uint64_t done) {
      if (!tty) return;
      auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(200)) return;
      last = now;
      double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "\rverifying %s: %s checked, %.0f MB/s   ", path.c_str(), format_bytes(static_cast<double>(done)).c_str(),
                   done / 1e6 / std::max(s, 1e-3));
    };
    VerifyReport r = verify_path(path, vo);
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    for (const auto& pr : r.problems) std::cout << "FAIL " << pr.to_string() << "\n";
    for (const auto& note : r.notes) std::cout << "note: " << note << "\n";
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

void setup(CLI::App& tool) {
  auto a = std::make_shared<VerifyArgs>();
  CLI::App* c = tool.add_subcommand(
      "verify", "Check every checksum of datasets or shard files; exit 1 and one line per problem when any is found.");
  c->add_option("PATH", a->paths, "dataset directories, shard files or http(s):// / s3:// dataset URLs")->required();
  c->add_option("--threads", a->threads, "threads (0: the CPUs allowed)")->check(CLI::Range(0, 1024))->capture_default_str();
  c->add_flag("--decode", a->decode,
              "also decode every image (as pack's check does): catches an image the loader would fail on "
              "though its checksum is right; decode speed, not disk speed");
  c->add_flag("--quiet", a->quiet, "no progress line on a terminal");
  c->add_option("--tmp-dir", a->tmp_dir, "URL: where each shard is downloaded to be checked (default: the system's)");
  add_remote_options(c, a->remote);
  on_run(c, [a, c] {
    for (const std::string& p : a->paths)
      if (is_remote_url(p)) {
        VerifyOptions vo;
        vo.threads = a->threads;
        vo.decode = a->decode;
        return verify_remote(a->paths, vo, a->quiet, a->tmp_dir, a->remote);
      }
    reject_options(c, {"--tmp-dir", "--connections", "--part", "--profile"}, "without a URL");
    return run_verify(*a);
  });
}

}  // namespace

STOKER_COMMAND("verify", setup);

}  // namespace stoker::cli
