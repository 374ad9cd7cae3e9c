#include "metrics/http_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "stoker/error.h"
#include "util/log.h"

namespace stoker::internal {

namespace {

constexpr size_t kMaxRequest = 8192;
constexpr int kRequestTimeoutMs = 2000;

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    default: return "Bad Request";
  }
}

void send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the scraper went away: nothing to tell it
    done += static_cast<size_t>(n);
  }
}

}  // namespace

HttpListener::HttpListener(unsigned port, Handler handler, std::string thread_name)
    : handler_(std::move(handler)), thread_name_(std::move(thread_name)) {
  const std::string which = "metrics port " + std::to_string(port);
  listen_fd_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listen_fd_) throw errno_error(which + ": socket", errno);
  // A restarted job rebinds while its old connections sit in TIME_WAIT; a live
  // listener on the port still makes bind() fail with EADDRINUSE.
  const int one = 1;
  ::setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    if (e == EADDRINUSE)
      throw_error(ErrorCode::kUnavailable,
                  which + " is in use (another process, or another server of this one, listens on it): choose a "
                          "free port with metrics_port= / STOKER_METRICS_PORT");
    throw_error(ErrorCode::kUnavailable, which + " cannot be bound: " + std::strerror(e) + " (errno " +
                                             std::to_string(e) + ")");
  }
  if (::listen(listen_fd_.get(), 16) != 0) throw errno_error(which + ": listen", errno);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_) throw errno_error(which + ": eventfd", errno);
  thread_ = std::thread([this] { serve(); });
}

HttpListener::~HttpListener() {
  const uint64_t one = 1;
  if (::write(stop_fd_.get(), &one, sizeof one) < 0) {
    // An eventfd's counter cannot overflow from one write; nothing else can fail here.
  }
  if (thread_.joinable()) thread_.join();
}

void HttpListener::serve() {
  pthread_setname_np(pthread_self(), thread_name_.substr(0, 15).c_str());
  for (;;) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log_warn("metrics server on port " + std::to_string(port_) + " stopped: poll: " + std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) continue;  // the client gave up, or fds ran out for a moment: the next poll tries again
    answer(conn.get());
  }
}

void HttpListener::answer(int fd) {
  std::string request;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
         request.size() < kMaxRequest) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return;
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    const int r = ::poll(fds, 2, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || fds[1].revents) return;
    char buf[2048];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  // "GET /metrics?x HTTP/1.1"
  const size_t sp1 = request.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : request.find_first_of(" \r\n", sp1 + 1);
  HttpResponse resp;
  std::string method;
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    resp = {400, "text/plain; charset=utf-8", "bad request\n"};
  } else {
    method = request.substr(0, sp1);
    std::string path = request.substr(sp1 + 1, sp2 - sp1 - 1);
    if (const size_t q = path.find('?'); q != std::string::npos) path.resize(q);
    try {
      resp = handler_(method, path);
    } catch (const std::exception& e) {
      resp = {500, "text/plain; charset=utf-8", std::string("error: ") + e.what() + "\n"};
    }
  }
  std::string head = "HTTP/1.1 " + std::to_string(resp.status) + ' ' + reason_phrase(resp.status) +
                     "\r\nContent-Type: " + resp.content_type +
                     "\r\nContent-Length: " + std::to_string(resp.body.size()) + "\r\nConnection: close\r\n\r\n";
  send_all(fd, method == "HEAD" ? head : head + resp.body);
}

}  // namespace stoker::internal
