#include "pack/pack_common.h"

#include "stoker/dataset_store.h"
#include "stoker/remote.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "decode/formats.h"
#include "pack/ordered_pool.h"
#include "stoker/error.h"
#include "util/bytes.h"
#include "util/platform.h"

namespace stoker::internal {

namespace fs = std::filesystem;

int resolve_threads(int requested) noexcept {
  return requested > 0 ? requested : static_cast<int>(usable_cpus());
}

std::vector<uint8_t> read_whole_file(const std::string& path, uint64_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw errno_error("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) throw_error(ErrorCode::kInvalidArgument, path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw_error(ErrorCode::kResourceExhausted, path + ": file of " + std::to_string(size) +
                                                   " bytes exceeds the limit of " + std::to_string(max_bytes));
  std::vector<uint8_t> data(static_cast<size_t>(size));
  size_t got = pread_full(fd.get(), data.data(), data.size(), 0, path);
  if (got != data.size())
    throw_error(ErrorCode::kIoError, path + ": file shrank while being read (" + std::to_string(got) + " of " +
                                         std::to_string(size) + " bytes)");
  return data;
}

void write_whole_file(const std::string& path, std::span<const uint8_t> data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) throw errno_error("create " + path, errno);
  write_full(fd.get(), data.data(), data.size(), path);
}

std::string check_image_header(std::span<const uint8_t> b, ImageFormat* format, JpegHeader* jpeg) {
  const ImageFormatRow* row = sniff_image_format(b);
  if (format) *format = row != nullptr ? row->id : ImageFormat::kUnknown;
  if (row == nullptr) return "not an image (" + image_format_list() + " magic bytes expected)";
  return row->check_header(b, jpeg);
}

void check_output_outside(const std::string& input, const std::string& output, const char* input_role) {
  std::error_code ec;
  const fs::path in = fs::weakly_canonical(fs::absolute(input, ec), ec);
  if (ec) return;  // an input that cannot be resolved fails later with its own error
  const fs::path out = fs::weakly_canonical(fs::absolute(output, ec), ec);
  if (ec) return;
  auto inside = [](const fs::path& child, const fs::path& parent) {
    auto c = child.begin(), p = parent.begin();
    for (; p != parent.end(); ++p, ++c) {
      if (p->empty()) continue;  // a trailing '/' of a directory path
      if (c == child.end() || *c != *p) return false;
    }
    return true;
  };
  if (inside(out, in))
    throw_error(ErrorCode::kInvalidArgument, "output " + output + (out == in ? " is the " : " is inside the ") +
                                                 input_role + " " + input +
                                                 ": it would write into what it reads; choose an output directory "
                                                 "outside it");
}

void check_cancel(const std::atomic<bool>* cancel, DatasetWriter& writer, const std::string& what,
                  const std::string& out) {
  if (!cancel || !cancel->load(std::memory_order_relaxed)) return;
  const uint64_t records = writer.records();
  const size_t removed = writer.discard();
  throw_error(ErrorCode::kCancelled, what + " interrupted after " + std::to_string(records) + " records; removed " +
                                         std::to_string(removed) + " partial shard file" + (removed == 1 ? "" : "s") +
                                         " from " + out + ", nothing was packed (a dataset already there is unchanged)");
}

Manifest finish_nonempty(DatasetWriter& writer, const std::string& what, const PackSummary& summary) {
  if (writer.records() > 0) return writer.finish();
  writer.discard();
  std::string why = what + " packed 0 records";
  if (!summary.skipped.empty())
    why += ": all " + std::to_string(summary.skipped.size()) + " inputs were skipped (the first: " +
           summary.skipped.front() + ")";
  throw_error(ErrorCode::kInvalidArgument, why + "; nothing was written");
}

