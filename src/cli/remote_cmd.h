// The remote forms of `stoker verify URL`, `stoker inspect URL`, `stoker bench io URL
// --cache-dir DIR` and `stoker doctor --dataset URL` (include/stoker/remote.h).
//
// The local commands declare every option (CLI11 parses them all) and, when their path
// is an http(s):// or s3:// location (is_remote_url), call the functions here with what
// was parsed: nothing here parses arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"
#include "stoker/diagnose.h"
#include "stoker/remote.h"
#include "stoker/verify.h"

namespace stoker::cli {

/// How a command reaches a remote dataset: --connections, --part, --remote-timeout, --profile.
struct RemoteArgs {
  unsigned connections = RemoteOptions{}.connections;
  std::string part;     ///< bytes per ranged GET ("4MiB"); "" = the default
  std::string profile;  ///< s3:// credentials profile; "" = $AWS_PROFILE or "default"
  double timeout_s = 60;  ///< --remote-timeout: RemoteOptions::timeout in seconds
  RemoteOptions options() const;
};

/// Declares --connections, --part, --remote-timeout and --profile on `cmd`, parsed into `a`.
void add_remote_options(CLI::App* cmd, RemoteArgs& a);

/// Fails with a usage error naming the first of `names` given on `cmd`: options that do
/// not apply to the kind of location given (`why`: "with a URL", "with a local path").
void reject_options(const CLI::App* cmd, const std::vector<std::string>& names, const std::string& why);

/// `stoker verify`: URLs are downloaded shard by shard into a scratch file under
/// `tmp_dir` ("" = the system's) and checked as local shards are; local paths among
/// them are checked locally. One "FAIL" line per problem; exit 1 when any.
int verify_remote(const std::vector<std::string>& paths, const VerifyOptions& options, bool quiet,
                  const std::string& tmp_dir, const RemoteArgs& remote);

/// `stoker inspect URL`: the manifest plus every shard's index.
int inspect_remote(const std::string& url, bool json, const RemoteArgs& remote);

/// `stoker doctor --dataset URL`: the platform checks of `o` (its dataset unset), the
/// local dataset checks replaced by the remote dataset's own (at most `probe_bytes` read).
DoctorReport doctor_remote(DoctorOptions o, const std::string& url, uint64_t probe_bytes, const RemoteArgs& remote);

/// `stoker bench io URL --cache-dir DIR` (src/cli/bench_remote_cmd.cc).
struct BenchRemoteArgs {
  std::string url, cache_dir, local_dir;
  uint64_t cache_limit = 0;  ///< 0: the dataset's size (everything fits)
  unsigned prefetch = 4, fetch_threads = 2;
  int rounds = 3;
  bool fsync = true, json = false;
  RemoteArgs remote;
};
int bench_io_remote(const BenchRemoteArgs& a);

}  // namespace stoker::cli
