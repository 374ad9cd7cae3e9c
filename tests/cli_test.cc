// The `stoker` tool, run as a user runs it: the binary, its stdout, stderr and exit code.
// Help and --version on stdout with exit 0; usage errors (unknown command, kind or option,
// a missing or malformed argument) named on stderr with exit 2; runtime errors exit 1.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/loader.h"
#include "stoker/pack.h"
#include "stoker/verify.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_servers.h"
#include "util/test_util.h"
#include "util/video_util.h"

#ifndef STOKER_TOOL
#error "STOKER_TOOL (the path of build/stoker) is set by CMake"
#endif

namespace fs = std::filesystem;

namespace stoker {
namespace {

using testing::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Result {
  int rc = -1;
  std::string out, err;
};

// The tool built with this test; STOKER_TEST_TOOL runs the suite against another build.
std::string tool() { return testing::test_tool(STOKER_TOOL); }

// Runs `stoker ARGS` (ARGS as shell words) and captures what it printed where.
Result stoker(const std::string& args) {
  TempDir d;
  const std::string cmd = tool() + " " + args + " >" + d.str("out") + " 2>" + d.str("err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(d.str("out"));
  r.err = slurp(d.str("err"));
  return r;
}

std::string shown(const Result& r) { return "rc " + std::to_string(r.rc) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err; }

// `stoker ARGS` exits 0 (a failed expectation otherwise, with what it printed).
bool ok(const std::string& args) {
  const Result r = stoker(args);
  EXPECT_EQ(r.rc, 0) << args << "\n" << shown(r);
  return r.rc == 0;
}

// bench compare plots through Debian's python3 with matplotlib and numpy.
bool python_can_plot() { return std::system("/usr/bin/python3 -c 'import matplotlib, numpy' >/dev/null 2>&1") == 0; }

// ---- help and version ---------------------------------------------------------------------

TEST(CliHelp, ToolHelpGoesToStdoutWithExitZero) {
  for (const char* flag : {"--help", "-h", "help"}) {
    const Result r = stoker(flag);
    EXPECT_EQ(r.rc, 0) << flag << "\n" << shown(r);
    EXPECT_TRUE(r.err.empty()) << flag << "\n" << shown(r);
    EXPECT_TRUE(has(r.out, "Usage: stoker")) << shown(r);
    for (const char* cmd : {"pack", "sample", "verify", "inspect", "extract", "doctor", "bench"})
      EXPECT_TRUE(has(r.out, std::string("\n  ") + cmd + " ")) << cmd << "\n" << shown(r);
  }
}

TEST(CliHelp, VersionIsTheProjectVersion) {
  const Result r = stoker("--version");
  EXPECT_EQ(r.rc, 0) << shown(r);
  EXPECT_EQ(r.out, "stoker " STOKER_VERSION "\n") << shown(r);
  EXPECT_TRUE(r.err.empty()) << shown(r);
}

TEST(CliHelp, EveryCommandHasItsOwnHelp) {
  struct Row {
    const char* words;
    std::vector<const char*> mentions;  // options and arguments its help must name
  };
  const Row rows[] = {
      {"pack", {"imagefolder", "tokens", "wds"}},
      {"pack imagefolder", {"SRC", "OUT", "--shard-size", "--skip-bad", "--baseline", "--exif-transpose", "--align", "--threads", "--overwrite"}},
      {"pack tokens", {"FILE", "OUT", "--dtype", "--seq-len", "--zstd", "--rows-per-record", "--shard-size"}},
      {"pack wds", {"TAR... OUT", "--classes", "--skip-bad"}},
      {"sample", {"imagefolder", "wds", "tokens"}},
      {"sample wds", {"OUT", "--samples", "--per-tar", "--classes", "--features", "--seed"}},
      {"sample imagefolder", {"OUT", "--images", "--classes", "--seed", "--quality", "--progressive-frac"}},
      {"sample tokens", {"--tokens", "--vocab", "--dtype", "--seed"}},
      {"verify", {"PATH", "--threads", "--decode", "--quiet"}},
      {"inspect", {"PATH", "--json"}},
      {"extract", {"DATASET", "OUT", "--threads"}},
      {"doctor", {"--device", "--dataset", "--threads", "--pinned", "--probe", "--json", "--root"}},
      {"bench", {"feed", "io", "stage", "compare"}},
      {"bench feed", {"DATASET", "--transform", "--field", "NAME=follow:LEADER", "--consumer-ms", "--order", "--no-direct",
                      "--io-limit-mbps", "--io-latency-ms", "--max-seconds", "--cache-dir", "--cache-limit", "--connections"}},
      {"bench io", {"DATASET", "--order", "--qd", "--engine", "--verify", "--drop-caches", "--json"}},
      {"bench stage", {"--bytes", "--slots", "--host-slots", "--backend", "--copy-limit-mbps", "--dataset"}},
      {"bench compare", {"DATASET", "--images", "--tokens", "--tokens-bin", "--out", "--fast-crop-dataset", "--field",
                         "--transform", "--rounds", "--videos", "--clip", "FRAMES:STRIDE:SIZE"}},
  };
  for (const Row& row : rows) {
    for (const std::string& args : {std::string(row.words) + " --help", "help " + std::string(row.words)}) {
      const Result r = stoker(args);
      EXPECT_EQ(r.rc, 0) << args << "\n" << shown(r);
      EXPECT_TRUE(r.err.empty()) << args << "\n" << shown(r);
      EXPECT_TRUE(has(r.out, std::string("Usage: stoker ") + row.words + " ")) << args << "\n" << shown(r);
      for (const char* m : row.mentions) EXPECT_TRUE(has(r.out, m)) << args << ": no " << m << "\n" << shown(r);
    }
  }
}

// ---- usage errors: exit 2, named ----------------------------------------------------------

TEST(CliUsage, UnknownOptionIsNamedWithExitTwo) {
  TempDir d;
  const std::string p = d.str();
  for (const std::string& args : std::vector<std::string>{
           "doctor --frob", "doctor --frob 3", "verify " + p + " --frob", "pack imagefolder " + p + " " + p + "/o --frob",
        "inspect " + p + " --frob=1", "bench io " + p + " --frob", "sample tokens " + p + "/t.bin --frob",
        "--frob"}) {
    const Result r = stoker(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << shown(r);
    EXPECT_TRUE(has(r.err, "unknown option --frob")) << args << "\n" << shown(r);
    EXPECT_FALSE(has(r.err, "needs a value")) << args << "\n" << shown(r);
    EXPECT_TRUE(r.out.empty()) << args << "\n" << shown(r);
  }
}

TEST(CliUsage, UnknownKindOrCommandListsTheChoices) {
  Result r = stoker("pack foo");
  EXPECT_EQ(r.rc, 2) << shown(r);
  EXPECT_TRUE(has(r.err, "unknown kind 'foo'")) << shown(r);
  EXPECT_TRUE(has(r.err, "imagefolder, videofolder, tokens, text, samples, wds")) << shown(r);

  r = stoker("bench frob");
  EXPECT_EQ(r.rc, 2) << shown(r);
  EXPECT_TRUE(has(r.err, "unknown kind 'frob'")) << shown(r);
  EXPECT_TRUE(has(r.err, "compare")) << shown(r);

  r = stoker("frobnicate");
  EXPECT_EQ(r.rc, 2) << shown(r);
  EXPECT_TRUE(has(r.err, "unknown command 'frobnicate'")) << shown(r);

  r = stoker("help frobnicate");
  EXPECT_EQ(r.rc, 2) << shown(r);
  EXPECT_TRUE(has(r.err, "unknown command 'frobnicate'")) << shown(r);
}

TEST(CliUsage, MissingOrMalformedArgumentsExitTwo) {
  TempDir d;
  const std::string p = d.str();
  struct Row {
    std::string args, says;
  };
  const Row rows[] = {
      {"", "Usage: stoker"},                                          // no command: the usage, on stderr
      {"pack", "name a kind: imagefolder, videofolder, tokens, text, samples, wds"},              // a group alone
      {"pack imagefolder " + p, "OUT is required"},                   // a positional missing
      {"pack tokens a.bin " + p + "/o", "--seq-len is required"},     // a required option missing
      {"pack tokens a.bin " + p + "/o --seq-len abc", "--seq-len"},   // not a number
      {"pack tokens a.bin " + p + "/o --seq-len 0", "--seq-len"},     // out of range
      {"pack imagefolder a " + p + "/o --align 3", "--align"},        // not a choice
      {"pack imagefolder a " + p + "/o --shard-size 12XB", "bad size unit in '12XB'"},
      {"pack tokens a.bin " + p + "/o --seq-len 8 --dtype float", "dtype must be uint16, uint32, int32, int64"},
      {"verify", "PATH is required"},
      {"doctor --threads", "--threads"},                              // a value missing
      {"extract " + p + " " + p + "/o extra", "unexpected argument 'extra'"},
      {"bench feed " + p + " --transform blur", "--transform"},
      {"bench io " + p + " --engine warp", "--engine"},
      // --field specs that cannot parse: named with the value, before the dataset is opened.
      {"bench feed " + p + " --field jpg=blur", "--field: 'jpg=blur': unknown transform 'blur'"},
      {"bench feed " + p + " --field jpg=train:0", "--field: 'jpg=train:0': SIZE must be 1..8192, got 0"},
      {"bench feed " + p + " --field jpg=train:big", "SIZE must be a whole number, got 'big'"},
      {"bench feed " + p + " --field jpg=train:224:9", "train takes one parameter, SIZE"},
      {"bench feed " + p + " --field jpg=eval:224:100", "RESIZE must be >= SIZE (224), got 100"},
      {"bench feed " + p + " --field =train", "--field: '=train': no field name before '='"},
      {"bench feed " + p + " --field png=follow", "follow needs the image field to follow"},
      {"bench feed " + p + " --field png=follow:png", "a field cannot follow itself"},
      {"bench feed " + p + " --field png=follow:jpg:bicubic", "'bicubic' is neither an interpolation"},
      {"bench feed " + p + " --field png=follow:jpg:2", "'2' is neither an interpolation"},
      {"bench feed " + p + " --field jpg --field jpg=train", "--field: field 'jpg' is given twice"},
      {"bench compare " + p + " --field jpg=blur", "--field: 'jpg=blur': unknown transform 'blur'"},
      {"bench compare " + p + " --field jpg=train --field jpg", "--field: field 'jpg' is given twice"},
      {"bench compare " + p + " --transform blur", "--transform"},
      {"bench compare " + p + " --rounds 0", "--rounds"},
      {"bench compare " + p + " --fast-crop-dataset", "--fast-crop-dataset"},
      {"bench compare " + p + " --clip 16:2", "--clip: want FRAMES:STRIDE:SIZE (e.g. 16:2:112), got '16:2'"},
      {"bench compare " + p + " --clip 16:8fps:112", "want FRAMES:STRIDE:SIZE"},
      {"bench compare " + p + " --clip 0:2:112", "FRAMES must be 1..1024"},
      // The remote forms: options checked before anything is fetched (port 9: nothing).
      {"bench io http://127.0.0.1:9/ds", "a URL needs --cache-dir DIR"},
      {"bench feed http://127.0.0.1:9/ds", "a URL needs --cache-dir DIR"},
      {"bench feed " + p + " --cache-dir " + p, "--cache-dir does not apply without a URL"},
      {"bench io http://127.0.0.1:9/ds --cache-dir " + p + " --qd 8", "--qd does not apply with a URL"},
      {"bench io " + p + " --rounds 2", "--rounds does not apply without a URL"},
      {"bench io http://127.0.0.1:9/ds --cache-dir " + p + " --rounds 0", "--rounds"},
      {"verify " + p + " --connections 4", "--connections does not apply without a URL"},
      {"inspect http://127.0.0.1:9/ds --connections 0", "--connections"},
      {"inspect http://127.0.0.1:9/ds --part 4XB", "bad size unit in '4XB'"},
      {"doctor --profile x", "--profile does not apply without a URL --dataset"},
  };
  for (const Row& row : rows) {
    const Result r = stoker(row.args);
    EXPECT_EQ(r.rc, 2) << row.args << "\n" << shown(r);
    EXPECT_TRUE(has(r.err, row.says)) << row.args << ": wants " << row.says << "\n" << shown(r);
  }
}

TEST(CliUsage, RuntimeErrorsExitOneWithTheirCode) {
  TempDir d;
  const Result r = stoker("inspect " + d.str("missing"));
  EXPECT_EQ(r.rc, 1) << shown(r);
  EXPECT_TRUE(has(r.err, "stoker: not_found: ")) << shown(r);
  EXPECT_TRUE(has(r.err, d.str("missing"))) << shown(r);
}

// Issue 27: a negative --seed said its allowed range with DBL_MAX written out in
// ~300 digits; bench feed on a dataset of 0 records died of SIGFPE.
TEST(CliUsage, OutOfRangeNumbersAreSaidInWords) {
  const Result r = stoker("sample tokens /nonexistent/t.bin --seed -1");
  EXPECT_EQ(r.rc, 2) << shown(r);
  EXPECT_TRUE(has(r.err, "--seed")) << shown(r);
  EXPECT_TRUE(has(r.err, ">= 0")) << shown(r);
  EXPECT_LT(r.err.size(), 400u) << shown(r);
}

TEST(CliCommands, BenchFeedOnAnEmptyDatasetIsAnErrorNotACrash) {
  TempDir d;
  {
    Schema s;
    s.fields = {Field{"jpg", FieldKind::kImage}, Field{"cls", FieldKind::kInt64}};
    DatasetWriter w(d.str("ds"), s);
    w.finish();
  }
  const Result r = stoker("bench feed " + d.str("ds") + " --threads 1 --batch 4 --limit-seconds 0.1");
  EXPECT_EQ(r.rc, 1) << shown(r);
  EXPECT_TRUE(has(r.err, "0 records")) << shown(r);
}

// --max-tokens: padded batches measured in tokens (padding left out) against the limit's
// tokens, one dataset or a mixture; --batch with it is a usage error.
TEST(CliCommands, BenchFeedMeasuresMaxTokensBatchesInTokens) {
  TempDir d;
  const std::vector<uint32_t> len = testing::lognormal_lengths(300, 200, 7);
  testing::write_sample_dataset(d.str("a"), len, false);
  testing::write_sample_dataset(d.str("b"), testing::lognormal_lengths(100, 150, 8), false);
  const std::string feed = "bench feed " + d.str("a") + " --max-tokens 1024 --threads 1 --limit-seconds 0.1 --json";
  Result r = stoker(feed);
  ASSERT_EQ(r.rc, 0) << shown(r);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out.substr(r.out.find('{')))) << r.out;
  EXPECT_EQ(j["unit"], "tokens");
  EXPECT_EQ(j["samples"], len.size());
  EXPECT_GT(j["batches"].get<uint64_t>(), len.size() / 20) << "batches of varying size under the budget";
  EXPECT_GT(j["limit_samples_per_s"].get<double>(), 0);
  EXPECT_GT(j["ratio"].get<double>(), 0);
  r = stoker(feed + " --mix " + d.str("b"));
  ASSERT_EQ(r.rc, 0) << shown(r);
  r = stoker(feed + " --batch 8");
  EXPECT_EQ(r.rc, 2) << shown(r);
  EXPECT_TRUE(has(r.err, "--batch: a --max-tokens batch")) << shown(r);
}

// ---- commands end to end -------------------------------------------------------------------

TEST(CliCommands, AnArgumentNamedLikeACommandIsAnArgument) {
  // "tokens" is a pack kind and "bench" a command: as paths they are just paths.
  TempDir d;
  const fs::path cwd = fs::current_path();
  fs::current_path(d.path());
  Result r = stoker("sample tokens tokens.bin --tokens 5000 --vocab 100");
  ASSERT_EQ(r.rc, 0) << shown(r);
  r = stoker("pack tokens tokens.bin tokens --dtype uint16 --seq-len 64");
  EXPECT_EQ(r.rc, 0) << shown(r);
  r = stoker("inspect tokens --json");
  EXPECT_EQ(r.rc, 0) << shown(r);
  r = stoker("extract tokens bench");
  EXPECT_EQ(r.rc, 0) << shown(r);
  EXPECT_TRUE(fs::exists(d.path() / "bench")) << shown(r);
  fs::current_path(cwd);
}

// A photo truncated in the source folder and packed with --no-check: verify checks the
// checksums and passes; verify --decode fails naming the photo's record and key.
TEST(CliCommands, VerifyDecodeCatchesAnImagePackedWithoutTheCheck) {
  TempDir d;
  ASSERT_EQ(stoker("sample imagefolder " + d.str("imgs") + " --images 6 --classes 2").rc, 0);
  fs::path victim;
  for (const auto& e : fs::recursive_directory_iterator(d.path() / "imgs"))
    if (e.is_regular_file() && victim.empty()) victim = e.path();
  ASSERT_FALSE(victim.empty());
  fs::resize_file(victim, fs::file_size(victim) / 2);
  Result r = stoker("pack imagefolder " + d.str("imgs") + " " + d.str("ds") + " --no-check");
  ASSERT_EQ(r.rc, 0) << shown(r);
  r = stoker("verify " + d.str("ds") + " --quiet");
  EXPECT_EQ(r.rc, 0) << shown(r);
  r = stoker("verify " + d.str("ds") + " --decode --quiet");
  EXPECT_EQ(r.rc, 1) << shown(r);
  EXPECT_TRUE(has(r.out, "FAIL ")) << shown(r);
  EXPECT_TRUE(has(r.out, "(__key__ '")) << shown(r);
  EXPECT_TRUE(has(r.out, victim.stem().string())) << shown(r);
  EXPECT_TRUE(has(r.out, "1 problem")) << shown(r);
}

TEST(CliCommands, InspectJsonIsValidEvenForPathsThatAreNotUtf8) {
  TempDir d;
  // A quote, a newline and a byte that is not UTF-8: the one JSON writer escapes or
  // replaces each, so any JSON reader takes the output.
  const std::string name = "ds \"q\"\n\xff";
  ASSERT_EQ(stoker("sample imagefolder " + d.str("imgs") + " --images 6 --classes 2").rc, 0);
  const std::string quoted = "'" + d.str(name) + "'";
  Result r = stoker("pack imagefolder " + d.str("imgs") + " " + quoted);
  ASSERT_EQ(r.rc, 0) << shown(r);
  r = stoker("inspect " + quoted + " --json");
  ASSERT_EQ(r.rc, 0) << shown(r);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  EXPECT_EQ(j["kind"], "dataset");
  EXPECT_EQ(j["records"], 6);
  EXPECT_EQ(j["classes"], 2);
  EXPECT_EQ(j["class_names"].size(), 2u);
  EXPECT_EQ(j["fields"][0]["name"], "__key__");
  EXPECT_EQ(j["fields"][1]["name"], "image");
  const std::string path = j["path"];
  EXPECT_TRUE(has(path, "ds \"q\"\n\xEF\xBF\xBD")) << path;  // U+FFFD for the stray byte
}

TEST(CliCommands, DoctorExitsOneWhenACheckFails) {
  TempDir root;
  auto meminfo = [&](uint64_t avail_kb) {
    fs::create_directories(root.path() / "proc");
    std::ofstream(root.path() / "proc/meminfo") << "MemTotal:       16777216 kB\nMemFree:         1000 kB\nMemAvailable:   "
                                                 << avail_kb << " kB\nHugePages_Total:    0\nHugePages_Free:     0\n"
                                                 << "Hugepagesize:       2048 kB\n";
  };
  meminfo(50 << 10);  // 50 MiB available: the memory check fails
  Result r = stoker("doctor --json --root " + root.str());
  EXPECT_EQ(r.rc, 1) << shown(r);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
  bool memory_failed = false;
  for (const auto& c : j["checks"]) memory_failed |= c["name"] == "memory" && c["status"] == "fail";
  EXPECT_TRUE(memory_failed) << r.out;
  EXPECT_EQ(j["failed"], true);
  // Fixed: warnings alone exit 0.
  meminfo(12 << 20);
  r = stoker("doctor --root " + root.str());
  EXPECT_EQ(r.rc, 0) << shown(r);
  EXPECT_TRUE(has(r.out, "0 checks failed")) << shown(r);
}

TEST(CliCommands, BenchFeedTakesFieldSpecsOfAMultiFieldDataset) {
  TempDir d;
  Result r = stoker("sample wds " + d.str("tars") + " --samples 12 --per-tar 5 --features 4 --seed 3");
  ASSERT_EQ(r.rc, 0) << shown(r);
  for (const char* t : {"shard-000000.tar", "shard-000001.tar", "shard-000002.tar"})
    EXPECT_TRUE(fs::exists(d.path() / "tars" / t)) << t;
  r = stoker("pack wds " + d.str("tars/shard-000000.tar") + " " + d.str("tars/shard-000001.tar") + " " +
             d.str("tars/shard-000002.tar") + " " + d.str("ds"));
  ASSERT_EQ(r.rc, 0) << shown(r);
  r = stoker("inspect " + d.str("ds") + " --json");
  ASSERT_EQ(r.rc, 0) << shown(r);
  const nlohmann::json meta = nlohmann::json::parse(r.out);
  EXPECT_EQ(meta["records"], 12);
  std::set<std::string> names;
  for (const auto& f : meta["fields"]) names.insert(f["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"__key__", "jpg", "png", "cls", "txt", "npy"})) << r.out;

  const std::string feed = "bench feed " + d.str("ds") + " --threads 1 --batch 4 --limit-seconds 0.1 --json";
  r = stoker(feed + " --field jpg=train:32 --field png=follow:jpg --field cls --field npy=stored");
  ASSERT_EQ(r.rc, 0) << shown(r);
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out.substr(r.out.find('{')))) << r.out;
  EXPECT_EQ(j["samples"], 12);
  EXPECT_GT(j["limit_samples_per_s"].get<double>(), 0);
  EXPECT_EQ(j["fields"].size(), 4u);
  r = stoker(feed + " --field jpg=eval:32:40 --field png=follow:jpg:antialiased:3 --epochs 2 --limit-interleaved");
  ASSERT_EQ(r.rc, 0) << shown(r);
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out.substr(r.out.find('{')))) << r.out;
  EXPECT_EQ(j["samples"], 24);
  EXPECT_EQ(j["limit_interleaved"], true);
  EXPECT_GT(j["ratio"].get<double>(), 0);

