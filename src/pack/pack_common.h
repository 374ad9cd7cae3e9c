// Helpers shared by the packers: CPU count, whole-file reads, JPEG header probing,
// and turning a finished DatasetWriter into a PackSummary.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "stoker/pack.h"
#include "util/bytes.h"

namespace stoker::internal {

/// Worker count for `requested` (0 = usable_cpus(): the affinity mask, capped by the
/// cgroup CPU quota).
int resolve_threads(int requested) noexcept;

/// Reads a whole regular file, refusing files over `max_bytes` (kResourceExhausted)
/// before allocating. Throws errno_error naming the path on OS failures.
std::vector<uint8_t> read_whole_file(const std::string& path, uint64_t max_bytes);

/// Writes `data` to `path` (created or truncated, never following a symlink in the
/// last component). Throws errno_error naming the path.
void write_whole_file(const std::string& path, std::span<const uint8_t> data);

/// What a JPEG's header says.
struct JpegHeader {
  int width = 0, height = 0;
  bool progressive = false;
};
/// Probes a JPEG: SOI marker, marker segment structure up to the first SOF, and
/// TurboJPEG's header decode. Returns an empty string and fills `info` when it looks
/// like a decodable JPEG, else the reason it is not. Thread-safe (per-thread handle).
std::string check_jpeg_header(std::span<const uint8_t> bytes, JpegHeader* info);

/// Fills records/shards/bytes/raw/stored of `summary` from a finished writer.
void fill_summary(PackSummary& summary, const Manifest& manifest, const DatasetWriter& writer);

/// Last path component of `path` (without trailing slashes).
std::string base_name(const std::string& path);

}  // namespace stoker::internal
