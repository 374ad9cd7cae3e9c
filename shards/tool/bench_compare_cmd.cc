// `stoker bench compare DATASET`: the machine's limits and the feeders a user would pick
// instead (torch DataLoader + PIL, nanoGPT's memmap get_batch, WebDataset/FFCV when
// importable) next to stoker at several thread counts, in one run. The orchestration
// and the Python baselines live in bench/compare.py; this command finds it and a Python
// with torch, and runs it with this very binary as the stoker to measure.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"
#include "stoker/error.h"

namespace fs = std::filesystem;

namespace stoker::cli {
namespace {

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// bench/compare.py: $STOKER_COMPARE_PY, next to the source tree the binary was built
// from (build/stoker -> ../bench), an installed share/stoker, or ./bench.
std::string find_script(const std::string& exe) {
  std::vector<fs::path> c;
  if (const char* e = std::getenv("STOKER_COMPARE_PY"); e && *e) c.emplace_back(e);
  if (!exe.empty()) {
    const fs::path dir = fs::path(exe).parent_path();
    c.push_back(dir / ".." / "bench" / "compare.py");
    c.push_back(dir / ".." / "share" / "stoker" / "compare.py");
  }
  c.push_back(fs::path("bench") / "compare.py");
  for (const auto& p : c) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  }
  throw_error(ErrorCode::kNotFound,
              "bench/compare.py not found next to " + exe + " or in ./bench (set STOKER_COMPARE_PY)");
}

// A Python with the Debian torch/matplotlib: $STOKER_PYTHON, /usr/bin/python3, python3.
std::string find_python() {
  if (const char* e = std::getenv("STOKER_PYTHON"); e && *e) return e;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

int bench_compare_cmd(const Args& args) {
  ArgParser p(args);
  p.check_known({"images", "tokens", "tokens-bin", "threads", "out", "seconds", "batch", "python"});
  if (p.positional().size() != 1)
    throw_error(ErrorCode::kInvalidArgument,
                "usage: stoker bench compare DATASET [--images DIR] [--tokens DATASET] [--tokens-bin FILE] "
                "[--threads 1,2] [--seconds S] [--out DIR]");
  const std::string exe = self_exe();
  const std::string script = find_script(exe);
  const std::string python = p.get_or("python", find_python());
  std::vector<std::string> argv = {python, script, p.positional()[0], "--stoker", exe.empty() ? "stoker" : exe,
                                   "--out", p.get_or("out", "compare")};
  for (const char* k : {"images", "tokens", "tokens-bin", "threads", "seconds", "batch"})
    if (auto v = p.get(k)) {
      argv.push_back(std::string("--") + k);
      argv.push_back(*v);
    }
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0) throw errno_error("fork for " + script, errno);
  if (pid == 0) {
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    execvp(a[0], a.data());
    std::fprintf(stderr, "stoker: exec %s: %s\n", a[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw errno_error("waitpid " + script, errno);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::fprintf(stderr, "stoker: %s killed by signal %d\n", script.c_str(), WTERMSIG(status));
  return 1;
}

}  // namespace

STOKER_COMMAND("bench compare",
               "DATASET [--images DIR] [--tokens DATASET] [--tokens-bin FILE] [--threads 1,2] [--seconds S] "
               "[--batch B] [--out DIR]",
               "Feed rates of stoker next to torch DataLoader+PIL, nanoGPT memmap and the machine's limits; writes "
               "compare.json, compare.md and compare.png into --out.",
               bench_compare_cmd);

}  // namespace stoker::cli
