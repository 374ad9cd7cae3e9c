// MetricsServer (stoker/metrics.h): the process's servers by port, each an
// HttpListener (http_listener.h) answering scrapes with the Prometheus text of its
// sources (prometheus_text.h).
#include "stoker/metrics.h"

#include <map>
#include <mutex>

#include "metrics/http_listener.h"
#include "metrics/prometheus_text.h"
#include "stoker/error.h"

namespace stoker {

namespace {

// The open servers by port: a second loader of the process on the same port joins the
// first one's server instead of failing to bind. Entries of servers gone are dropped by
// the next on_port(), not by the destructor, which may run inside on_port() (a bind
// that failed) under the lock.
std::mutex g_servers_mu;
std::map<unsigned, std::weak_ptr<MetricsServer>>& servers_by_port() {
  static auto* m = new std::map<unsigned, std::weak_ptr<MetricsServer>>;  // never destroyed: used from destructors at exit
  return *m;
}

}  // namespace

// Hidden: its members take stoker::internal types, which libstoker.so does not export.
struct __attribute__((visibility("hidden"))) MetricsServer::Impl {
  struct Source {
    std::string labels;  // rendered
    std::function<void(StatsVisitor&)> walk;
    std::set<std::string> counters;
    internal::CounterCarry carry;
  };
  std::mutex mu;  // sources, and a render's use of their carries
  std::map<uint64_t, Source> sources;
  uint64_t next_id = 1;
  std::unique_ptr<internal::HttpListener> listener;  // last: its thread renders from the members above
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  impl_->listener.reset();  // joins the thread before the sources go
}

std::shared_ptr<MetricsServer> MetricsServer::on_port(unsigned port) {
  if (port > 65535)
    throw_error(ErrorCode::kInvalidArgument, "metrics port " + std::to_string(port) + " is not a TCP port (0..65535)");
  std::lock_guard lock(g_servers_mu);
  auto& m = servers_by_port();
  std::erase_if(m, [](const auto& entry) { return entry.second.expired(); });
  if (port != 0)
    if (auto it = m.find(port); it != m.end())
      if (auto s = it->second.lock()) return s;
  std::shared_ptr<MetricsServer> server(new MetricsServer(std::make_unique<Impl>()));
  server->self_ = server;
  Impl* impl = server->impl_.get();
  MetricsServer* raw = server.get();
  impl->listener = std::make_unique<internal::HttpListener>(
      port,
      [raw](const std::string& method, const std::string& path) {
        if (path != "/metrics" && path != "/") return internal::HttpResponse{404, "text/plain; charset=utf-8", "not found: try /metrics\n"};
        if (method != "GET" && method != "HEAD")
          return internal::HttpResponse{405, "text/plain; charset=utf-8", "only GET and HEAD\n"};
        return internal::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", raw->render()};
      },
      "stoker-metrics");
  m[impl->listener->port()] = server;
  return server;
}

unsigned MetricsServer::port() const noexcept { return impl_->listener->port(); }

MetricsRegistration MetricsServer::add(MetricLabels labels, std::function<void(StatsVisitor&)> walk,
                                       std::set<std::string> counters) {
  for (const auto& l : labels)
    if (!internal::valid_label_name(l.first))
      throw_error(ErrorCode::kInvalidArgument, "metrics label name '" + l.first + "' is not [a-zA-Z_][a-zA-Z0-9_]*");
  std::lock_guard lock(impl_->mu);
  const uint64_t id = impl_->next_id++;
  impl_->sources.emplace(id, Impl::Source{internal::render_labels(labels), std::move(walk), std::move(counters), {}});
  return MetricsRegistration(self_.lock(), id);
}

void MetricsServer::remove(uint64_t id) noexcept {
  std::lock_guard lock(impl_->mu);
  impl_->sources.erase(id);
}

void MetricsServer::observe(uint64_t id) {
  std::vector<internal::MetricSample> unused;
  std::lock_guard lock(impl_->mu);
  if (const auto it = impl_->sources.find(id); it != impl_->sources.end()) {
    Impl::Source& s = it->second;
    internal::collect_samples(s.walk, s.labels, s.counters, s.carry, unused);
  }
}

std::string MetricsServer::render() {
  std::vector<internal::MetricSample> samples;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& entry : impl_->sources) {
      Impl::Source& s = entry.second;
      internal::collect_samples(s.walk, s.labels, s.counters, s.carry, samples);
    }
  }
  return internal::render_exposition(samples);
}

MetricsRegistration::~MetricsRegistration() {
  if (server_) server_->remove(id_);
}

void MetricsRegistration::observe() {
  if (server_) server_->observe(id_);
}

MetricsRegistration& MetricsRegistration::operator=(MetricsRegistration&& o) noexcept {
  if (this != &o) {
    if (server_) server_->remove(id_);
    server_ = std::move(o.server_);
    id_ = o.id_;
  }
  return *this;
}

}  // namespace stoker
