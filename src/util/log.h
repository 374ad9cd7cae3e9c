// The library's logger (the public half, levels and the sink, is include/stoker/log.h):
// the shorthands library code logs with, and warnings given once per process.
//
// Thread safety: as stoker/log.h, every function may be called from any thread.
#pragma once

#include <string>

#include "stoker/log.h"

namespace stoker::internal {

using stoker::LogLevel;
using stoker::LogSink;
using stoker::log_level;
using stoker::log_level_name;
using stoker::log_message;
using stoker::set_log_level;
using stoker::set_log_sink;

bool log_enabled(LogLevel level);

inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::kWarn, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_debug(const std::string& m) { log_message(LogLevel::kDebug, m); }

/// A warning written the first time `key` is seen in this process only (a condition of
/// the machine, such as a refused O_DIRECT, that every later open would repeat).
void log_warn_once(const std::string& key, const std::string& message);

}  // namespace stoker::internal
