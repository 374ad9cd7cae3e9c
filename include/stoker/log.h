// Where the library's messages go: warnings about fallbacks (io_uring refused, O_DIRECT
// refused), skipped records, resources. A front end (the Python binding hands them to
// Python's `logging`) routes them with set_log_sink; anyone may raise or lower the
// threshold.
//
// STOKER_LOG=error|warn|info|debug sets the threshold (default warn), read once, at the
// first message; messages above it are dropped before any sink sees them. The default
// sink writes one line to stderr, "stoker: warning: <message>".
//
// Thread safety: every function may be called from any thread. A sink is called outside
// the logger's lock, on the thread that logs (often a library thread: stoker-io, a
// decoder), one call per message; it must not block on work that thread is needed for.
#pragma once

#include <functional>
#include <string>

namespace stoker {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// "error", "warn", "info", "debug".
const char* log_level_name(LogLevel level) noexcept;

/// The threshold: messages at it or below it (more severe) are written.
LogLevel log_level();
/// Overrides STOKER_LOG for the rest of the process.
void set_log_level(LogLevel level);

using LogSink = std::function<void(LogLevel, const std::string&)>;
/// Routes messages to `sink`; an empty one restores the stderr sink.
void set_log_sink(LogSink sink);

/// Writes `message` through the sink when `level` is enabled (the library's own
/// messages go this way; a front end may log beside them).
void log_message(LogLevel level, const std::string& message);

}  // namespace stoker