  // What only the dataset can tell: still a usage error naming --field and the field.
  const struct {
    std::string spec, says;
  } bad[] = {
      {"xyz=train", "--field: fields['xyz']: the dataset has no field 'xyz'"},
      {"cls=train", "--field: fields['cls']: an image transform needs an image field; 'cls' is int64"},
      {"png=follow:txt", "--field: fields['png']: Follow('txt'): 'txt' is not an image field"},
      {"png=follow:nope", "--field: fields['png']: Follow('nope'): no such field"},
  };
  for (const auto& b : bad) {
    r = stoker(feed + " --field " + b.spec);
    EXPECT_EQ(r.rc, 2) << b.spec << "\n" << shown(r);
    EXPECT_TRUE(has(r.err, b.says)) << b.spec << ": wants " << b.says << "\n" << shown(r);
  }
}

TEST(CliCommands, BenchCompareWritesJsonMarkdownAndPlot) {
  if (!python_can_plot()) GTEST_SKIP() << "/usr/bin/python3 lacks matplotlib/numpy";
  TempDir d;
  ASSERT_TRUE(ok("sample imagefolder " + d.str("imgs") + " --images 48 --classes 3 --seed 2"));
  ASSERT_TRUE(ok("pack imagefolder " + d.str("imgs") + " " + d.str("ds")));
  ASSERT_TRUE(ok("sample tokens " + d.str("tokens.bin") + " --tokens 300000 --vocab 1000"));
  ASSERT_TRUE(ok("pack tokens " + d.str("tokens.bin") + " " + d.str("tokens") + " --dtype uint16 --seq-len 256"));
  ASSERT_TRUE(ok("bench compare " + d.str("ds") + " --images " + d.str("imgs") + " --tokens " + d.str("tokens") +
                 " --threads 1 --seconds 1 --batch 16 --out " + d.str("cmp")));

  const std::string text = slurp(d.str("cmp/compare.json"));
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  for (const char* key : {"limits", "results"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["limits"]["read"]["samples_per_s"].get<double>(), 0);
  EXPECT_EQ(j["limits"]["decode"][0]["threads"], 1);
  EXPECT_GT(j["limits"]["decode"][0]["samples_per_s"].get<double>(), 0);
  std::set<std::string> feeders;
  bool stoker_verdict = false;
  for (const auto& x : j["results"]) {
    for (const char* k : {"workload", "feeder", "threads"}) EXPECT_TRUE(x.contains(k)) << x.dump();
    // Every row has a rate or says why not.
    EXPECT_TRUE(x.value("samples_per_s", 0.0) > 0 || x.contains("status")) << x.dump();
    feeders.insert(x["workload"].get<std::string>() + "/" + x["feeder"].get<std::string>());
    if (x["feeder"] == "stoker" && x.contains("bottleneck"))
      stoker_verdict |= std::set<std::string>{"storage", "decode", "copy", "consumer"}.count(x["bottleneck"]) > 0;
  }
  for (const char* f : {"images/stoker", "tokens/stoker", "images/torch DataLoader+PIL", "tokens/nanoGPT memmap get_batch"})
    EXPECT_TRUE(feeders.count(f)) << f;
  bool wds = false, ffcv = false;
  for (const std::string& f : feeders) {
    wds |= has(f, "/WebDataset");
    ffcv |= has(f, "/FFCV");
  }
  EXPECT_TRUE(wds && ffcv) << text;
  EXPECT_TRUE(stoker_verdict) << text;
  const std::string md = slurp(d.str("cmp/compare.md"));
  EXPECT_TRUE(has(md, "| workload | feeder | threads | samples/s | after 1st batch | ratio to limit | note |")) << md;
  EXPECT_TRUE(has(md, "| images | stoker | 1 |")) << md;
  std::error_code ec;
  const auto png = fs::file_size(d.str("cmp/compare.png"), ec);
  ASSERT_FALSE(ec) << "compare.png missing";
  EXPECT_GT(png, 1000u);
  EXPECT_EQ(slurp(d.str("cmp/compare.png")).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

// ---- remote URLs ----------------------------------------------------------------------

// The commands that take a dataset URL, against nginx on loopback serving six shards.
class CliRemote : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = testing::write_bytes_dataset(
        root_.str("ds"), {.count = 6 * 33,
                          .shard_size = 200 << 10,
                          .size = [](int i) { return static_cast<size_t>(5000 + (i * 37) % 2000); }});
    if (!nginx_.start(root_.str())) GTEST_SKIP() << "nginx (Debian nginx-light) could not start on 127.0.0.1";
  }

  TempDir root_;
  Manifest manifest_;
  testing::Nginx nginx_;
};

TEST_F(CliRemote, TheToolVerifiesAndInspectsAURL) {
  ASSERT_EQ(manifest_.shards.size(), 6u);
  Result r = stoker("verify " + nginx_.url() + " --quiet");
  EXPECT_EQ(r.rc, 0) << shown(r);
  EXPECT_TRUE(has(r.out + r.err, "OK: 6 shards")) << shown(r);
  r = stoker("inspect " + nginx_.url() + " --json");
  EXPECT_EQ(r.rc, 0) << shown(r);
  EXPECT_TRUE(has(r.out + r.err, "\"records\":" + std::to_string(manifest_.total_records()))) << shown(r);
  // A server that flips a byte of every answer: verify names the shard's URL and record.
  testing::Proxy proxy;
  ASSERT_TRUE(proxy.start(nginx_.url(""), {"--corrupt-first", "1000"}));
  r = stoker("verify " + proxy.url() + " --quiet");
  EXPECT_EQ(r.rc, 1) << shown(r);
  EXPECT_TRUE(has(r.out + r.err, "FAIL " + proxy.url() + "/" + manifest_.shards[0].name + ": record ")) << shown(r);
  EXPECT_TRUE(has(r.out + r.err, "checksum mismatch")) << shown(r);
  // The cache benchmark runs end to end and reports its ratios.
  TempDir bench_cache;
  r = stoker("bench io " + nginx_.url() + " --cache-dir " + bench_cache.str() + " --rounds 1 --json");
  EXPECT_EQ(r.rc, 0) << shown(r);
  EXPECT_TRUE(has(r.out + r.err, "\"warm_over_local\"")) << shown(r);
  // The feed benchmark over the URL reports the network stage beside the feed rate.
  TempDir feed_cache;
  r = stoker("bench feed " + nginx_.url() + " --cache-dir " + feed_cache.str() +
             " --epochs 2 --batch 16 --threads 2 --limit-seconds 0.05 --limit-records 4 --json");
  EXPECT_EQ(r.rc, 0) << shown(r);
  // The JSON document is the output's last line that opens a brace.
  const size_t nl = r.out.rfind("\n{");
  const size_t brace = nl == std::string::npos ? 0 : nl + 1;
  ASSERT_TRUE(r.out.size() > brace && r.out[brace] == '{') << shown(r);
  const auto feed = nlohmann::json::parse(r.out.substr(brace));
  EXPECT_GT(feed["samples_per_s"].get<double>(), 0) << feed;
  EXPECT_GE(feed["network"]["bytes_fetched"].get<uint64_t>(), manifest_.total_bytes()) << feed;
  EXPECT_GT(feed["network"]["bytes_per_s"].get<double>(), 0) << feed;
  EXPECT_GT(feed["network"]["requests_per_s"].get<double>(), 0) << feed;
  ASSERT_EQ(feed["per_epoch"].size(), 2u) << feed;
  EXPECT_EQ(feed["per_epoch"][1]["network"]["requests"], 0) << feed;
  EXPECT_DOUBLE_EQ(feed["per_epoch"][1]["network"]["hit_rate"].get<double>(), 1.0) << feed;
  r = stoker("doctor --dataset " + nginx_.url() + " --json");
  EXPECT_TRUE(has(r.out + r.err, "\"remote_bandwidth\"")) << shown(r);
  EXPECT_TRUE(has(r.out + r.err, "remote_reachable\",\"status\":\"ok")) << shown(r);
}

// ---- signals ----------------------------------------------------------------------------

// #18: Ctrl-C during `stoker pack` left a .tmp file and printed nothing. Through the
// binary: SIGINT while a shard is being written ends the run with exit code 130, a
// message saying what happened, and no file of the run left in the output.
TEST(CliSignals, CtrlCDuringPackRemovesThePartialOutputAndSaysSo) {
  TempDir tmp;
  // Incompressible tokens at zstd 19 on one thread: slow enough to interrupt.
  testing::write_file(tmp.str("t.bin"), testing::random_bytes(24u << 20, 7));
  const std::string out = tmp.str("out"), err = tmp.str("stderr.txt");
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    // Through the shell's exec, as tool() is shell words (an emulator prefix under
    // tests/portability.sh aarch64): the child's pid is still the tool's.
    const std::string cmd = "exec " + tool() + " pack tokens " + tmp.str("t.bin") + " " + out +
                            " --dtype uint16 --seq-len 1024 --zstd 19 --threads 1 --shard-size 1MiB";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the second shard to be under way: one finished shard and one .tmp.
  bool started = false;
  for (int i = 0; i < 1200 && !started; ++i) {
    std::error_code ec;
    bool tmp_file = false, done_shard = false;
    for (const auto& e : fs::directory_iterator(out, ec)) {
      // Shards are written under pending names (committed with the MANIFEST).
      tmp_file |= e.path().extension() == ".tmp";
      done_shard |= e.path().extension() != ".tmp" && has(e.path().filename().string(), ".stk.pending-");
    }
    started = tmp_file && done_shard;
    if (!started) ::usleep(50 * 1000);
  }
  ASSERT_TRUE(started) << "the pack did not start writing in 60 s";
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string msg = testing::read_file_text(err);
  EXPECT_NE(msg.find("interrupted (SIGINT)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("removed"), std::string::npos) << msg;
  size_t left = 0;
  for (const auto& e : fs::recursive_directory_iterator(out)) left += e.is_regular_file();
  EXPECT_EQ(left, 0u) << msg;  // no .tmp, no shard, no MANIFEST
}

// ---- kill -9 sweep: every write is atomic --------------------------------------------------

// Starts `stoker ARGS` with its output discarded; returns the pid.
pid_t spawn(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    // tool() may be a command line ("qemu-aarch64 build-aarch64/stoker"): its words first.
    std::vector<std::string> words;
    std::istringstream tool_words(tool());
    for (std::string w; tool_words >> w;) words.push_back(w);
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Runs `stoker ARGS` to the end; returns its wall time in microseconds.
long run_timed(const std::vector<std::string>& args) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = spawn(args);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << args[0] << " " << args[1];
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
}

// Runs `stoker ARGS` and SIGKILLs it after `us` microseconds (if it is still running).
void run_killed_after(const std::vector<std::string>& args, long us) {
  const pid_t pid = spawn(args);
  ::usleep(static_cast<useconds_t>(us));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// The records of a dataset as bytes, or nullopt when `dir` holds no readable dataset.
std::optional<std::vector<std::vector<uint8_t>>> records_or_none(const std::string& dir) {
  try {
    auto ds = Dataset::open(dir);
    std::vector<std::vector<uint8_t>> out;
    for (uint64_t i = 0; i < ds->record_count(); ++i) out.push_back(ds->read(i).buffer);
    return out;
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::map<std::string, std::string> files_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = slurp(e.path());
  return out;
}

// Kills pack, pack --overwrite and extract at 24 points each, spread over the time an
// uninterrupted run takes: what is left must be the old dataset or the new one (or, for
// a first pack or extract, nothing), never something verify accepts that is neither.
TEST(CliSignals, KillNineAnywhereLeavesTheOldOrTheNewDataset) {
  TempDir tmp;
  SampleImageFolderOptions so;
  so.images = 10;
  so.classes = 2;
  so.seed = 1;
  make_sample_imagefolder(tmp.str("src-old"), so);
  so.seed = 2;
  make_sample_imagefolder(tmp.str("src-new"), so);
  const std::vector<std::string> shard_opts = {"--shard-size", "64KiB", "--threads", "1"};
  auto pack_args = [&](const std::string& src, const std::string& out, bool overwrite) {
    std::vector<std::string> a = {"pack", "imagefolder", src, out};
    a.insert(a.end(), shard_opts.begin(), shard_opts.end());
    if (overwrite) a.push_back("--overwrite");
    return a;
  };
  run_timed(pack_args(tmp.str("src-old"), tmp.str("ref-old"), false));
  const long pack_us = run_timed(pack_args(tmp.str("src-new"), tmp.str("ref-new"), false));
  const auto old_records = records_or_none(tmp.str("ref-old")), new_records = records_or_none(tmp.str("ref-new"));
  ASSERT_TRUE(old_records && new_records);
  ASSERT_NE(*old_records, *new_records);
  const long extract_us = run_timed({"extract", tmp.str("ref-new"), tmp.str("ref-x")});
  const auto extracted = files_of(tmp.str("ref-x"));

  constexpr int kPoints = 24;
  int saw_old = 0, saw_new = 0, saw_none = 0;
  for (int k = 0; k < kPoints; ++k) {
    SCOPED_TRACE("kill point " + std::to_string(k));
    // The points spread over the reference run's time; the last one lies well past it, so
    // that a run slowed by a loaded machine is still seen whole once.
    const auto at = [&](long run_us) { return k == kPoints - 1 ? run_us * 4 : run_us * k / (kPoints - 2); };
    // A first pack: nothing or the new dataset.
    const std::string out = tmp.str("p" + std::to_string(k));
    run_killed_after(pack_args(tmp.str("src-new"), out, false), at(pack_us));
    const auto got = records_or_none(out);
    if (got) EXPECT_EQ(*got, *new_records);
    if (verify_path(out).ok()) EXPECT_TRUE(got && *got == *new_records);

    // An overwrite: the old dataset or the new one, never none.
    const std::string ow = tmp.str("o" + std::to_string(k));
    fs::copy(tmp.str("ref-old"), ow);
    run_killed_after(pack_args(tmp.str("src-new"), ow, true), at(pack_us));
    const auto now = records_or_none(ow);
    ASSERT_TRUE(now.has_value()) << "no dataset left after an overwrite was killed";
    EXPECT_TRUE(*now == *old_records || *now == *new_records);
    (*now == *old_records ? saw_old : saw_new)++;
    if (verify_path(ow).ok()) EXPECT_TRUE(*now == *old_records || *now == *new_records);

    // An extract: no output directory, or the whole one.
    const std::string x = tmp.str("x" + std::to_string(k));
    run_killed_after({"extract", tmp.str("ref-new"), x}, at(extract_us));
    if (fs::exists(x)) EXPECT_EQ(files_of(x), extracted);
    else ++saw_none;
  }
  // The points spread over the runs: both outcomes were seen.
  std::printf("overwrite killed: %d old, %d new; extract killed: %d none\n", saw_old, saw_new, saw_none);
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);
}

TEST(CliCommands, BenchCompareShowsAFastCropPackBesideThePlainOne) {
  if (!python_can_plot()) GTEST_SKIP() << "/usr/bin/python3 lacks matplotlib/numpy";
  TempDir d;
  ASSERT_TRUE(ok("sample imagefolder " + d.str("imgs") + " --images 16 --classes 2 --seed 4"));
  ASSERT_TRUE(ok("pack imagefolder " + d.str("imgs") + " " + d.str("plain")));
  ASSERT_TRUE(ok("pack imagefolder " + d.str("imgs") + " " + d.str("fast") + " --fast-crop"));
  ASSERT_TRUE(ok("bench compare " + d.str("plain") + " --fast-crop-dataset " + d.str("fast") +
                 " --threads 1 --seconds 0.5 --batch 8 --rounds 1 --out " + d.str("cmp")));
  const std::string text = slurp(d.str("cmp/compare.json"));
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  EXPECT_EQ(j["fast_crop_dataset"], d.str("fast"));
  ASSERT_EQ(j["fast_crop"].size(), 2u) << text;
  std::set<std::string> transforms;
  for (const auto& x : j["fast_crop"]) {
    ASSERT_FALSE(x.contains("error")) << x.dump();
    transforms.insert(x["transform"].get<std::string>());
    EXPECT_GT(x["plain_samples_per_s"].get<double>(), 0) << x.dump();
    EXPECT_GT(x["fast_crop_samples_per_s"].get<double>(), 0) << x.dump();
    EXPECT_NEAR(x["ratio"].get<double>(),
                x["fast_crop_samples_per_s"].get<double>() / x["plain_samples_per_s"].get<double>(), 1e-9);
  }
  EXPECT_EQ(transforms, (std::set<std::string>{"train", "eval"}));
  const std::string md = slurp(d.str("cmp/compare.md"));
  EXPECT_TRUE(has(md, "| transform | threads | plain samples/s | --fast-crop samples/s | fast-crop / plain |")) << md;
  EXPECT_TRUE(has(md, "| train | 1 |")) << md;
  EXPECT_TRUE(has(md, "| eval | 1 |")) << md;
}

// A dataset of videos: its clip feed beside PyAV in a DataLoader over the files it was
// packed from, both in clips/s, each at --clip's frames and size; PyAV's clips have the
// shape of the loader's.
TEST(CliCommands, BenchCompareShowsVideoClipsBesidePyAV) {
  if (!python_can_plot()) GTEST_SKIP() << "/usr/bin/python3 lacks matplotlib/numpy";
  if (!testing::have_ffmpeg() || std::system("/usr/bin/python3 -c 'import av, torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs the ffmpeg CLI and Debian's python3-av and python3-torch";
  TempDir d;
  const auto mp4 = testing::make_video(d, "made.mp4", testing::grey() + " -c:v libx264 -g 10 -pix_fmt yuv420p");
  for (const char* f : {"a/v0.mp4", "a/v1.mp4", "b/v2.mp4", "b/v3.mp4"}) {
    fs::create_directories(fs::path(d.str("vids/" + std::string(f))).parent_path());
    testing::write_file(d.str("vids/" + std::string(f)), mp4);
  }
  ASSERT_TRUE(ok("pack videofolder " + d.str("vids") + " " + d.str("ds")));
  ASSERT_TRUE(ok("bench compare " + d.str("ds") + " --videos " + d.str("vids") +
                 " --clip 4:3:32 --threads 1 --seconds 0.5 --batch 2 --rounds 1 --out " + d.str("cmp")));

  const std::string text = slurp(d.str("cmp/compare.json"));
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << text;
  std::map<std::string, nlohmann::json> rows;
  for (const auto& x : j["results"]) {
    EXPECT_NE(x["workload"], "images") << "no image rows for a dataset of videos: " << x.dump();
    if (x["workload"] == "videos") rows[x["feeder"].get<std::string>()] = x;
  }
  ASSERT_TRUE(rows.count("stoker") && rows.count("PyAV DataLoader")) << text;
  const auto& st = rows["stoker"];
  const auto& av = rows["PyAV DataLoader"];
  for (const auto* x : {&st, &av}) {
    EXPECT_FALSE(x->contains("error") || x->contains("status")) << x->dump();
    EXPECT_GT(x->value("samples_per_s", 0.0), 0) << x->dump();
    EXPECT_EQ((*x)["unit"], "clips/s");
    EXPECT_EQ((*x)["clip"], (nlohmann::json{{"frames", 4}, {"stride", 3}, {"size", 32}}));
  }
  EXPECT_NEAR(st["stoker_per_pyav"].get<double>(), st["samples_per_s"].get<double>() / av["samples_per_s"].get<double>(),
              1e-9);
  ASSERT_EQ(j["limits"]["video_decode"].size(), 1u) << text;
  EXPECT_GT(j["limits"]["video_decode"][0]["samples_per_s"].get<double>(), 0);

  // The loader's clips of the same spec: [B, 4, 32, 32, 3]; PyAV's, one at a time, the same.
  LoaderOptions lo = testing::default_options(d.str("ds"), 2);
  FieldTransform& f = lo.fields["video"];
  f.kind = FieldTransform::Kind::kVideoClip;
  f.video.frames = 4, f.video.stride = 3, f.video.height = f.video.width = 32;
  Loader loader(lo);
  const auto b = loader.next();
  ASSERT_TRUE(b);
  const auto& shape = (*b)["video"].shape;
  EXPECT_EQ(av["clip_shape"].get<std::vector<int64_t>>(), std::vector<int64_t>(shape.begin() + 1, shape.end())) << text;
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 4, 32, 32, 3}));

  const std::string md = slurp(d.str("cmp/compare.md"));
  EXPECT_TRUE(has(md, "| threads | stoker clips/s | PyAV clips/s | stoker / PyAV |")) << md;
  EXPECT_TRUE(has(md, "| videos | PyAV DataLoader | 1 |")) << md;
  EXPECT_EQ(slurp(d.str("cmp/compare.png")).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
}  // namespace stoker
