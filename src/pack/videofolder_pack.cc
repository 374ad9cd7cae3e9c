// pack_videofolder: SRC/<class>/<...>/<video> -> `__key__:text video:video label:int64`,
// the video counterpart of pack_imagefolder: files taken by extension (mp4, mkv, webm,
// mov, avi; anything else ignored and counted), classes in byte order, files sorted
// within each, every video probed (and decoded, unless check_decode is off) on the
// worker threads (re-encoded first with options.video_reencode) and stored behind its
// media index, records appended in list order.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/media.h"
#include "stoker/pack.h"

namespace stoker {

namespace fs = std::filesystem;
using namespace internal;

namespace {

struct Video {
  std::string path, key;
  int64_t label = 0;
  uint64_t size = 0;
};

bool is_video_name(const fs::path& p) {
  std::string ext = p.extension().string();
  if (ext.size() < 2) return false;
  ext.erase(0, 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return media_kind_by_extension(ext) == FieldKind::kVideo;
}

// The class folders of `src`, sorted, and their videos (sorted within each class).
std::vector<Video> list_videos(const std::string& src, std::vector<std::string>& classes, uint64_t& ignored) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(src, ec))
    if (std::error_code d; e.is_directory(d)) classes.push_back(e.path().filename().string());
  if (ec) throw_error(ErrorCode::kIoError, "list " + src + ": " + ec.message());
  std::sort(classes.begin(), classes.end());
  std::vector<Video> out;
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = fs::path(src) / classes[c];
    std::vector<Video> mine;
    for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (std::error_code r; !it->is_regular_file(r)) continue;
      if (!is_video_name(it->path())) {
        ++ignored;
        continue;
      }
      std::error_code s;
      const uint64_t size = it->file_size(s);
      mine.push_back({it->path().string(), (fs::path(classes[c]) / it->path().lexically_relative(dir)).string(),
                      static_cast<int64_t>(c), s ? 0 : size});
    }
    if (ec) throw_error(ErrorCode::kIoError, "list " + dir.string() + ": " + ec.message());
    std::sort(mine.begin(), mine.end(), [](const Video& a, const Video& b) { return a.key < b.key; });
    out.insert(out.end(), mine.begin(), mine.end());
  }
  return out;
}

struct Packed {
  std::string bad;  // "path: reason" when the video cannot be used
  ErrorCode code = ErrorCode::kDataLoss;
  uint64_t input_bytes = 0;
  ReencodeTally reencoded;
  PreparedRecord record;
};

}  // namespace

PackSummary pack_videofolder(const std::string& src, const std::string& out, const PackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!fs::is_directory(src))
    throw_error(fs::exists(src) ? ErrorCode::kInvalidArgument : ErrorCode::kNotFound, src + " is not a directory");
  check_output_outside(src, out, "source");
  if (options.video_reencode.enabled()) options.video_reencode.check();
  std::vector<std::string> classes;
  uint64_t ignored = 0;
  std::vector<Video> videos = list_videos(src, classes, ignored);
  if (videos.empty())
    throw_error(ErrorCode::kInvalidArgument, src + " holds no video files (mp4, mkv, webm, mov, avi) under class "
                                                   "directories (expected SRC/<class>/<video>)");
  if (options.part.enabled()) videos = part_slice(videos, options.part, "videos");
  uint64_t total_bytes = 0;
  for (const Video& v : videos) total_bytes += v.size;

  Schema schema;
  schema.fields = {Field{"video", FieldKind::kVideo}, Field{"label", FieldKind::kInt64}};
  add_key_field(schema);
  DatasetWriter writer(out, schema, writer_options(options, out), options.overwrite);
  writer.manifest().class_names = classes;
  writer.manifest().meta["source"] = "videofolder";
  note_video_reencode(options, writer.manifest());
  const ShardWriterOptions shard_opts = writer.options().shard;

  auto produce = [&](size_t i) {
    Packed p;
    const Video& v = videos[i];
    try {
      const std::vector<uint8_t> file = read_whole_file(v.path, 4ull << 30);
      p.input_bytes = file.size();
      const std::vector<uint8_t> value = media_field_value(file, FieldKind::kVideo, options, p.reencoded);
      const auto label = le64(v.label);
      const std::span<const uint8_t> fields[] = {as_bytes(v.key), value, label};
      p.record = prepare_record(schema, fields, shard_opts);
    } catch (const Error& e) {
      p.code = e.code();
      const std::string why = e.what();
      p.bad = why.find(v.path) != std::string::npos ? why : v.path + ": " + why;
    }
    return p;
  };
  PackSummary summary;
  ProgressReporter progress("pack videofolder", videos.size(), total_bytes, options.progress);
  uint64_t done = 0;
  ReencodeTally reencoded;
  const int threads = resolve_threads(options.threads);
  ordered_parallel_for<Packed>(videos.size(), threads, static_cast<size_t>(threads) * 2, produce, [&](size_t, Packed&& p) {
    check_cancel(options.cancel, writer, "pack videofolder", out);
    summary.input_bytes += p.input_bytes;
    progress.update(++done, summary.input_bytes);
    if (p.bad.empty()) {
      reencoded.add(p.reencoded);
      writer.add_prepared(p.record);
      return;
    }
    if (!options.skip_bad) throw_error(p.code, p.bad);
    summary.skipped.push_back(p.bad);
  });
  progress.finish();
  Manifest m = finish_nonempty(writer, "pack videofolder", summary);
  fill_summary(summary, m, writer);
  if (std::string note = reencode_note(options, reencoded); !note.empty()) summary.notes.push_back(note);
  if (ignored) summary.notes.push_back("ignored " + std::to_string(ignored) + " files without a video extension");
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
