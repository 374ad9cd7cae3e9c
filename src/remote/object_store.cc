// DatasetStore over an S3 prefix: the writers' and commit's side of the remote layer.
// Objects are written by PUT (multipart above RemoteOptions::upload_part_bytes), listed by ListObjectsV2,
// published once by a conditional PUT; every request is SigV4-signed by libcurl and
// retried on 5xx, 429 and connection faults within the RemoteOptions budget.
#include <curl/curl.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "remote/remote_internal.h"
#include "stoker/dataset_store.h"
#include "stoker/error.h"
#include "stoker/remote.h"
#include "util/bytes.h"
#include "util/unique_fd.h"

namespace stoker {
namespace {

using internal::Location;

// Uploads running at once; upload() waits while this many more are queued, so the
// staging directory holds at most 2 * kUploaders + 1 finished shards.
constexpr unsigned kUploaders = 2;

std::string xml_unescape(std::string s) {
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities)
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + 1)) s.replace(p, std::strlen(from), to);
  return s;
}

// Every <tag>...</tag> in `xml`, in order.
std::vector<std::string> xml_values(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  for (size_t p = xml.find(open); p != std::string::npos; p = xml.find(open, p)) {
    const size_t b = p + open.size(), e = xml.find(close, b);
    if (e == std::string::npos) break;
    out.push_back(xml_unescape(xml.substr(b, e - b)));
    p = e + close.size();
  }
  return out;
}

// What a request sends: nothing, bytes in memory, or a range of an open file.
struct Body {
  std::string_view bytes;
  int fd = -1;
  uint64_t offset = 0, length = 0;
  uint64_t size() const { return fd >= 0 ? length : bytes.size(); }
};

struct Response {
  long status = 0;
  std::string body, etag;
};

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

