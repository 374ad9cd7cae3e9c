// `stoker bench compare DATASET`: the machine's limits and the feeders a user would pick
// instead (torch DataLoader + PIL, nanoGPT's memmap get_batch, WebDataset/FFCV when
// importable) next to stoker at several thread counts, in one run; with
// --fast-crop-dataset also a --fast-crop pack of the same images beside DATASET
// (fast-crop / plain, train and eval); for a dataset of videos (or with --videos) its
// clip feed next to PyAV in a torch DataLoader decoding the same clips. The orchestration and the Python baselines live
// in bench/compare.py; this command finds it and a Python with torch, and runs it with
// this very binary as the stoker to measure.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "field_spec.h"
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

struct CompareArgs {
  std::string dataset, out = "compare", python;
  // Passed on to bench/compare.py as given, in this order.
  std::vector<std::pair<const char*, std::string>> pass{
      {"images", ""}, {"tokens", ""}, {"tokens-bin", ""}, {"threads", ""}, {"seconds", ""}, {"batch", ""},
      {"transform", ""}, {"fast-crop-dataset", ""}, {"rounds", ""}, {"videos", ""}, {"clip", ""}};
  std::vector<std::string> fields;  // --field, each passed on
};

// --clip FRAMES:STRIDE:SIZE in `bench feed --field NAME=clip:...`'s ranges; a stride, not
// an fps (the PyAV baseline takes every STRIDE-th frame).
CLI::Validator clip_spec() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::string want = "want FRAMES:STRIDE:SIZE (e.g. 16:2:112), got '" + s + "'";
        if (std::count(s.begin(), s.end(), ':') != 2 || s.find("fps") != std::string::npos) return want;
        try {
          parse_field_specs({"video=clip:" + s}, 224);
        } catch (const UsageError& e) {
          // "--field 'video=clip:...': WHY (forms: ...)": WHY only.
          std::string why = e.what();
          if (const size_t at = why.find("': "); at != std::string::npos) why.erase(0, at + 3);
          if (const size_t at = why.find(" (forms:"); at != std::string::npos) why.resize(at);
          return want + ": " + why;
        }
        return {};
      },
      "FRAMES:STRIDE:SIZE");
}

int bench_compare_cmd(const CompareArgs& a) {
  const std::string exe = self_exe();
  const std::string script = find_script(exe);
  const std::string python = a.python.empty() ? find_python() : a.python;
  std::vector<std::string> argv = {python, script, a.dataset, "--stoker", exe.empty() ? "stoker" : exe, "--out", a.out};
  for (const auto& [k, v] : a.pass)
    if (!v.empty()) {
      argv.push_back(std::string("--") + k);
      argv.push_back(v);
    }
  parse_field_specs(a.fields, 224);  // a field named twice: a usage error here, not in every run
  for (const std::string& f : a.fields) {
    argv.push_back("--field");
    argv.push_back(f);
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

void setup(CLI::App& tool) {
  CLI::App* bench = group(tool, "bench", "Measure the feed, its stages and the machine's limits.");
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = bench->add_subcommand(
      "compare",
      "Feed rates of stoker next to torch DataLoader+PIL, PyAV in a DataLoader (videos), nanoGPT memmap and the "
      "machine's limits; writes compare.json, compare.md and compare.png into --out.");
  c->add_option("DATASET", a->dataset,
                "packed dataset: images, or videos (its first decoded field a video: clips/s next to PyAV)")
      ->required();
  const char* help[] = {"the ImageFolder the dataset was packed from (for the torch baselines)",
                        "a token dataset (packed)",
                        "the flat token file it was packed from (for the memmap baseline)",
                        "decode thread counts, comma-separated (e.g. 1,2)",
                        "seconds per measurement",
                        "batch size (default 64 images, 8 clips; tokens 32)",
                        "stoker's image rows: the first image field's transform (train|eval|none; default train)",
                        ("the same images packed with --fast-crop: fed beside DATASET, alternating, for the "
                         "train and eval transforms, with fast-crop/plain (table in compare.md)"),
                        "alternating rounds of the --fast-crop-dataset and of the video comparisons (default 2)",
                        ("the videofolder the dataset was packed from: PyAV in a torch DataLoader decodes the same "
                         "clips from its files (implies the video rows)"),
                        ("the video rows' clips: FRAMES frames STRIDE apart, resized to SIZE x SIZE, as `bench feed "
                         "--field NAME=clip:FRAMES:STRIDE:SIZE` (default 16:2:112)")};
  size_t i = 0;
  for (auto& [k, v] : a->pass) {
    CLI::Option* o = c->add_option(std::string("--") + k, v, help[i++]);
    if (std::string(k) == "transform") o->check(CLI::IsMember({"train", "eval", "none"}));
    if (std::string(k) == "rounds") o->check(CLI::Range(1, 1000));
    if (std::string(k) == "clip") o->check(clip_spec());
  }
  c->add_option("--field", a->fields,
                "stoker's image rows: a field's transform, as `bench feed --field` (repeatable; e.g. --field "
                "jpg=train:224 --field png=follow:jpg)")
      ->check(field_spec())->allow_extra_args(false);
  c->add_option("--out", a->out, "directory for compare.json, compare.md, compare.png")->capture_default_str();
  c->add_option("--python", a->python, "Python with torch (default: $STOKER_PYTHON, /usr/bin/python3, python3)");
  on_run(c, [a] { return bench_compare_cmd(*a); });
}

}  // namespace

STOKER_COMMAND("bench compare", setup);

}  // namespace stoker::cli
