// The curl multi loop behind RemoteStore: parallel ranged GETs with bounded retries.
//
// Every request is one Part. A Part that fails in a way worth retrying (timeout, reset,
// cut body, 5xx, 429, 408) waits min(max, base*2^(n-1)) * uniform[0.5,1) and is asked
// again from the first byte it does not have yet: bytes already received over TCP are
// right, and anything wrong beyond that is caught by the record CRCs above this layer.
#include <curl/curl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "remote/remote_internal.h"
#include "stoker/error.h"
#include "util/log.h"

namespace stoker::internal {

namespace {

using Clock = std::chrono::steady_clock;

// libcurl wants one process-wide init before any thread uses it.
void global_init() {
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) throw_error(ErrorCode::kUnavailable, std::string("libcurl init: ") + curl_easy_strerror(rc));
}

bool retryable_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool retryable_status(long s) { return s == 408 || s == 429 || (s >= 500 && s <= 599); }

struct Transfer {
  Part* part = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  unsigned attempt = 0;
  uint64_t got = 0;          // bytes of the part delivered (kept across attempts)
  uint64_t body_pos = 0;     // bytes of the current response body seen
  uint64_t skip = 0;         // bytes to drop at the start of a 200 answer to a range
  uint64_t want_start = 0;   // first object byte asked for in this attempt
  long status = 0;
  bool status_read = false;
  bool done_early = false;   // a 200 answer delivered the window; the rest is not needed
  std::string fatal;         // a problem that retrying cannot fix
  std::string err_body;
  std::string last_error;
  int64_t range_start = -1;  // from Content-Range
  Clock::time_point ready_at;
  char errbuf[CURL_ERROR_SIZE] = {};
  Fetcher* fetcher = nullptr;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  const std::string_view line(data, len);
  if (line.rfind("HTTP/", 0) == 0) t->range_start = -1;  // a new response (after a 100 or a redirect)
  const int64_t start = content_range_start(line);
  if (start >= 0) t->range_start = start;
  return len;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (!t->status_read) {
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
    t->status_read = true;
    Part& p = *t->part;
    if (t->status == 206) {
      if (p.whole || t->range_start != static_cast<int64_t>(t->want_start)) {
        t->fatal = "server answered byte " + std::to_string(t->range_start) + " for a range starting at " +
                   std::to_string(t->want_start);
        return 0;
      }
      t->fetcher->range_known = true;
    } else if (t->status == 200 && !p.whole) {
      t->skip = t->want_start;  // the server ignored Range: drop the bytes before the window
      t->fetcher->whole_fetches++;
      if (!p.no_range) t->fetcher->note_range_ignored(p.shown);
    }
  }
  if (t->status < 200 || t->status > 299) {
    if (t->err_body.size() < 4096) t->err_body.append(data, std::min<size_t>(len, 4096 - t->err_body.size()));
    return len;
  }
  t->fetcher->bytes += len;
  Part& p = *t->part;
  if (p.whole) {
    if (p.out->size() + len > (256u << 20)) {
      t->fatal = "object larger than 256 MiB where a small one was expected";
      return 0;
    }
    p.out->append(data, len);
    t->got += len;
    return len;
  }
  const char* src = data;
  size_t avail = len;
  if (t->body_pos < t->skip) {
    const uint64_t drop = std::min<uint64_t>(avail, t->skip - t->body_pos);
    src += drop;
    avail -= drop;
    t->body_pos += drop;
  }
  const uint64_t room = p.length - t->got;
  if (avail > room) {
    if (t->status == 206) {
      t->fatal = "server sent more bytes than the range asked for";
      return 0;
    }
    avail = room;
  }
  if (avail) {
    if (p.mem) {
      std::memcpy(p.mem + t->got, src, avail);
    } else {
      size_t off = 0;
      while (off < avail) {
        ssize_t w = ::pwrite(p.fd, src + off, avail - off, static_cast<off_t>(p.offset + t->got + off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
          t->fatal = "write to the cache file: " + std::string(std::strerror(errno));
          return 0;
        }
        off += static_cast<size_t>(w);
      }
    }
    t->got += avail;
    t->body_pos += avail;
  }
  if (t->status == 200 && t->got == p.length) {
    t->done_early = true;  // the window is complete; stop reading the rest of the object
    return 0;
  }
  return len;
}

}  // namespace

std::string summarize_error_body(const std::string& body) {
  auto tag = [&](const char* name) -> std::string {
    const std::string open = std::string("<") + name + ">", close = std::string("</") + name + ">";
    size_t a = body.find(open);
    if (a == std::string::npos) return "";
    a += open.size();
    // The element's text only, up to the next markup: a body that nests or mangles
    // elements must not carry another element (an <AWSAccessKeyId>) into a message.
    const size_t b = body.find('<', a);
    if (b == std::string::npos || body.compare(b, close.size(), close) != 0) return "";
    return body.substr(a, std::min<size_t>(b - a, 200));
  };
  std::string code = tag("Code"), msg = tag("Message");
  if (!code.empty()) return code + (msg.empty() ? "" : ": " + msg);
  if (body.find('<') != std::string::npos) return "";  // an HTML page says nothing useful
  std::string line = body.substr(0, body.find('\n'));
  return line.substr(0, 200);
}

int64_t content_range_start(std::string_view line) {
  if (line.size() < 14 || strncasecmp(line.data(), "content-range:", 14) != 0) return -1;
  const size_t b = line.find("bytes", 14);
  if (b == std::string_view::npos) return -1;
  size_t i = b + 5;
  while (i < line.size() && line[i] == ' ') ++i;
  int64_t v = 0;
  size_t digits = 0;
  for (; i < line.size() && line[i] >= '0' && line[i] <= '9' && digits < 18; ++i, ++digits) v = v * 10 + (line[i] - '0');
  return digits && i < line.size() && line[i] == '-' ? v : -1;
}

struct Fetcher::Share {
  CURLSH* sh = nullptr;
  std::mutex locks[CURL_LOCK_DATA_LAST];
  static void lock(CURL*, curl_lock_data d, curl_lock_access, void* u) { static_cast<Share*>(u)->locks[d].lock(); }
  static void unlock(CURL*, curl_lock_data d, void* u) { static_cast<Share*>(u)->locks[d].unlock(); }
  Share() {
    sh = curl_share_init();
    if (!sh) throw_error(ErrorCode::kResourceExhausted, "libcurl: cannot create a share handle");
    curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, &Share::lock);
    curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, &Share::unlock);
    curl_share_setopt(sh, CURLSHOPT_USERDATA, this);
    // Reused connections across calls: a ranged GET then costs no handshake.
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
  ~Share() { curl_share_cleanup(sh); }
};

