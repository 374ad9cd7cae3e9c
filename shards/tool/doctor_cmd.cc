// `stoker doctor`: the platform checks a careful SRE runs on a GPU node, each with its
// reading, what it means and the decision (library: include/stoker/diagnose.h).
#include <cstdio>

#include "cli.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"

namespace stoker::cli {
namespace {

int doctor_cmd(const Args& args) {
  ArgParser p(args, {"json"});
  p.check_known({"json", "device", "dataset", "root", "threads", "pinned", "probe"});
  if (!p.positional().empty())
    throw_error(ErrorCode::kInvalidArgument, "usage: stoker doctor [--device N] [--dataset PATH] [--json] [--root DIR]");
  DoctorOptions o;
  o.root = p.get_or("root", "/");
  o.dataset = p.get("dataset");
  o.device = static_cast<int>(p.get_int("device", -1));
  const int64_t threads = p.get_int("threads", 0);
  if (threads < 0 || threads > 4096) throw_error(ErrorCode::kInvalidArgument, "--threads must be 0..4096");
  o.threads = static_cast<unsigned>(threads);
  if (auto v = p.get("pinned")) o.pinned_bytes = parse_size(*v);
  if (auto v = p.get("probe")) o.probe_bytes = parse_size(*v);
  const DoctorReport r = run_doctor(o);
  if (p.flag("json")) {
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

}  // namespace

STOKER_COMMAND("doctor", "[--device N] [--dataset PATH] [--threads T] [--pinned BYTES] [--probe BYTES] [--json] [--root DIR]",
               "Platform checks for a fast feed (io_uring, O_DIRECT, governor, quota, NUMA, PCIe, memlock, memory, "
               "GPU clocks, read probe); exit 1 when one fails.",
               doctor_cmd);

}  // namespace stoker::cli
