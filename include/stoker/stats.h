// Figures by name: how a front end renders a stats struct (LoaderStats, NetworkStats,
// StagerStats) without copying its fields by hand. Each struct's visit() hands its
// figures, named and in a fixed order, to a StatsVisitor; the struct's to_json() and the
// Python binding's stats() dict are both made that way, so they carry the same figures
// under the same names.
//
// Threading: visit() reads the struct it is called on (a snapshot the caller holds) and
// calls the visitor on the caller's thread.
#pragma once

#include <cstdint>
#include <string>

namespace stoker {

class StatsVisitor {
 public:
  virtual ~StatsVisitor() = default;
  /// A count: items, bytes, slots, threads.
  virtual void count(const char* name, uint64_t value) = 0;
  /// A signed whole number (a device ordinal, -1 for none).
  virtual void integer(const char* name, int64_t value) = 0;
  /// A measurement: seconds, a rate, a mean, a fraction (full precision; a report may
  /// round it).
  virtual void figure(const char* name, double value) = 0;
  virtual void flag(const char* name, bool value) = 0;
  virtual void text(const char* name, const std::string& value) = 0;
  /// No value: a ratio of nothing (a hit rate before any shard was read), or a group
  /// that does not apply (a local dataset's network stage).
  virtual void none(const char* name) = 0;
  /// The figures up to the matching end_group() belong to the group `name`; groups nest.
  virtual void begin_group(const char* name) = 0;
  virtual void end_group() = 0;
};

}  // namespace stoker
