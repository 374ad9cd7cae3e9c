// One logger for the library's messages (warnings about fallbacks, skipped records,
// resources): levels, a threshold from the environment, and a settable sink.
//
// STOKER_LOG=error|warn|info|debug sets the threshold (default warn), read once, at the
// first message; messages above it are dropped before they are formatted by the sink.
// The default sink writes one line to stderr, "stoker: warning: <message>"; the Python
// binding installs one that hands messages to Python's `logging` ("stoker" logger).
//
// Thread safety: every function may be called from any thread. The sink is called
// outside the logger's lock, on the thread that logs, one call per message; a sink
// must not block on work the logging thread is needed for.
#pragma once

#include <functional>
#include <string>

namespace stoker::internal {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// "error", "warn", "info", "debug".
const char* log_level_name(LogLevel level) noexcept;

/// The threshold: messages at it or below it (more severe) are written.
LogLevel log_level();
/// Overrides STOKER_LOG for the rest of the process.
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);

using LogSink = std::function<void(LogLevel, const std::string&)>;
/// Routes messages to `sink`; an empty one restores the stderr sink.
void set_log_sink(LogSink sink);

/// Writes `message` when `level` is enabled.
void log_message(LogLevel level, const std::string& message);
inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::kWarn, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_debug(const std::string& m) { log_message(LogLevel::kDebug, m); }

/// A warning written the first time `key` is seen in this process only (a condition of
/// the machine, such as a refused O_DIRECT, that every later open would repeat).
void log_warn_once(const std::string& key, const std::string& message);

}  // namespace stoker::internal
