// Helpers shared by the packers: CPU count, whole-file reads, image header checks,
// and turning a finished DatasetWriter into a PackSummary.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <span>
#include <string>
#include <vector>

#include "decode/jpeg_decode.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/media.h"
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

/// What a JPEG's header says (check_jpeg_header, declared in decode/jpeg_decode.h).
using JpegHeader = ImageHeaderFacts;

/// Probes an image file's bytes for a kImage field: the format is sniffed from the
/// magic (the format table's rows; never the file name), then its row checks the header
/// (JPEG as check_jpeg_header; PNG's IHDR chunk; WebP's RIFF size and first chunk).
/// Returns "" when it looks decodable, else the reason ("not an image (JPEG, PNG or
/// WebP magic bytes expected)"). `jpeg` receives the JPEG header when the image is a JPEG.
std::string check_image_header(std::span<const uint8_t> bytes, ImageFormat* format, JpegHeader* jpeg);

/// Refuses an output directory that is, or lies inside, an input: packing `imgs` into
/// `imgs` or extracting `ds` into `ds` would read what it writes (an input inside the
/// output is fine: packers and extract only add their own files). Paths are compared
/// after resolving symlinks and `..` (for the part that exists). Throws
/// kInvalidArgument naming both.
void check_output_outside(const std::string& input, const std::string& output, const char* input_role);

/// When `cancel` is set and reads true: discards the writer's files and throws
/// kCancelled ("<what> interrupted after N records; removed M partial shard files from
/// OUT, nothing was packed").
void check_cancel(const std::atomic<bool>* cancel, DatasetWriter& writer, const std::string& what,
                  const std::string& out);

/// writer.finish(), unless nothing was added: then the writer is discarded (a dataset
/// already in the output stays as it was) and kInvalidArgument says that `what` packed
/// 0 records, with the count and first reason of the inputs skipped.
Manifest finish_nonempty(DatasetWriter& writer, const std::string& what, const PackSummary& summary);

/// The most a --fast-crop rewrite may add to a JPEG (a fraction of its size): the
/// packers choose each image's restart interval for it (fast_crop_within_budget).
inline constexpr double kFastCropMaxGrowth = 0.05;

/// The note on what --fast-crop did to the JPEGs' size ("fast crop: 120 JPEGs, 10.2 MiB
/// -> 10.6 MiB (+3.9 %)"), or "" when none was rewritten.
std::string fast_crop_size_note(uint64_t jpegs, uint64_t bytes_before, uint64_t bytes_after);

/// The note on what exif_transpose did ("exif transpose: 12 JPEGs turned upright
/// (lossless), 3 of them trimmed ..."), or "" when no JPEG was turned.
std::string exif_transpose_note(uint64_t turned, uint64_t trimmed);

/// Fills records/shards/bytes/raw/stored of `summary` from a finished writer.
void fill_summary(PackSummary& summary, const Manifest& manifest, const DatasetWriter& writer);

/// Adds the `__key__` field (text) to the front of `schema` (v2 datasets name each
/// record's source there).
inline void add_key_field(Schema& schema) {
  schema.fields.insert(schema.fields.begin(), Field{kKeyField, FieldKind::kText});
}

inline std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

/// The slice of `all` (the `what`: "images", "tars") that `part` takes (all of it when
/// no part is set). Throws kInvalidArgument when the slice is empty.
template <class T>
std::vector<T> part_slice(const std::vector<T>& all, const PartSpec& part, const std::string& what) {
  const std::pair<uint64_t, uint64_t> r = part.range(all.size());
  if (r.first == r.second)
    throw_error(ErrorCode::kInvalidArgument, "part " + part.to_string() + " of " + std::to_string(all.size()) + " " +
                                                 what + " is empty: use at most " + std::to_string(all.size()) + " parts");
  return std::vector<T>(all.begin() + static_cast<ptrdiff_t>(r.first), all.begin() + static_cast<ptrdiff_t>(r.second));
}

/// The DatasetWriter options every packer starts from (shard size, alignment, part),
/// and the store `out` names (a directory, or an s3:// prefix).
DatasetWriterOptions writer_options(const PackOptions& options, const std::string& out);

/// pack_tokens; with `split_records` false a part packs the whole stream it is given
/// (pack_text hands each part a stream of its own documents).
/// `meta`: more manifest meta (pack_text: the tokenizer and the ids around documents).
PackSummary pack_tokens_impl(const std::string& file, const std::string& out, const TokensPackOptions& options,
                             bool split_records, const std::map<std::string, std::string>& meta = {});

/// The field kind of a media file's extension (lower case, no dot): mp4, mkv, webm, mov,
/// avi → kVideo; wav, flac, mp3, ogg, opus, m4a → kAudio; nullopt otherwise.
std::optional<FieldKind> media_kind_by_extension(std::string_view ext);

/// How packers probe media files: decoded in full unless --no-check.
MediaProbeOptions media_probe_options(const PackOptions& options);

/// Videos re-encoded by media_field_value, for the summary's note.
struct ReencodeTally {
  uint64_t videos = 0, before = 0, after = 0;  // count, file bytes in, file bytes out
  void add(const ReencodeTally& o) { videos += o.videos, before += o.before, after += o.after; }
};

/// A media field's stored value (media index + file): `file` probed as `kind`, a video
/// re-encoded first when options.video_reencode is on (counted in `tally`).
std::vector<uint8_t> media_field_value(std::span<const uint8_t> file, FieldKind kind, const PackOptions& options,
                                       ReencodeTally& tally);

/// Sets the manifest meta "video_reencode" of a packer that re-encodes videos.
void note_video_reencode(const PackOptions& options, Manifest& manifest);

/// "re-encoded 12 videos (libx264 gop=16 ...): 40 MiB -> 9 MiB (-77.5 %)"; empty when none.
std::string reencode_note(const PackOptions& options, const ReencodeTally& tally);

/// Last path component of `path` (without trailing slashes).
std::string base_name(const std::string& path);

}  // namespace stoker::internal
