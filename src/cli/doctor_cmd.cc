// `stoker doctor`: the platform checks a careful SRE runs on a GPU node, each with its
// reading, what it means and the decision (library: include/stoker/diagnose.h).
#include <cstdio>
#include <memory>

#include "cli.h"
#include "remote_cmd.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"

namespace stoker::cli {
namespace {

struct DoctorArgs {
  DoctorOptions o;
  std::string dataset, pinned, probe;
  int64_t threads = 0;
  bool json = false;
  RemoteArgs remote;
};

int doctor_cmd(const DoctorArgs& a) {
  DoctorOptions o = a.o;
  if (!a.dataset.empty()) o.dataset = a.dataset;
  o.threads = static_cast<unsigned>(a.threads);
  if (!a.pinned.empty()) o.pinned_bytes = parse_size(a.pinned);
  if (!a.probe.empty()) o.probe_bytes = parse_size(a.probe);
  // A URL: the remote dataset's checks stand in for the local storage's.
  const DoctorReport r =
      is_remote_url(a.dataset) ? doctor_remote(o, a.dataset, o.probe_bytes, a.remote) : run_doctor(o);
  if (a.json) {
    std::printf("%s\n", r.to_json().c_str());
  } else {
    std::printf("%s", r.to_text().c_str());
    int fails = 0, warns = 0;
    for (const Check& c : r.checks) {
      fails += c.status == CheckStatus::kFail;
      warns += c.status == CheckStatus::kWarn;
    }
    std::printf("%d check%s failed, %d warning%s\n", fails, fails == 1 ? "" : "s", warns, warns == 1 ? "" : "s");
  }
  return r.failed() ? 1 : 0;
}

void setup(CLI::App& tool) {
  auto a = std::make_shared<DoctorArgs>();
  a->o.root = "/";
  a->o.device = -1;
  CLI::App* c = tool.add_subcommand(
      "doctor",
      "Platform checks for a fast feed (io_uring, O_DIRECT, governor, quota, NUMA, PCIe, memlock, memory, GPU "
      "clocks, read probe); exit 1 when one fails.");
  c->add_option("--device", a->o.device, "NVIDIA GPU to check (-1: LOCAL_RANK, else 0)")->capture_default_str();
  c->add_option("--dataset", a->dataset,
                "dataset whose storage the read probe measures (a directory, or an http(s):// or s3:// URL)");
  c->add_option("--threads", a->threads, "decode threads planned (0: the CPUs allowed)")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  c->add_option("--pinned", a->pinned, "host memory the loader pins (default: the defaults' estimate)")->check(byte_size());
  c->add_option("--probe", a->probe, "bytes the read probe reads at most (default 128MiB)")->check(byte_size());
  c->add_flag("--json", a->json, "one JSON object instead of text");
  c->add_option("--root", a->o.root, "directory standing for / when reading /proc and /sys")->capture_default_str();
  add_remote_options(c, a->remote);
  on_run(c, [a, c] {
    if (!is_remote_url(a->dataset)) reject_options(c, {"--connections", "--part", "--profile"}, "without a URL --dataset");
    return doctor_cmd(*a);
  });
}

}  // namespace

STOKER_COMMAND("doctor", setup);

}  // namespace stoker::cli
