#include "util/log.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>

#include "util/enum_names.h"

namespace stoker::internal {
namespace {

struct Logger {
  std::mutex mu;
  bool level_set = false;
  LogLevel level = LogLevel::kWarn;
  std::shared_ptr<const LogSink> sink;  // null: stderr
  std::set<std::string> once;
};

// Leaked: messages from threads still running at exit must find it alive.
Logger& logger() {
  static Logger* l = new Logger;
  return *l;
}

void write_stderr(LogLevel level, const std::string& message) {
  const char* tag = level == LogLevel::kError  ? "error: "
                    : level == LogLevel::kWarn ? "warning: "
                    : level == LogLevel::kInfo ? ""
                                               : "debug: ";
  // One call, so lines from several threads do not interleave.
  std::fprintf(stderr, "stoker: %s%s\n", tag, message.c_str());
}

// "warning" is accepted too (a common spelling); names print as the first listed.
constexpr EnumName<LogLevel> kLogLevelNames[] = {{LogLevel::kError, "error"},
                                                 {LogLevel::kWarn, "warn"},
                                                 {LogLevel::kInfo, "info"},
                                                 {LogLevel::kDebug, "debug"},
                                                 {LogLevel::kWarn, "warning"}};

// The threshold from STOKER_LOG; `bad` gets the value when it names no level.
LogLevel level_from_env(std::string* bad) {
  const char* e = std::getenv("STOKER_LOG");
  if (!e || !*e) return LogLevel::kWarn;
  if (const std::optional<LogLevel> l = enum_lookup(kLogLevelNames, e)) return *l;
  *bad = e;
  return LogLevel::kWarn;
}

}  // namespace

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(log_level()); }

void log_warn_once(const std::string& key, const std::string& message) {
  {
    Logger& l = logger();
    std::lock_guard<std::mutex> lock(l.mu);
    if (!l.once.insert(key).second) return;
  }
  log_warn(message);
}

}  // namespace stoker::internal

namespace stoker {

using internal::enum_name;
using internal::kLogLevelNames;
using internal::level_from_env;
using internal::log_enabled;
using internal::log_warn;
using internal::logger;
using internal::Logger;
using internal::write_stderr;

const char* log_level_name(LogLevel level) noexcept { return enum_name(kLogLevelNames, level, "debug"); }

LogLevel log_level() {
  Logger& l = logger();
  std::string bad;
  LogLevel level;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    if (!l.level_set) {
      l.level = level_from_env(&bad);
      l.level_set = true;
    }
    level = l.level;
  }
  if (!bad.empty())
    log_warn("STOKER_LOG='" + bad + "' names no level (error, warn, info, debug); logging at warn");
  return level;
}

void set_log_level(LogLevel level) {
  Logger& l = logger();
  std::lock_guard<std::mutex> lock(l.mu);
  l.level = level;
  l.level_set = true;
}

void set_log_sink(LogSink sink) {
  Logger& l = logger();
  auto s = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard<std::mutex> lock(l.mu);
  l.sink = std::move(s);
}

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::shared_ptr<const LogSink> sink;
  {
    Logger& l = logger();
    std::lock_guard<std::mutex> lock(l.mu);
    sink = l.sink;
  }
  if (sink) (*sink)(level, message);
  else write_stderr(level, message);
}

}  // namespace stoker
