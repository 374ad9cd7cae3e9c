// The metrics exporter (stoker/metrics.h): names with their units, counters kept
// monotonic over a run's restart, texts as labelled gauges, one TYPE line per family
// with every source's series under it, a scrape over real HTTP, a port in use refused
// naming the port, and a Loader's stats() served with labels that tell two loaders apart.
// The Python suite (test_metrics.py) parses a scrape with prometheus_client.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "metrics/prometheus_text.h"
#include "stoker/loader.h"
#include "stoker/metrics.h"
#include "util/datasets.h"
#include "util/loader_util.h"
#include "util/test_util.h"
#include "util/unique_fd.h"

namespace stoker {
namespace {

using internal::metric_name;
using testing::TempDir;
using testing::error_code_of;

// A walk like LoaderStats::visit's, with a figure of every kind.
struct FakeStats {
  uint64_t samples = 0;
  double busy_s = 0;
  std::string verdict = "decode";
  void visit(StatsVisitor& v) const {
    v.count("samples", samples);
    v.figure("samples_per_s", 12.5);
    v.begin_group("io");
    v.figure("busy_s", busy_s);
    v.count("threads", 2);
    v.end_group();
    v.flag("tokens", false);
    v.none("network");
    v.text("bottleneck", verdict);
  }
};

const std::set<std::string> kCounters = {"samples", "io.busy_s"};

// One HTTP request to 127.0.0.1:port; the whole answer (status line, headers, body).
std::string http_get(unsigned port, const std::string& request) {
  internal::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "<connect failed>";
  if (::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
    return "<send failed>";
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd.get(), buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MetricName, UnitsAreSpelledOutAndGroupsJoined) {
  EXPECT_EQ(metric_name("io.busy_s"), "stoker_io_busy_seconds");
  EXPECT_EQ(metric_name("bytes_read"), "stoker_read_bytes");
  EXPECT_EQ(metric_name("network.bytes_fetched"), "stoker_network_fetched_bytes");
  EXPECT_EQ(metric_name("network.bytes_per_s"), "stoker_network_bytes_per_second");
  EXPECT_EQ(metric_name("consumer_wait_frac"), "stoker_consumer_wait_ratio");
  EXPECT_EQ(metric_name("samples_per_s"), "stoker_samples_per_second");
  EXPECT_EQ(metric_name("record_bytes"), "stoker_record_bytes");
}

TEST(MetricsText, KindsBecomeCountersGaugesAndLabelledGauges) {
  FakeStats s{.samples = 640, .busy_s = 1.5};
  auto server = MetricsServer::on_port(0);
  auto reg = server->add({{"loader", "0"}}, [&](StatsVisitor& v) { s.visit(v); }, kCounters);
  const std::string text = server->render();
  EXPECT_NE(text.find("# TYPE stoker_samples_total counter\nstoker_samples_total{loader=\"0\"} 640\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE stoker_io_busy_seconds_total counter\nstoker_io_busy_seconds_total{loader=\"0\"} 1.5\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE stoker_samples_per_second gauge\nstoker_samples_per_second{loader=\"0\"} 12.5\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("stoker_io_threads{loader=\"0\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_tokens{loader=\"0\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE stoker_bottleneck gauge\nstoker_bottleneck{loader=\"0\",bottleneck=\"decode\"} 1\n"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("network"), std::string::npos) << "a group that does not apply is left out:\n" << text;
}

TEST(MetricsText, CountersStayMonotonicWhenTheRunRestarts) {
  FakeStats s{.samples = 640, .busy_s = 2};
  auto server = MetricsServer::on_port(0);
  auto reg = server->add({}, [&](StatsVisitor& v) { s.visit(v); }, kCounters);
  EXPECT_NE(server->render().find("stoker_samples_total 640\n"), std::string::npos);
  s.samples = 64;  // the next epoch's run counts from 0 again
  s.busy_s = 0.5;
  const std::string text = server->render();
  EXPECT_NE(text.find("stoker_samples_total 704\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_io_busy_seconds_total 2.5\n"), std::string::npos) << text;
  s.samples = 128;
  EXPECT_NE(server->render().find("stoker_samples_total 768\n"), std::string::npos);
}

TEST(MetricsText, LabelValuesAreEscaped) {
  FakeStats s;
  s.verdict = "say \"hi\"\\\nbye";
  auto server = MetricsServer::on_port(0);
  auto reg = server->add({{"dataset", "a\"b"}}, [&](StatsVisitor& v) { s.visit(v); }, kCounters);
  const std::string text = server->render();
  EXPECT_NE(text.find("{dataset=\"a\\\"b\",bottleneck=\"say \\\"hi\\\"\\\\\\nbye\"} 1\n"), std::string::npos) << text;
  EXPECT_EQ(error_code_of([&] { (void)server->add({{"9bad", "x"}}, [](StatsVisitor&) {}, {}); }),
            ErrorCode::kInvalidArgument);
}

TEST(MetricsServer, TwoSourcesShareEachFamilyUnderOneTypeLine) {
  FakeStats a{.samples = 1}, b{.samples = 2};
  auto server = MetricsServer::on_port(0);
  auto ra = server->add({{"loader", "0"}}, [&](StatsVisitor& v) { a.visit(v); }, kCounters);
  auto rb = server->add({{"loader", "1"}}, [&](StatsVisitor& v) { b.visit(v); }, kCounters);
  std::string text = server->render();
  EXPECT_EQ(occurrences(text, "# TYPE stoker_samples_total "), 1u) << text;
  EXPECT_NE(text.find("stoker_samples_total{loader=\"0\"} 1\nstoker_samples_total{loader=\"1\"} 2\n"),
            std::string::npos) << text;
  rb = MetricsRegistration();  // removed: its series go
  text = server->render();
  EXPECT_EQ(text.find("loader=\"1\""), std::string::npos) << text;
}

TEST(MetricsServer, ScrapeOverHttp) {
  FakeStats s{.samples = 7};
  auto server = MetricsServer::on_port(0);
  auto reg = server->add({{"loader", "0"}}, [&](StatsVisitor& v) { s.visit(v); }, kCounters);
  const std::string ok = http_get(server->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << ok;
  EXPECT_NE(ok.find("\r\n\r\n# HELP "), std::string::npos) << ok;
  EXPECT_NE(ok.find("stoker_samples_total{loader=\"0\"} 7\n"), std::string::npos) << ok;
  EXPECT_EQ(http_get(server->port(), "GET /other HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  EXPECT_EQ(http_get(server->port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405 ", 0), 0u);
  const std::string head = http_get(server->port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_EQ(head.find("# HELP"), std::string::npos) << head;
}

TEST(MetricsServer, APortInUseIsUnavailableNamingThePort) {
  internal::UniqueFd taken(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(taken.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(taken.get(), 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(taken.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  const unsigned port = ntohs(addr.sin_port);
  std::string message;
  EXPECT_EQ(error_code_of([&] { (void)MetricsServer::on_port(port); }, &message), ErrorCode::kUnavailable);
  EXPECT_NE(message.find("metrics port " + std::to_string(port) + " is in use"), std::string::npos) << message;
  EXPECT_EQ(error_code_of([&] { (void)MetricsServer::on_port(70000); }), ErrorCode::kInvalidArgument);
}

TEST(MetricsServer, TheSamePortIsOneServerWhileItIsHeld) {
  auto first = MetricsServer::on_port(0);
  auto again = MetricsServer::on_port(first->port());
  EXPECT_EQ(first.get(), again.get());
}

TEST(MetricsLoader, TwoLoadersOnOnePortAreToldApartAndCount) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 48});
  auto port_holder = MetricsServer::on_port(0);  // a free port, kept open for the loaders to join
  auto o = testing::image_options(dir.str());
  o.metrics_port = port_holder->port();
  Loader a(o), b(o);
  while (a.next()) {}
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(b.next());
  const std::string text = http_get(o.metrics_port, "GET /metrics HTTP/1.1\r\n\r\n");
  const std::string la = "loader=\"", ds = "\",rank=\"0\",dataset=\"" + dir.str() + "\"";
  // The process's loader count goes on across tests: find the two labels by their samples.
  const size_t at = text.find("stoker_samples_total{" + la);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(occurrences(text, "# TYPE stoker_samples_total counter"), 1u);
  EXPECT_EQ(occurrences(text, "stoker_samples_total{"), 2u) << text;
  EXPECT_NE(text.find("stoker_samples_total{" + la), std::string::npos);
  EXPECT_NE(text.find(ds + "} 48\n"), std::string::npos) << text;  // a's whole epoch
  EXPECT_NE(text.find("stoker_bottleneck{"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_decode_busy_seconds_total{"), std::string::npos) << text;
  EXPECT_NE(text.find("stoker_slots{"), std::string::npos) << text;
}

// The Loader says when a run ends (set_epoch), so an epoch never scraped still counts.
TEST(MetricsLoader, AnEpochEndedBetweenScrapesIsCountedWhole) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 48});
  auto o = testing::image_options(dir.str());
  auto server = MetricsServer::on_port(0);
  o.metrics_port = server->port();
  Loader l(o);
  while (l.next()) {}
  l.set_epoch(1);
  ASSERT_TRUE(l.next());
  const std::string text = server->render();
  const size_t at = text.find("\nstoker_samples_total{");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  EXPECT_EQ(line.substr(line.rfind(' ')), " 56") << line;  // 48 + one batch of 8
}

TEST(MetricsLoader, AnEnvironmentPortThatIsNotAPortIsInvalid) {
  TempDir dir;
  testing::write_image_dataset(dir.str(), {.count = 8});
  ::setenv("STOKER_METRICS_PORT", "91x", 1);
  std::string message;
  const ErrorCode code = error_code_of([&] { Loader l(testing::image_options(dir.str())); }, &message);
  ::unsetenv("STOKER_METRICS_PORT");
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("STOKER_METRICS_PORT='91x'"), std::string::npos) << message;
}

}  // namespace
}  // namespace stoker