std::string fast_crop_size_note(uint64_t jpegs, uint64_t before, uint64_t after) {
  if (jpegs == 0 || before == 0) return {};
  char buf[160];
  std::snprintf(buf, sizeof buf, "fast crop: %llu JPEGs, %s -> %s (%+.1f %%)", static_cast<unsigned long long>(jpegs),
                format_bytes(static_cast<double>(before)).c_str(), format_bytes(static_cast<double>(after)).c_str(),
                100.0 * (static_cast<double>(after) / static_cast<double>(before) - 1.0));
  return buf;
}

std::string exif_transpose_note(uint64_t turned, uint64_t trimmed) {
  if (turned == 0) return {};
  std::string note = "exif transpose: " + std::to_string(turned) + " JPEG" + (turned == 1 ? "" : "s") +
                     " turned upright (lossless)";
  if (trimmed)
    note += ", " + std::to_string(trimmed) + " of them trimmed by their partial edge MCU (< 16 px) to stay lossless";
  return note;
}

DatasetWriterOptions writer_options(const PackOptions& options, const std::string& out) {
  DatasetWriterOptions w;
  w.store = open_dataset_store(out);
  w.shard_size = options.shard_size;
  w.shard.align = options.align;
  w.part = options.part;
  w.append = options.append;
  return w;
}

void fill_summary(PackSummary& s, const Manifest& m, const DatasetWriter& w) {
  s.records = w.records();
  // An append's manifest lists the dataset's old shards first.
  const size_t old = w.options().append ? w.base().shards.size() : 0;
  s.shards = m.shards.size() - old;
  s.bytes = m.total_bytes() - w.base().total_bytes();
  s.raw_bytes = w.raw_bytes();
  s.stored_bytes = w.stored_bytes();
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::optional<FieldKind> media_kind_by_extension(std::string_view ext) {
  static constexpr std::string_view kVideo[] = {"mp4", "mkv", "webm", "mov", "avi"};
  static constexpr std::string_view kAudio[] = {"wav", "flac", "mp3", "ogg", "opus", "m4a"};
  for (std::string_view v : kVideo)
    if (ext == v) return FieldKind::kVideo;
  for (std::string_view a : kAudio)
    if (ext == a) return FieldKind::kAudio;
  return std::nullopt;
}

MediaProbeOptions media_probe_options(const PackOptions& options) {
  MediaProbeOptions o;
  o.decode = options.check_decode;
  return o;
}

std::vector<uint8_t> media_field_value(std::span<const uint8_t> file, FieldKind kind, const PackOptions& options,
                                       ReencodeTally& tally) {
  if (kind != FieldKind::kVideo || !options.video_reencode.enabled())
    return pack_media_value(file, kind == FieldKind::kVideo ? stoker::MediaKind::kVideo : stoker::MediaKind::kAudio,
                            media_probe_options(options));
  std::vector<uint8_t> value = pack_reencoded_video_value(file, options.video_reencode, media_probe_options(options));
  MediaInfo info;
  ++tally.videos;
  tally.before += file.size();
  tally.after += parse_media_value(value, info).size();
  return value;
}

void note_video_reencode(const PackOptions& options, Manifest& manifest) {
  if (options.video_reencode.enabled()) manifest.meta["video_reencode"] = options.video_reencode.describe();
}

std::string reencode_note(const PackOptions& options, const ReencodeTally& tally) {
  if (tally.videos == 0 || tally.before == 0) return {};
  char buf[256];
  std::snprintf(buf, sizeof buf, "re-encoded %llu video%s (%s): %s -> %s (%+.1f %%)",
                static_cast<unsigned long long>(tally.videos), tally.videos == 1 ? "" : "s",
                options.video_reencode.describe().c_str(), format_bytes(static_cast<double>(tally.before)).c_str(),
                format_bytes(static_cast<double>(tally.after)).c_str(),
                100.0 * (static_cast<double>(tally.after) / static_cast<double>(tally.before) - 1.0));
  return buf;
}

}  // namespace stoker::internal
