// Servers on loopback for the remote-dataset tests: nginx serving a directory (each
// request's path logged), and tests/util/fault_proxy.py in front of a server (503, 429,
// resets, cut and stalled bodies, flipped bytes). Each runs as a child process stopped
// with its owner; a server that cannot start makes start() return false (tests skip).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/test_util.h"

namespace stoker::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

inline bool port_open(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

// A child process; its stdin is a pipe we hold (the fault proxy exits when it closes).
class Child {
 public:
  Child() = default;
  explicit Child(const std::vector<std::string>& argv) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 2);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      ::execvp(a[0], a.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Child() { stop(); }
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(stdin_, o.stdin_);
    std::swap(stdout_, o.stdout_);
    return *this;
  }
  void stop() {
    if (stdin_ >= 0) ::close(stdin_);
    if (stdout_ >= 0) ::close(stdout_);
    stdin_ = stdout_ = -1;
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      for (int i = 0; i < 200; ++i) {
        if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
          pid_ = -1;
          return;
        }
        std::this_thread::sleep_for(10ms);
      }
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  bool alive() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  // A line of stdout, waiting at most `timeout`.
  std::string read_line(std::chrono::milliseconds timeout) {
    std::string line;
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char c;
      if (::read(stdout_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
};

inline bool wait_port(int port, Child& c) {
  for (int i = 0; i < 750; ++i) {  // 15 s: a Python server starting on a loaded (or emulated) machine
    if (port_open(port)) return true;
    if (!c.alive()) return false;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// nginx serving `root` on 127.0.0.1; access log lines are "<path>" (one per request).
struct Nginx {
  TempDir tmp;
  Child child;
  int port = 0;
  bool start(const std::string& root) {
    for (int tries = 0; tries < 3; ++tries) {
      port = free_port();
      std::ofstream c(tmp.str("nginx.conf"));
      c << "daemon off; master_process off; worker_processes 1;\n"
        << "pid " << tmp.str("nginx.pid") << "; error_log " << tmp.str("error.log") << ";\n"
        << "events { worker_connections 512; }\n"
        << "http { log_format p '$uri'; access_log " << tmp.str("access.log") << " p;\n"
        << "  client_body_temp_path " << tmp.str("b") << "; proxy_temp_path " << tmp.str("p") << ";\n"
        << "  fastcgi_temp_path " << tmp.str("f") << "; uwsgi_temp_path " << tmp.str("u") << ";\n"
        << "  scgi_temp_path " << tmp.str("s") << ";\n"
        << "  server { listen 127.0.0.1:" << port << "; root " << root << "; location / { } } }\n";
      c.close();
      child = Child({"nginx", "-p", tmp.str(), "-c", tmp.str("nginx.conf")});
      if (wait_port(port, child)) return true;
      child.stop();
    }
    return false;
  }
  std::string url(const std::string& path = "ds") const { return "http://127.0.0.1:" + std::to_string(port) + "/" + path; }
  std::map<std::string, int> requests() const {
    std::map<std::string, int> m;
    std::ifstream in(tmp.str("access.log"));
    std::string line;
    while (std::getline(in, line)) m[line]++;
    return m;
  }
};

// `python3 -m http.server` serving `root` on 127.0.0.1: a server that ignores Range
// (every GET is answered 200 with the whole file).
struct PlainHttpServer {
  Child child;
  int port = 0;
  bool start(const std::string& root) {
    for (int tries = 0; tries < 3; ++tries) {
      port = free_port();
      child = Child({"/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", root,
                     std::to_string(port)});
      if (wait_port(port, child)) return true;
      child.stop();
    }
    return false;
  }
  std::string url(const std::string& path = "ds") const { return "http://127.0.0.1:" + std::to_string(port) + "/" + path; }
};

inline std::string proxy_script() {
  for (fs::path p = fs::current_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
    if (fs::exists(p / "tests/util/fault_proxy.py")) return (p / "tests/util/fault_proxy.py").string();
  fs::path src = fs::path(__FILE__).parent_path() / "fault_proxy.py";
  return src.string();
}

struct Proxy {
  Child child;
  int port = 0;
  bool start(const std::string& upstream, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/python3", proxy_script(), "--upstream", upstream};
    argv.insert(argv.end(), extra.begin(), extra.end());
    child = Child(argv);
    std::string line = child.read_line(10s);
    if (line.rfind("PORT ", 0) != 0) return false;
    port = std::stoi(line.substr(5));
    return true;
  }
  std::string url(const std::string& path = "ds") const { return "http://127.0.0.1:" + std::to_string(port) + "/" + path; }
};

}  // namespace stoker::testing
