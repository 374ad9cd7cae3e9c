// util/log.h: the threshold decides what reaches the sink, the sink can be replaced and
// restored, warn-once keys hold per process, and messages from many threads arrive whole.
#include "util/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "util/test_util.h"

namespace stoker::internal {
namespace {

// Captures what reaches the sink; puts the stderr sink and the threshold back.
struct Captured {
  std::mutex mu;
  std::vector<std::pair<LogLevel, std::string>> got;
  LogLevel saved = log_level();
  Captured() {
    set_log_sink([this](LogLevel l, const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      got.emplace_back(l, m);
    });
  }
  ~Captured() {
    set_log_sink({});
    set_log_level(saved);
  }
};

TEST(Log, ThresholdDecidesWhatReachesTheSink) {
  Captured c;
  set_log_level(LogLevel::kWarn);
  log_error("e");
  log_warn("w");
  log_info("i");
  log_debug("d");
  set_log_level(LogLevel::kDebug);
  log_debug("d2");
  set_log_level(LogLevel::kError);
  log_warn("w2");
  const std::vector<std::pair<LogLevel, std::string>> want = {
      {LogLevel::kError, "e"}, {LogLevel::kWarn, "w"}, {LogLevel::kDebug, "d2"}};
  EXPECT_EQ(c.got, want);
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  EXPECT_FALSE(log_enabled(LogLevel::kWarn));
}

TEST(Log, WarnOnceKeysHoldPerProcess) {
  Captured c;
  set_log_level(LogLevel::kWarn);
  log_warn_once("log_test/a", "first a");
  log_warn_once("log_test/a", "second a");
  log_warn_once("log_test/b", "first b");
  const std::vector<std::pair<LogLevel, std::string>> want = {{LogLevel::kWarn, "first a"},
                                                              {LogLevel::kWarn, "first b"}};
  EXPECT_EQ(c.got, want);
}

TEST(Log, DefaultSinkWritesOneStderrLineWithTheLevel) {
  const LogLevel saved = log_level();
  set_log_level(LogLevel::kInfo);
  testing::TempDir d;
  const std::string path = d.str("err");
  std::fflush(stderr);
  const int saved_fd = ::dup(2);
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  ::dup2(::fileno(f), 2);
  log_warn("disk is slow");
  log_error("disk is gone");
  log_info("disk is fine");
  log_debug("not shown");
  std::fflush(stderr);
  ::dup2(saved_fd, 2);
  ::close(saved_fd);
  std::fclose(f);
  set_log_level(saved);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "stoker: warning: disk is slow\nstoker: error: disk is gone\nstoker: disk is fine\n");
}

TEST(Log, MessagesFromManyThreadsArriveWhole) {
  Captured c;
  set_log_level(LogLevel::kWarn);
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([t] {
      for (int i = 0; i < 200; ++i) log_warn("thread " + std::to_string(t) + " message " + std::to_string(i));
    });
  for (auto& t : ts) t.join();
  ASSERT_EQ(c.got.size(), 1600u);
  std::vector<int> next(8, 0);
  for (const auto& [level, m] : c.got) {
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(m.c_str(), "thread %d message %d", &t, &i), 2) << m;
    EXPECT_EQ(i, next[static_cast<size_t>(t)]++) << m;  // each thread's messages in its order
  }
}

TEST(Log, LevelsHaveOneNameEach) {
  EXPECT_STREQ(log_level_name(LogLevel::kError), "error");
  EXPECT_STREQ(log_level_name(LogLevel::kWarn), "warn");
  EXPECT_STREQ(log_level_name(LogLevel::kInfo), "info");
  EXPECT_STREQ(log_level_name(LogLevel::kDebug), "debug");
}

}  // namespace
}  // namespace stoker::internal
