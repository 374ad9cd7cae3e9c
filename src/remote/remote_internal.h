// Private pieces of the remote layer (include/stoker/remote.h): where a dataset lives,
// the credentials it is fetched with, and the curl multi fetch loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string_view>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/remote.h"

namespace stoker::internal {

/// The scheme of a dataset location; kFile is a local path, which the remote layer
/// never fetches.
enum class LocationKind : uint8_t { kFile, kHttp, kHttps, kS3 };

struct Location;

/// What a scheme means to the remote layer: one row per LocationKind (location.cc), the
/// one place that tells schemes apart.
struct SchemeRow {
  LocationKind kind;
  const char* prefix;  ///< "s3://"; "" for kFile
  /// Fills `loc` (kind set already) from `url`, which starts with `prefix`;
  /// kInvalidArgument naming what is wrong. nullptr for kFile.
  void (*parse)(const std::string& url, const std::string& profile, Location& loc);
  /// Requests carry S3's headers (unsigned payload, session token) and, when the
  /// location has a key, an AWS SigV4 signature.
  bool aws_signed;
};

/// The row of `kind`.
const SchemeRow& scheme_row(LocationKind kind) noexcept;

/// The kind of `url` from its scheme prefix; kFile for anything that is not a remote URL.
LocationKind location_kind_of(std::string_view url) noexcept;

/// A parsed dataset location. `base` + "/" + object name is the request URL.
struct Location {
  LocationKind kind = LocationKind::kFile;
  std::string base;     ///< request prefix, no trailing '/'
  std::string display;  ///< what errors print (redacted)
  // s3:// only: the bucket's URL (ListObjectsV2 goes there) and the key prefix of the
  // dataset's objects (no trailing '/'; "" for a whole bucket).
  std::string bucket_url, key_prefix;
  // s3:// only. Never printed: see redact_secrets().
  std::string region, key_id, secret, token;
};

/// Parses http(s):// or s3:// (credentials, region and endpoint from the environment and
/// ~/.aws files, profile `profile` or $AWS_PROFILE or "default"). kInvalidArgument.
Location parse_location(const std::string& url, const std::string& profile);

/// Percent-encodes `text` as SigV4 canonicalises it: RFC 3986 unreserved characters
/// kept, and '/' too when `keep_slash` (an object key in a path; a query value encodes it).
std::string percent_encode(std::string_view text, bool keep_slash);

/// Key/value pairs of section `section` of an AWS ini text (credentials/config file).
std::map<std::string, std::string> parse_ini_section(std::string_view text, const std::string& section);

/// The <Code> and <Message> of an S3 XML error body, or the first line of a plain-text
/// one, at most ~400 bytes; "" for HTML. Never other elements: S3 echoes the access key
/// and the string it signed in them.
std::string summarize_error_body(const std::string& body);

/// First byte of a "Content-Range: bytes A-B/N" header line; -1 when the line is not
/// one or does not parse.
int64_t content_range_start(std::string_view line);

/// Replaces every occurrence of the location's secrets in `text` with "***".
std::string redact_secrets(const Location& loc, std::string text);

/// One ranged GET: `length` bytes at `offset` of `url`, into `mem` or (when mem is null)
/// into `fd` at the same offset. `whole` asks for the entire object into `out`.
struct Part {
  std::string url;     ///< full request URL (may hold userinfo: never printed)
  std::string shown;   ///< printable URL
  std::string what;    ///< "shard shard-00003.stk"
  uint64_t offset = 0;
  uint64_t length = 0;
  uint8_t* mem = nullptr;
  int fd = -1;
  bool whole = false;
  /// Ask without a Range header (a server known to ignore it): the 200 answer's bytes
  /// before `offset` are dropped, as for any 200 answer to a range.
  bool no_range = false;
  std::string* out = nullptr;
  /// Called (on run()'s thread) once the part's bytes are all in, before run() returns.
  std::function<void()> on_done;
};

/// The curl side: a share handle (connections, DNS, TLS sessions) reused across calls,
/// counters, and run(), which fetches parts with up to `connections` in flight.
class Fetcher {
 public:
  Fetcher(Location loc, RemoteOptions options);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;

  /// Fetches every part (retrying as the options say) or throws the first persistent
  /// failure, with the others cancelled.
  void run(std::vector<Part>& parts);
  RemoteStats stats() const;
  const Location& location() const noexcept { return loc_; }
  const RemoteOptions& options() const noexcept { return options_; }

  // Counters, updated by run() (public for its helpers).
  void begin_request();
  void end_request();
  std::atomic<uint64_t> bytes{0}, requests{0}, retries{0}, failures{0};
  /// A ranged GET got an answer (206 or 200); the server ignored Range (200).
  std::atomic<bool> range_known{false}, range_ignored{false};
  std::atomic<uint64_t> whole_fetches{0};
  /// A 200 answer to a ranged GET of `shown`: records it, warning once naming the server.
  void note_range_ignored(const std::string& shown);

  /// The retry budget (RemoteOptions::timeout), shared by every request: a success ends
  /// a failing spell; a failure starts one, and returns the seconds it has lasted.
  void note_success();
  double note_failure();

 private:
  struct Share;
  Location loc_;
  RemoteOptions options_;
  std::unique_ptr<Share> share_;
  mutable std::mutex busy_mu_;
  uint64_t inflight_ = 0;
  std::chrono::steady_clock::time_point busy_since_;
  double busy_s_ = 0;
  // inflight_ integrated over time up to last_change_ (RemoteStats::request_s).
  std::chrono::steady_clock::time_point last_change_;
  double request_s_ = 0;
  std::mutex budget_mu_;
  std::chrono::steady_clock::time_point failing_since_{}, last_failure_{};  // {}: not failing
};

}  // namespace stoker::internal
