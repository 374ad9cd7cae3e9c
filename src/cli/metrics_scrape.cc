#include "metrics_scrape.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace stoker::cli {

namespace {

// Owns the socket of one request.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

int ms_left(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on fd until the deadline; false when it passed.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

}  // namespace

std::string fetch_metrics(const std::string& host, const std::string& port, int timeout_ms) {
  const std::string where = host + ":" + port;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); e != 0)
    throw ScrapeError("cannot resolve " + where + ": " + ::gai_strerror(e));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> addrs(found, ::freeaddrinfo);
  Socket s;
  int last_errno = ECONNREFUSED;
  for (addrinfo* a = found; a && s.fd < 0; a = a->ai_next) {
    s.fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (s.fd < 0) continue;
    if (::connect(s.fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS && wait_for(s.fd, POLLOUT, deadline)) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) break;
      last_errno = err;
    } else {
      last_errno = errno == EINPROGRESS ? ETIMEDOUT : errno;
    }
    ::close(s.fd);
    s.fd = -1;
  }
  if (s.fd < 0) {
    if (last_errno == ECONNREFUSED) throw ScrapeError("nothing listens on " + where + " (connection refused)");
    throw ScrapeError("cannot connect to " + where + ": " + std::strerror(last_errno));
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: " + where + "\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    if (!wait_for(s.fd, POLLOUT, deadline)) throw ScrapeError(where + " did not take the request in time");
    const ssize_t n = ::send(s.fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) throw ScrapeError(where + " closed the connection");
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[16384];
  for (;;) {
    if (!wait_for(s.fd, POLLIN, deadline)) throw ScrapeError(where + " did not answer in time");
    const ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw ScrapeError(where + " closed the connection: " + std::strerror(errno));
    if (n == 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  if (answer.empty()) throw ScrapeError(where + " closed the connection without an answer");
  const size_t sp = answer.find(' ');
  const int status = sp == std::string::npos ? 0 : std::atoi(answer.c_str() + sp + 1);
  const size_t body = answer.find("\r\n\r\n");
  if (status != 200 || body == std::string::npos)
    throw ScrapeError(where + " answered " + answer.substr(0, answer.find('\r')) + ", not a metrics page");
  return answer.substr(body + 4);
}

std::vector<MetricSeries> parse_exposition(const std::string& text) {
  std::vector<MetricSeries> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    MetricSeries s;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) continue;
    s.name = line.substr(0, i);
    if (line[i] == '{') {
      ++i;
      bool ok = true;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          ok = false;
          break;
        }
        std::string name = line.substr(i, eq - i), value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        s.labels[name] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (!ok || i >= line.size()) continue;
      ++i;  // '}'
    }
    char* num_end = nullptr;
    const std::string value = line.substr(i);
    s.value = std::strtod(value.c_str(), &num_end);
    if (num_end == value.c_str()) continue;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace stoker::cli
