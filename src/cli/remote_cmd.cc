// The remote forms of verify, inspect and doctor (src/cli/remote_cmd.h).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "remote_cmd.h"
#include "stoker/diagnose.h"
// Internal (the tool links the library statically): a remote dataset's fast_crop check,
// read from its MANIFEST, replaces the local one run_doctor made.
#include "diagnose/doctor_checks.h"
#include "stoker/error.h"
#include "stoker/remote.h"
#include "stoker/verify.h"
// Internal (the tool links the library statically): the Json type, the one JSON writer
// and the library's reports as values (to_json_value), so --json prints the library's
// own JSON, measurements rounded as every report rounds them (figure).
#include "util/json.h"
// Internal, header-only: the one RAII file descriptor.
#include "util/unique_fd.h"

namespace stoker::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

RemoteOptions RemoteArgs::options() const {
  RemoteOptions o;
  o.connections = connections;
  if (!part.empty()) o.part_bytes = parse_size(part);
  o.aws_profile = profile;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return o;
}

void add_remote_options(CLI::App* cmd, RemoteArgs& a) {
  cmd->add_option("--connections", a.connections, "URL: ranged GETs in flight at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--part", a.part, "URL: bytes per ranged GET of a shard download (default 4MiB, at least 64KiB)")
      ->check(byte_size());
  cmd->add_option("--remote-timeout", a.timeout_s,
                  "URL: seconds without any successful request before a failing one is given up on (the retry "
                  "budget of all requests together)")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--profile", a.profile, "s3:// URL: the credentials profile (default: $AWS_PROFILE or default)");
}

void reject_options(const CLI::App* cmd, const std::vector<std::string>& names, const std::string& why) {
  for (const std::string& n : names)
    if (cmd->count(n) > 0) throw UsageError(n + " does not apply " + why);
}

// Every shard is downloaded to a scratch file and checked by the same verify_shard the
// local command runs; problems name the URL of the shard.
int verify_remote(const std::vector<std::string>& paths, const VerifyOptions& options, bool quiet,
                  const std::string& tmp, const RemoteArgs& remote) {
  const bool tty = ::isatty(2) && !quiet;
  size_t problems = 0;
  uint64_t records = 0, shards = 0, bytes = 0;
  const auto t0 = Clock::now();
  const std::string tmp_dir = tmp.empty() ? fs::temp_directory_path().string() : tmp;
  const RemoteOptions ro = remote.options();
  for (const std::string& url : paths) {
    if (!is_remote_url(url)) {  // a local path among URLs: the local check
      VerifyReport r = verify_path(url, options);
      for (const auto& pr : r.problems) std::cout << "FAIL " << pr.to_string() << "\n";
      problems += r.problems.size();
      records += r.records;
      shards += r.shards;
      bytes += r.bytes;
      continue;
    }
    auto store = RemoteStore::open(url, ro);
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
        r = verify_shard(scratch, &e, options);
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
int inspect_remote(const std::string& url, bool json, const RemoteArgs& remote) {
  auto store = RemoteStore::open(url, remote.options());
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
  if (json) {
    internal::Json meta = internal::Json::object();
    for (auto& [k, v] : m.meta) meta[k] = v;
    const internal::Json o = {{"path", store->display_url()},
                              {"kind", "remote dataset"},
                              {"schema", m.schema.to_string()},
                              {"shards", m.shards.size()},
                              {"records", records},
                              {"bytes", bytes},
                              {"raw_bytes", raw},
                              {"stored_bytes", stored},
                              {"compressed_records", compressed},
                              {"compression_ratio", internal::figure(ratio)},
                              {"classes", m.class_names.size()},
                              {"class_names", m.class_names},
                              {"meta", std::move(meta)},
                              {"requests", rs.requests}};
    std::cout << internal::json_text(o) << "\n";
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
DoctorReport doctor_remote(DoctorOptions o, const std::string& url, uint64_t probe, const RemoteArgs& remote) {
  o.dataset.reset();
  DoctorReport r = run_doctor(o);
  // The local dataset checks have nothing to look at; the remote ones stand in.
  std::erase_if(r.checks, [](const Check& c) { return c.name == "o_direct" || c.name == "read_probe"; });
  for (Check& c : r.checks)
    if (c.name == "fast_crop") c = internal::check_fast_crop(url);  // from the remote MANIFEST
  for (Check& c : check_remote_dataset(url, probe, remote.options())) r.checks.push_back(std::move(c));
  return r;
}

}  // namespace stoker::cli