Fetcher::Fetcher(Location loc, RemoteOptions options) : loc_(std::move(loc)), options_(std::move(options)) {
  global_init();
  share_ = std::make_unique<Share>();
}

Fetcher::~Fetcher() = default;

void Fetcher::begin_request() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(busy_mu_);
  request_s_ += static_cast<double>(inflight_) * std::chrono::duration<double>(now - last_change_).count();
  last_change_ = now;
  if (inflight_++ == 0) busy_since_ = now;
}

void Fetcher::end_request() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(busy_mu_);
  request_s_ += static_cast<double>(inflight_) * std::chrono::duration<double>(now - last_change_).count();
  last_change_ = now;
  if (--inflight_ == 0) busy_s_ += std::chrono::duration<double>(now - busy_since_).count();
}

void Fetcher::note_range_ignored(const std::string& shown) {
  range_known = true;
  if (range_ignored.exchange(true)) return;
  log_warn(loc_.display + ": the server ignores HTTP Range (it answered a ranged GET of " + shown +
           " with the whole object, HTTP 200): stoker reads whole shards from it instead, one GET each (network "
           "stats: range_ignored, whole_fetches), and no records by ranged GET. Serve the dataset with a server "
           "that supports Range (nginx, Apache, any S3 store) to fetch only what is read");
}

void Fetcher::note_success() {
  std::lock_guard<std::mutex> lock(budget_mu_);
  failing_since_ = {};
}

double Fetcher::note_failure() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(budget_mu_);
  // A spell ends with a success, or when nothing was asked for a whole budget (a later
  // fault is a new one, not the tail of an old one).
  if (failing_since_ == Clock::time_point{} || now - last_failure_ > options_.timeout) failing_since_ = now;
  last_failure_ = now;
  return std::chrono::duration<double>(now - failing_since_).count();
}