class S3Store final : public DatasetStore {
 public:
  S3Store(Location loc, RemoteOptions options, std::string url)
      : loc_(std::move(loc)), options_(std::move(options)), url_(std::move(url)) {
    for (unsigned i = 0; i < kUploaders; ++i) workers_.emplace_back([this] { upload_loop(); });
  }
  ~S3Store() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    if (!staging_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(staging_, ec);
    }
  }

  const std::string& where() const override { return loc_.display; }
  bool is_remote() const override { return true; }
  const std::string& staging_dir() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (staging_.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/stoker-upload-XXXXXX";
      if (!::mkdtemp(tmpl.data())) throw errno_error("create a staging directory " + tmpl, errno);
      staging_ = tmpl;
    }
    return staging_;
  }

  std::vector<std::string> list() override {
    const std::string prefix = loc_.key_prefix.empty() ? "" : loc_.key_prefix + "/";
    std::vector<std::string> names;
    std::string token;
    for (;;) {
      std::string url = loc_.bucket_url + "/?list-type=2&prefix=" + internal::percent_encode(prefix, false);
      if (!token.empty()) url += "&continuation-token=" + internal::percent_encode(token, false);
      const Response r = request("GET", url, "list " + loc_.display, {});
      if (r.status != 200) fail("GET", "list " + loc_.display, r);
      for (const std::string& key : xml_values(r.body, "Key")) {
        const std::string name = key.substr(std::min(prefix.size(), key.size()));
        if (key.starts_with(prefix) && !name.empty() && name.find('/') == std::string::npos) names.push_back(name);
      }
      const std::vector<std::string> more = xml_values(r.body, "IsTruncated");
      const std::vector<std::string> next = xml_values(r.body, "NextContinuationToken");
      if (more.empty() || more[0] != "true" || next.empty()) break;
      token = next[0];
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::optional<std::string> read(const std::string& name) override {
    Response r = request("GET", object(name), name, {});
    if (r.status == 404) return std::nullopt;
    if (r.status != 200) fail("GET", name, r);
    return std::move(r.body);
  }

  bool publish(const std::string& name, std::string_view bytes, bool only_if_absent) override {
    Body body;
    body.bytes = bytes;
    const Response r = request("PUT", object(name), name, body, only_if_absent ? "If-None-Match: *" : nullptr);
    if (only_if_absent && r.status == 412) return false;
    if (r.status != 200) fail("PUT", name, r);
    return true;
  }

  bool remove(const std::string& name) override {
    const Response r = request("DELETE", object(name), name, {});
    if (r.status != 204 && r.status != 200 && r.status != 404) fail("DELETE", name, r);
    return r.status != 404;
  }

  void upload(const std::string& local_path, const std::string& name) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kUploaders; });
    queue_.emplace_back(local_path, name);
    cv_.notify_all();
  }

  void flush() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
    if (!first_error_.empty()) {
      const std::string e = std::exchange(first_error_, {});
      throw_error(first_code_, e);
    }
  }

  ShardHeader check_shard(const ShardEntry& entry) override {
    std::call_once(reader_once_, [&] { reader_ = RemoteStore::open(url_, options_); });
    return RemoteShard::open(reader_, entry)->header();
  }

 private:
  std::string object(const std::string& name) const { return loc_.base + "/" + name; }

  [[noreturn]] void fail(const char* method, const std::string& what, const Response& r) const {
    std::string detail = internal::summarize_error_body(r.body);
    const ErrorCode code = r.status == 404 ? ErrorCode::kNotFound : ErrorCode::kIoError;
    throw_error(code, internal::redact_secrets(loc_, std::string(method) + " " + loc_.display + "/" + what + ": HTTP " +
                                                         std::to_string(r.status) + (detail.empty() ? "" : " " + detail)));
  }

  static size_t on_body(char* p, size_t size, size_t n, void* ud) {
    static_cast<Response*>(ud)->body.append(p, size * n);
    return size * n;
  }
  static size_t on_header(char* p, size_t size, size_t n, void* ud) {
    std::string_view line(p, size * n);
    if (line.size() > 5 && (line.substr(0, 5) == "ETag:" || line.substr(0, 5) == "etag:")) {
      std::string v(line.substr(5));
      v.erase(0, v.find_first_not_of(" \t"));
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
      static_cast<Response*>(ud)->etag = v;
    }
    return size * n;
  }
  struct Reader {
    const Body* body;
    uint64_t done = 0;
    int error = 0;
  };
  static size_t on_read(char* p, size_t size, size_t n, void* ud) {
    Reader& r = *static_cast<Reader*>(ud);
    const uint64_t want = std::min<uint64_t>(size * n, r.body->size() - r.done);
    if (want == 0) return 0;
    if (r.body->fd < 0) {
      std::memcpy(p, r.body->bytes.data() + r.done, want);
    } else {
      const ssize_t got = ::pread(r.body->fd, p, want, static_cast<off_t>(r.body->offset + r.done));
      if (got <= 0) {
        r.error = got < 0 ? errno : EIO;
        return CURL_READFUNC_ABORT;
      }
      r.done += static_cast<uint64_t>(got);
      return static_cast<size_t>(got);
    }
    r.done += want;
    return want;
  }

  // One request, retried (5xx, 429, faults) with backoff until it gets another answer,
  // max_attempts is spent, or it has failed for options_.timeout. The answer is
  // returned whatever its status; faults that outlast the retries throw kIoError.
  Response request(const char* method, const std::string& url, const std::string& what, const Body& body,
                   const char* extra_header = nullptr) {
    std::mt19937 rng(std::random_device{}());
    const auto start = std::chrono::steady_clock::now();
    for (unsigned attempt = 1;; ++attempt) {
      Response r;
      std::string fault;
      std::unique_ptr<CURL, CurlDeleter> c(curl_easy_init());
      if (!c) throw_error(ErrorCode::kResourceExhausted, "libcurl: curl_easy_init failed");
      std::unique_ptr<curl_slist, SlistDeleter> headers;
      auto add = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
      add("x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!loc_.token.empty()) add("x-amz-security-token: " + loc_.token);
      if (extra_header) add(extra_header);
      add("Expect:");  // no 100-continue round trip per part
      CURL* e = c.get();
      curl_easy_setopt(e, CURLOPT_URL, url.c_str());
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_USERAGENT, "stoker/0.1");
      curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
      curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.low_speed_bytes));
      curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                       std::max(1L, static_cast<long>(options_.stall_timeout.count() / 1000)));
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
      curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
      curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
      curl_easy_setopt(e, CURLOPT_HEADERDATA, &r);
      Reader reader{&body};
      const std::string m = method;
      if (m == "PUT") {
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, &reader);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
      } else if (m == "POST") {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body.bytes.empty() ? "" : body.bytes.data());
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.bytes.size()));
      } else if (m != "GET") {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
      }
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers.get());
      const std::string sig = "aws:amz:" + loc_.region + ":s3";
      if (!loc_.key_id.empty()) {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig.c_str());
        curl_easy_setopt(e, CURLOPT_USERNAME, loc_.key_id.c_str());
        curl_easy_setopt(e, CURLOPT_PASSWORD, loc_.secret.c_str());
      }
      const CURLcode rc = curl_easy_perform(e);
      if (reader.error != 0)
        throw errno_error("read " + what + " for upload", reader.error);
      if (rc == CURLE_OK) {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
        const bool retry = r.status >= 500 || r.status == 429 || r.status == 408 ||
                           // CompleteMultipartUpload can fail after its 200 has begun.
                           (r.status == 200 && m == "POST" && r.body.find("<Error>") != std::string::npos);
        if (!retry) return r;
        fault = "HTTP " + std::to_string(r.status) + " " + internal::summarize_error_body(r.body);
      } else {
        fault = curl_easy_strerror(rc);
      }
      const double failing_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (attempt >= options_.max_attempts || failing_s * 1000 >= static_cast<double>(options_.timeout.count()))
        throw_error(ErrorCode::kIoError,
                    internal::redact_secrets(loc_, std::string(method) + " " + loc_.display + "/" + what + ": " + fault +
                                                       " (gave up after " + std::to_string(attempt) + " tries)"));
      const double cap = std::min<double>(static_cast<double>(options_.backoff_max.count()),
                                          static_cast<double>(options_.backoff_base.count()) * (1u << std::min(attempt - 1, 20u)));
      std::this_thread::sleep_for(
          std::chrono::duration<double, std::milli>(cap * std::uniform_real_distribution<double>(0.5, 1.0)(rng)));
    }
  }

  void put_file(const std::string& path, const std::string& name) {
    internal::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw errno_error("open " + path + " for upload", errno);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw errno_error("stat " + path, errno);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    // One PUT takes up to 5 GiB; above upload_part_bytes the parts keep each retry small.
    const uint64_t part_bytes = options_.upload_part_bytes;
    if (size <= part_bytes) {
      Body body{{}, fd.get(), 0, size};
      const Response r = request("PUT", object(name), name, body);
      if (r.status != 200) fail("PUT", name, r);
      return;
    }
    const Response init = request("POST", object(name) + "?uploads", name, {});
    const std::vector<std::string> ids = xml_values(init.body, "UploadId");
    if (init.status != 200 || ids.empty()) fail("POST", name + " (create multipart upload)", init);
    const std::string id = "uploadId=" + internal::percent_encode(ids[0], false);
    try {
      std::string done = "<CompleteMultipartUpload>";
      for (uint64_t off = 0, n = 1; off < size; off += part_bytes, ++n) {
        Body body{{}, fd.get(), off, std::min(part_bytes, size - off)};
        const std::string part = name + " part " + std::to_string(n);
        const Response r = request("PUT", object(name) + "?partNumber=" + std::to_string(n) + "&" + id, part, body);
        if (r.status != 200 || r.etag.empty()) fail("PUT", part, r);
        done += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" + r.etag + "</ETag></Part>";
      }
      done += "</CompleteMultipartUpload>";
      Body body;
      body.bytes = done;
      const Response r = request("POST", object(name) + "?" + id, name + " (complete multipart upload)", body);
      if (r.status != 200) fail("POST", name + " (complete multipart upload)", r);
    } catch (...) {
      try {
        request("DELETE", object(name) + "?" + id, name + " (abort multipart upload)", {});
      } catch (const Error&) {
        // The store drops an abandoned upload's parts by its own lifecycle rules.
      }
      throw;
    }
  }

  void upload_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto [path, name] = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      const bool skip = !first_error_.empty();  // the writer fails anyway: upload no more
      lock.unlock();
      cv_.notify_all();
      std::string error;
      ErrorCode code = ErrorCode::kIoError;
      if (!skip) {
        try {
          put_file(path, name);
        } catch (const Error& e) {
          error = e.what();
          code = e.code();
        }
      }
      std::error_code ec;
      std::filesystem::remove(path, ec);
      lock.lock();
      if (!error.empty() && first_error_.empty()) {
        first_error_ = error;
        first_code_ = code;
      }
      --busy_;
      cv_.notify_all();
    }
  }

  Location loc_;
  RemoteOptions options_;
  std::string url_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, std::string>> queue_;
  unsigned busy_ = 0;
  bool stop_ = false;
  std::string first_error_;
  ErrorCode first_code_ = ErrorCode::kIoError;
  std::string staging_;
  std::vector<std::thread> workers_;
  std::once_flag reader_once_;
  std::shared_ptr<RemoteStore> reader_;
};

}  // namespace

std::shared_ptr<DatasetStore> open_dataset_store(const std::string& where, RemoteOptions options) {
  switch (internal::location_kind_of(where)) {
    case internal::LocationKind::kFile:
      return open_local_store(where);
    case internal::LocationKind::kS3:
      if (options.upload_part_bytes < (5ull << 20))
        throw_error(ErrorCode::kInvalidArgument, "remote upload part size must be at least 5 MiB (S3's least part)");
      return std::make_shared<S3Store>(internal::parse_location(where, options.aws_profile), options, where);
    case internal::LocationKind::kHttp:
    case internal::LocationKind::kHttps:
      break;
  }
  throw_error(ErrorCode::kInvalidArgument,
              "'" + redact_url(where) + "': datasets are written to a local directory or an s3:// prefix; plain "
                                        "http(s) servers are read-only");
}

}  // namespace stoker
