// HttpListener: the smallest HTTP/1.0-style server a metrics endpoint needs: one
// listening TCP socket, one thread that accepts a connection, reads one request line
// (and its headers, up to 8 KiB, waiting at most 2 s), answers it and closes. Not a
// general server: no keep-alive, no request bodies, no TLS. stoker has no HTTP server
// dependency; cpp-httplib (Debian's 0.11, a shared library that brings OpenSSL and
// Brotli along) would be a wheel dependency and a thread pool for one request a second.
//
// Threading: the handler runs on the listener's thread, one request at a time; the
// destructor stops the thread (a request being answered is finished first) and joins it.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "util/unique_fd.h"

namespace stoker::internal {

struct HttpResponse {
  int status = 200;  // 200, 404, 405
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpListener {
 public:
  /// method ("GET", "HEAD", ...) and path (without the query) -> the response.
  using Handler = std::function<HttpResponse(const std::string& method, const std::string& path)>;
  /// Listens on every IPv4 address, TCP port `port` (0: one the kernel picks), and starts
  /// the thread `thread_name`. kUnavailable naming the port when it is in use or cannot
  /// be bound.
  HttpListener(unsigned port, Handler handler, std::string thread_name);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;
  unsigned port() const noexcept { return port_; }

 private:
  void serve();
  void answer(int fd);
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // an eventfd: written by the destructor, wakes the thread's poll
  unsigned port_ = 0;
  Handler handler_;
  std::string thread_name_;
  std::thread thread_;  // last: started once everything it reads is set
};

}  // namespace stoker::internal
