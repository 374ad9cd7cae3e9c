// The remote forms of `stoker verify URL`, `stoker inspect URL`, `stoker bench io URL
// --cache-dir DIR` and `stoker doctor --dataset URL` (include/stoker/remote.h).
//
// main() asks run_remote() first: when the command is one of these and names an
// http(s):// or s3:// location it runs here, otherwise the local command runs. Kept in
// one file of its own so the local commands stay as they are.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "stoker/diagnose.h"
#include "stoker/error.h"
#include "stoker/remote.h"
#include "stoker/verify.h"
#include "util/unique_fd.h"

namespace stoker::cli {

int bench_io_remote(const Args& args);  // bench/cli/bench_remote.cc

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

RemoteOptions remote_options(const ArgParser& p) {
  RemoteOptions o;
  const int64_t c = p.get_int("connections", o.connections);
  if (c < 1 || c > 256) throw_error(ErrorCode::kInvalidArgument, "--connections must be 1..256");
  o.connections = static_cast<unsigned>(c);
  if (auto v = p.get("part")) o.part_bytes = parse_size(*v);
  if (auto v = p.get("profile")) o.aws_profile = *v;
  return o;
}

// Every shard is downloaded to a scratch file and checked by the same verify_shard the
// local command runs; problems name the URL of the shard.
int verify_remote(const Args& args) {
  ArgParser p(args, {"quiet"});
  p.check_known({"quiet", "threads", "connections", "part", "profile", "tmp-dir"});
  const bool tty = ::isatty(2) && !p.flag("quiet");
  size_t problems = 0;
  uint64_t records = 0, shards = 0, bytes = 0;
  const auto t0 = Clock::now();
  std::string tmp_dir = p.get_or("tmp-dir", "");
  if (tmp_dir.empty()) tmp_dir = fs::temp_directory_path().string();
  for (const std::string& url : p.positional()) {
    if (!is_remote_url(url)) {  // a local path among URLs: the local check
      VerifyReport r = verify_path(url, static_cast<unsigned>(p.get_int("threads", 0)));
      for (const auto& pr : r.problems) std::cout << "FAIL " << pr.to_string() << "\n";
      problems += r.problems.size();
      records += r.records;
      shards += r.shards;
      bytes += r.bytes;
      continue;
    }
    auto store = RemoteStore::open(url, remote_options(p));
    Manifest m;
    try {
      m = store->read_manifest();
    } catch (const Error& e) {
      std::cout << "FAIL " << e.what() << "\n";
      ++problems;
      continue;
    }
    const std::string scratch = tmp_dir + "/stoker-verify-" + std::to_string(::getpid()) + ".stk";
    struct Remove {
      std::string p;
      ~Remove() { ::unlink(p.c_str()); }
    } remove{scratch};
    for (size_t s = 0; s < m.shards.size(); ++s) {
      const ShardEntry& e = m.shards[s];
      if (tty)
        std::fprintf(stderr, "\rverifying %s: shard %zu of %zu   ", store->display_url().c_str(), s + 1, m.shards.size());
      VerifyReport r;
      try {
        internal::UniqueFd fd(::open(scratch.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
        if (!fd) throw errno_error("create " + scratch, errno);
        store->download(e.name, e.file_size, fd.get(), "shard " + e.name);
        r = verify_shard(scratch, &e);
      } catch (const Error& err) {
        r.shards = 1;
        r.problems.push_back({store->object_url(e.name), "file", err.what()});
      }
      for (auto& pr : r.problems) {
        if (pr.file == scratch) pr.file = store->object_url(e.name);
        std::cout << "FAIL " << pr.to_string() << "\n";
      }
      problems += r.problems.size();
      records += r.records;
      shards += r.shards;
      bytes += r.bytes;
    }
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%s: %llu shards, %llu records, %s fetched and checked in %.2f s (%.0f MB/s), %zu problem%s\n",
              problems ? "FAILED" : "OK", static_cast<unsigned long long>(shards),
              static_cast<unsigned long long>(records), format_bytes(static_cast<double>(bytes)).c_str(), s,
              bytes / 1e6 / std::max(s, 1e-6), problems, problems == 1 ? "" : "s");
  return problems ? 1 : 0;
}

// The manifest plus every shard's index (three small ranged GETs per shard).
int inspect_remote(const Args& args) {
  ArgParser p(args, {"json"});
  p.check_known({"json", "connections", "part", "profile"});
  if (p.positional().size() != 1) throw_error(ErrorCode::kInvalidArgument, "usage: stoker inspect URL [--json]");
  auto store = RemoteStore::open(p.positional()[0], remote_options(p));
  const Manifest m = store->read_manifest();
  uint64_t raw = 0, stored = 0, compressed = 0;
  for (const ShardEntry& e : m.shards) {
    auto shard = RemoteShard::open(store, e);
    for (uint64_t i = 0; i < shard->record_count(); ++i) {
      raw += shard->location(i).raw_size;
      stored += shard->location(i).stored_size;
      compressed += (shard->location(i).flags & kRecordZstd) != 0;
    }
  }
  const uint64_t records = m.total_records(), bytes = m.total_bytes();
  const double ratio = stored ? static_cast<double>(raw) / static_cast<double>(stored) : 1.0;
  const RemoteStats rs = store->stats();
  if (p.flag("json")) {
    nlohmann::json o = {{"path", store->display_url()},  {"kind", "remote dataset"},
                        {"schema", m.schema.to_string()}, {"shards", m.shards.size()},
                        {"records", records},             {"bytes", bytes},
                        {"raw_bytes", raw},               {"stored_bytes", stored},
                        {"compressed_records", compressed}, {"compression_ratio", ratio},
                        {"classes", m.class_names.size()}, {"meta", m.meta},
                        {"requests", rs.requests}};
    std::cout << o.dump() << "\n";
    return 0;
  }
  std::printf("%-10s %s (remote dataset)\n", "path", store->display_url().c_str());
  std::printf("%-10s %s\n", "schema", m.schema.to_string().c_str());
  std::printf("%-10s %zu\n", "shards", m.shards.size());
  std::printf("%-10s %llu\n", "records", static_cast<unsigned long long>(records));
  std::printf("%-10s %s (%llu bytes in shard files)\n", "bytes", format_bytes(static_cast<double>(bytes)).c_str(),
              static_cast<unsigned long long>(bytes));
  std::printf("%-10s raw %s, stored %s, ratio %.2fx (%llu of %llu records compressed)\n", "payload",
              format_bytes(static_cast<double>(raw)).c_str(), format_bytes(static_cast<double>(stored)).c_str(), ratio,
              static_cast<unsigned long long>(compressed), static_cast<unsigned long long>(records));
  std::printf("%-10s %zu\n", "classes", m.class_names.size());
  for (auto& [k, v] : m.meta) std::printf("%-10s %s = %s\n", "meta", k.c_str(), v.c_str());
  std::printf("%-10s %llu requests, %s fetched\n", "fetched", static_cast<unsigned long long>(rs.requests),
              format_bytes(static_cast<double>(rs.bytes_fetched)).c_str());
  return 0;
}

// The platform checks of the local doctor, then the remote dataset's own.
int doctor_remote(const Args& args, const std::string& url) {
  ArgParser p(args, {"json"});
  p.check_known({"json", "device", "dataset", "root", "threads", "pinned", "probe", "connections", "part", "profile"});
  DoctorOptions o;
  o.root = p.get_or("root", "/");
  o.device = static_cast<int>(p.get_int("device", -1));
  o.threads = static_cast<unsigned>(std::max<int64_t>(0, p.get_int("threads", 0)));
  if (auto v = p.get("pinned")) o.pinned_bytes = parse_size(*v);
  const uint64_t probe = p.get("probe") ? parse_size(*p.get("probe")) : 128ull << 20;
  DoctorReport r = run_doctor(o);
  // The local dataset checks have nothing to look at; the remote ones stand in.
  std::erase_if(r.checks, [](const Check& c) { return c.name == "o_direct" || c.name == "read_probe"; });
  for (Check& c : check_remote_dataset(url, probe, remote_options(p))) r.checks.push_back(std::move(c));
  if (p.flag("json")) {
    std::printf("%s\n", r.to_json().c_str());
  } else {
    std::printf("%s", r.to_text().c_str());
  }
  return r.failed() ? 1 : 0;
}

bool any_remote(const std::vector<std::string>& v) {
  for (const auto& s : v)
    if (is_remote_url(s)) return true;
  return false;
}

}  // namespace

std::optional<int> run_remote(const std::string& words, const Args& args) {
  if (words == "doctor") {
    ArgParser p(args, {"json"});
    auto d = p.get("dataset");
    if (d && is_remote_url(*d)) return doctor_remote(args, *d);
    return std::nullopt;
  }
  if (words != "verify" && words != "inspect" && words != "bench io") return std::nullopt;
  ArgParser p(args, {"json", "quiet", "verify", "buffered", "drop-caches", "no-fsync"});
  if (!any_remote(p.positional())) return std::nullopt;
  if (words == "verify") return verify_remote(args);
  if (words == "inspect") return inspect_remote(args);
  return bench_io_remote(args);
}

}  // namespace stoker::cli
