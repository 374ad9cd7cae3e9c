// Dataset locations: http(s):// URLs and s3:// buckets with their AWS configuration.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>

#include "remote/remote_internal.h"
#include "stoker/error.h"

namespace stoker {

bool is_remote_url(std::string_view s) { return internal::location_kind_of(s) != internal::LocationKind::kFile; }

std::string redact_url(std::string_view url) {
  std::string u(url);
  const size_t scheme = u.find("://");
  if (scheme == std::string::npos) return u;
  const size_t host = scheme + 3;
  const size_t end = u.find_first_of("/?#", host);
  const size_t at = u.rfind('@', end == std::string::npos ? u.size() : end);
  if (at == std::string::npos || at < host) return u;
  return u.substr(0, host) + "***" + u.substr(at);
}

namespace internal {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Key/value pairs of one section of an AWS ini file (empty when absent or unreadable).
std::map<std::string, std::string> ini_section(const std::string& path, const std::string& section) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_ini_section(text, section);
}

std::string strip_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::string percent_encode(std::string_view text, bool keep_slash) {
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

std::map<std::string, std::string> parse_ini_section(std::string_view text, const std::string& section) {
  std::map<std::string, std::string> out;
  bool inside = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line = trim(std::string(text.substr(pos, nl - pos)));
    pos = nl + 1;
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      continue;
    }
    if (!inside) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

namespace {

void parse_http(const std::string& url, const std::string&, Location& loc) {
  const size_t host = url.find("://") + 3;
  if (host >= url.size() || url[host] == '/')
    throw_error(ErrorCode::kInvalidArgument, "remote dataset " + redact_url(url) + ": no host in the URL");
  if (url.find_first_of("?#") != std::string::npos)
    throw_error(ErrorCode::kInvalidArgument,
                "remote dataset " + redact_url(url) + ": a dataset URL names a directory; no query or fragment");
  loc.base = strip_slashes(url);
  loc.display = redact_url(loc.base);
  // A password in the URL's userinfo is a secret like any other: kept out of messages
  // even where curl might echo it.
  const size_t end = url.find('/', host);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at != std::string::npos && at > host) {
    const std::string userinfo = url.substr(host, at - host);
    const size_t colon = userinfo.find(':');
    if (colon != std::string::npos) loc.secret = userinfo.substr(colon + 1);
  }
}

void parse_s3(const std::string& url, const std::string& profile_opt, Location& loc) {
  std::string rest = strip_slashes(url.substr(5));
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket.empty() || bucket.find_first_of("@:?#") != std::string::npos)
    throw_error(ErrorCode::kInvalidArgument, "'" + url + "': s3:// needs a bucket name (s3://bucket/prefix)");
  loc.display = "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix);

  std::string profile = profile_opt.empty() ? env("AWS_PROFILE") : profile_opt;
  if (profile.empty()) profile = "default";
  const std::string home = env("HOME");
  std::string cred_file = env("AWS_SHARED_CREDENTIALS_FILE"), config_file = env("AWS_CONFIG_FILE");
  if (cred_file.empty() && !home.empty()) cred_file = home + "/.aws/credentials";
  if (config_file.empty() && !home.empty()) config_file = home + "/.aws/config";
  auto creds = ini_section(cred_file, profile);
  auto config = ini_section(config_file, profile == "default" ? "default" : "profile " + profile);

  loc.key_id = env("AWS_ACCESS_KEY_ID");
  loc.secret = env("AWS_SECRET_ACCESS_KEY");
  loc.token = env("AWS_SESSION_TOKEN");
  if (loc.key_id.empty() || loc.secret.empty()) {
    // The profile's keys: the credentials file first, then the config file.
    for (auto* m : {&creds, &config}) {
      if (m->count("aws_access_key_id") && m->count("aws_secret_access_key")) {
        loc.key_id = (*m)["aws_access_key_id"];
        loc.secret = (*m)["aws_secret_access_key"];
        loc.token = m->count("aws_session_token") ? (*m)["aws_session_token"] : "";
        break;
      }
    }
  }
  loc.region = env("AWS_REGION");
  if (loc.region.empty()) loc.region = env("AWS_DEFAULT_REGION");
  if (loc.region.empty() && config.count("region")) loc.region = config["region"];
  if (loc.region.empty()) loc.region = "us-east-1";
  for (char c : loc.region)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      throw_error(ErrorCode::kInvalidArgument, "AWS region '" + loc.region + "' is not a region name");

  std::string endpoint = env("AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_URL");
  if (endpoint.empty() && config.count("endpoint_url")) endpoint = config["endpoint_url"];
  const std::string key_part = prefix.empty() ? "" : "/" + percent_encode(prefix, true);
  if (!endpoint.empty()) {
    if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0)
      throw_error(ErrorCode::kInvalidArgument, "S3 endpoint '" + redact_url(endpoint) + "' is not an http(s):// URL");
    // A custom endpoint (MinIO, Ceph, a test server) is addressed path-style: bucket
    // names there need not be DNS names.
    loc.bucket_url = strip_slashes(endpoint) + "/" + bucket;
  } else {
    loc.bucket_url = "https://" + bucket + ".s3." + loc.region + ".amazonaws.com";
  }
  loc.base = loc.bucket_url + key_part;
  loc.key_prefix = prefix;
}

// Ordered as LocationKind.
constexpr SchemeRow kSchemes[] = {
    {LocationKind::kFile, "", nullptr, false},
    {LocationKind::kHttp, "http://", parse_http, false},
    {LocationKind::kHttps, "https://", parse_http, false},
    {LocationKind::kS3, "s3://", parse_s3, true},
};

}  // namespace

static_assert(kSchemes[static_cast<size_t>(LocationKind::kS3)].kind == LocationKind::kS3);

const SchemeRow& scheme_row(LocationKind kind) noexcept { return kSchemes[static_cast<size_t>(kind)]; }

LocationKind location_kind_of(std::string_view url) noexcept {
  for (const SchemeRow& row : kSchemes)
    if (row.parse != nullptr && url.rfind(row.prefix, 0) == 0) return row.kind;
  return LocationKind::kFile;
}

Location parse_location(const std::string& url, const std::string& profile) {
  Location loc;
  loc.kind = location_kind_of(url);
  const SchemeRow& row = scheme_row(loc.kind);
  if (row.parse == nullptr)
    throw_error(ErrorCode::kInvalidArgument, "'" + redact_url(url) + "' is not an http://, https:// or s3:// URL");
  row.parse(url, profile, loc);
  return loc;
}

std::string redact_secrets(const Location& loc, std::string text) {
  for (const std::string* s : {&loc.secret, &loc.token, &loc.key_id}) {
    if (s->size() < 4) continue;  // too short to hide without mangling ordinary words
    for (size_t p = text.find(*s); p != std::string::npos; p = text.find(*s, p)) text.replace(p, s->size(), "***");
  }
  return text;
}

}  // namespace internal
}  // namespace stoker