RemoteStats Fetcher::stats() const {
  RemoteStats s;
  s.range_ignored = range_ignored.load();
  s.whole_fetches = whole_fetches.load();
  s.bytes_fetched = bytes.load();
  s.requests = requests.load();
  s.retries = retries.load();
  s.failures = failures.load();
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(busy_mu_);
  s.requests_in_flight = inflight_;
  s.busy_s = busy_s_ + (inflight_ ? std::chrono::duration<double>(now - busy_since_).count() : 0);
  s.request_s = request_s_ + static_cast<double>(inflight_) * std::chrono::duration<double>(now - last_change_).count();
  return s;
}

void Fetcher::run(std::vector<Part>& parts) {
  if (parts.empty()) return;
  struct Multi {
    CURLM* m = curl_multi_init();
    ~Multi() { curl_multi_cleanup(m); }
  } multi;
  if (!multi.m) throw_error(ErrorCode::kResourceExhausted, "libcurl: cannot create a multi handle");

  std::vector<Transfer> ts(parts.size());
  std::deque<Transfer*> ready;
  std::vector<Transfer*> waiting;
  std::vector<CURL*> idle;  // easy handles between transfers (keep their settings)
  std::vector<CURL*> all;
  std::vector<Transfer*> active;
  struct Cleanup {
    std::vector<CURL*>& all;
    std::vector<Transfer>& ts;
    CURLM* m;
    Fetcher* f;
    std::vector<Transfer*>& active;
    ~Cleanup() {
      for (Transfer* t : active) {
        curl_multi_remove_handle(m, t->easy);
        f->end_request();
      }
      for (CURL* e : all) curl_easy_cleanup(e);
      for (auto& t : ts) curl_slist_free_all(t.headers);
    }
  } cleanup{all, ts, multi.m, this, active};

  std::mt19937_64 rng(std::random_device{}());
  for (size_t i = 0; i < parts.size(); ++i) {
    ts[i].part = &parts[i];
    ts[i].fetcher = this;
    ready.push_back(&ts[i]);
  }
  const unsigned max_active = std::max(1u, options_.connections);
  size_t finished = 0;

  auto start = [&](Transfer* t) {
    CURL* e;
    if (!idle.empty()) {
      e = idle.back();
      idle.pop_back();
    } else {
      e = curl_easy_init();
      if (!e) throw_error(ErrorCode::kResourceExhausted, "libcurl: cannot create an easy handle");
      all.push_back(e);
    }
    t->easy = e;
    Part& p = *t->part;
    t->status = 0;
    t->status_read = false;
    t->body_pos = 0;
    t->skip = 0;
    t->done_early = false;
    t->err_body.clear();
    t->range_start = -1;
    t->errbuf[0] = 0;
    if (p.whole) {
      p.out->clear();
      t->got = 0;
    }
    t->want_start = p.offset + t->got;
    curl_easy_setopt(e, CURLOPT_URL, p.url.c_str());
    curl_easy_setopt(e, CURLOPT_SHARE, share_->sh);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.low_speed_bytes));
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, static_cast<long>((options_.stall_timeout.count() + 999) / 1000)));
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "stoker/0.1");
    // Large receive buffers: one pwrite per 512 KiB instead of per 16 KiB.
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L << 10);
    if (p.whole || p.no_range) {
      curl_easy_setopt(e, CURLOPT_RANGE, nullptr);
    } else {
      const std::string range = std::to_string(t->want_start) + "-" + std::to_string(p.offset + p.length - 1);
      curl_easy_setopt(e, CURLOPT_RANGE, range.c_str());  // curl copies the string
    }
    if (!t->headers && scheme_row(loc_.kind).aws_signed) {
      t->headers = curl_slist_append(t->headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!loc_.token.empty()) t->headers = curl_slist_append(t->headers, ("x-amz-security-token: " + loc_.token).c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    if (scheme_row(loc_.kind).aws_signed && !loc_.key_id.empty()) {
      const std::string sig = "aws:amz:" + loc_.region + ":s3";
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig.c_str());
      curl_easy_setopt(e, CURLOPT_USERNAME, loc_.key_id.c_str());
      curl_easy_setopt(e, CURLOPT_PASSWORD, loc_.secret.c_str());
    }
    begin_request();
    active.push_back(t);
    CURLMcode mc = curl_multi_add_handle(multi.m, e);
    if (mc != CURLM_OK) throw_error(ErrorCode::kIoError, std::string("libcurl: ") + curl_multi_strerror(mc));
  };

  auto describe = [&](Transfer* t) {
    const Part& p = *t->part;
    std::string s = "GET " + p.shown;
    if (!p.what.empty()) s += " (" + p.what + ")";
    if (!p.whole) s += " bytes " + std::to_string(p.offset) + "-" + std::to_string(p.offset + p.length - 1);
    return s;
  };

  auto fail = [&](Transfer* t, const std::string& why, long status) {
    failures++;
    ErrorCode code = status == 404 ? ErrorCode::kNotFound : ErrorCode::kIoError;
    std::string msg = describe(t) + ": " + why;
    if (t->attempt > 1) msg += " (after " + std::to_string(t->attempt) + " attempts)";
    throw Error(code, redact_secrets(loc_, msg));
  };

  auto finish = [&](Transfer* t, CURLcode rc) {
    curl_multi_remove_handle(multi.m, t->easy);
    active.erase(std::find(active.begin(), active.end(), t));
    end_request();
    requests++;
    idle.push_back(t->easy);
    t->easy = nullptr;
    ++t->attempt;
    const Part& p = *t->part;
    long status = t->status;
    if (!t->status_read) curl_easy_getinfo(idle.back(), CURLINFO_RESPONSE_CODE, &status);
    if (!t->fatal.empty()) fail(t, t->fatal, status);
    std::string why;
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t->done_early)) {
      if (status >= 200 && status <= 299) {
        if (p.whole || t->got == p.length) {
          ++finished;
          note_success();
          if (p.on_done) p.on_done();
          return;
        }
        why = "body cut at " + std::to_string(t->got) + " of " + std::to_string(p.length) + " bytes";
      } else {
        std::string detail = summarize_error_body(t->err_body);
        why = "HTTP " + std::to_string(status) + (detail.empty() ? "" : " (" + detail + ")");
        if (!retryable_status(status)) fail(t, why, status);
      }
    } else {
      why = std::string(curl_easy_strerror(rc)) + (t->errbuf[0] ? std::string(": ") + t->errbuf : "");
      if (status) why += " (HTTP " + std::to_string(status) + ")";
      if (!retryable_curl(rc)) fail(t, why, status);
    }
    t->last_error = why;
    if (t->attempt >= options_.max_attempts) fail(t, why, status);
    // One budget for all requests: a persistent fault ends within it, however many
    // requests queue behind each other.
    const double spell = note_failure();
    const double budget = std::chrono::duration<double>(options_.timeout).count();
    if (spell >= budget) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.0f", spell);
      fail(t, why + "; no request to this server has succeeded for " + secs + " s (remote timeout " +
                  std::to_string(static_cast<long long>(budget)) + " s)", status);
    }
    retries++;
    const double cap = std::min<double>(static_cast<double>(options_.backoff_max.count()),
                                        static_cast<double>(options_.backoff_base.count()) *
                                            static_cast<double>(1ull << std::min(t->attempt - 1, 30u)));
    const double jitter = std::uniform_real_distribution<double>(0.5, 1.0)(rng);
    // Never wait past the budget: the last try comes when it runs out.
    const double left_ms = (budget - spell) * 1000;
    t->ready_at = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(std::min(cap * jitter, left_ms) * 1000));
    waiting.push_back(t);
  };

  while (finished < parts.size()) {
    const auto now = Clock::now();
    for (size_t i = 0; i < waiting.size();) {
      if (waiting[i]->ready_at <= now) {
        ready.push_back(waiting[i]);
        waiting[i] = waiting.back();
        waiting.pop_back();
      } else {
        ++i;
      }
    }
    while (active.size() < max_active && !ready.empty()) {
      Transfer* t = ready.front();
      ready.pop_front();
      start(t);
    }
    int running = 0;
    curl_multi_perform(multi.m, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi.m, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      finish(t, msg->data.result);
    }
    if (finished == parts.size()) break;
    int wait_ms = 200;
    for (Transfer* t : waiting)
      wait_ms = std::min<int>(wait_ms, static_cast<int>(std::max<int64_t>(
                                           0, std::chrono::duration_cast<std::chrono::milliseconds>(t->ready_at - now).count())));
    if (!ready.empty() && active.size() < max_active) wait_ms = 0;
    if (active.empty()) {
      if (wait_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    } else {
      curl_multi_poll(multi.m, nullptr, 0, std::max(wait_ms, 1), nullptr);
    }
  }
}

}  // namespace stoker::internal
