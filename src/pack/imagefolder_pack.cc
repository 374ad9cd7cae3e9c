// pack_imagefolder: SRC/<class>/<...>/<file> -> `__key__:text image:image label:int64`
// shards (JPEG, PNG and WebP files, told apart by their magic bytes).
//
// The main thread lists the tree (sorted byte-wise, so the order never depends on the
// file system), then worker threads read each file, probe its image header, optionally
// rewrite a progressive JPEG as baseline, and prepare the record (concatenation +
// CRC32C). The main thread appends prepared records in list order; a bad file is
// reported (or skipped) when its turn comes, so the outcome is the same for any
// thread count.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "decode/exif_orientation.h"
#include "decode/formats.h"
#include "decode/image_check.h"
#include "decode/restart_index.h"
#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "stoker/pack.h"

namespace stoker {

namespace fs = std::filesystem;
using namespace internal;

namespace {

struct Item {
  std::string path;  // full path, for reading and messages
  std::string key;   // path relative to SRC ("cat/0001.png"): the record's __key__
  int64_t label = 0;
};

struct Prepared {
  bool bad = false;
  ErrorCode code = ErrorCode::kDataLoss;
  std::string reason;
  bool rewritten = false;
  uint64_t input_bytes = 0;
  uint64_t fast_crop_before = 0, fast_crop_after = 0;  // a JPEG rewritten for fast crop
  bool exif_turned = false, exif_trimmed = false;       // exif_transpose turned it (and trimmed it)
  PreparedRecord record;
};

std::vector<std::string> list_dirs(const std::string& src) {
  std::vector<std::string> classes;
  std::error_code ec;
  fs::directory_iterator it(src, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory)
      throw_error(ErrorCode::kNotFound, "open " + src + ": " + ec.message());
    throw_error(ErrorCode::kIoError, "open " + src + ": " + ec.message());
  }
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) throw_error(ErrorCode::kIoError, "list " + src + ": " + ec.message());
    std::error_code e2;
    if (it->is_directory(e2)) classes.push_back(it->path().filename().string());
  }
  if (ec) throw_error(ErrorCode::kIoError, "list " + src + ": " + ec.message());
  std::sort(classes.begin(), classes.end());
  return classes;
}

// torchvision's ImageFolder takes files by extension; so does pack: the formats stoker
// decodes, plus the image formats it does not (so that those are named as errors
// rather than silently dropped). Anything else (.DS_Store, Thumbs.db, a README) is
// ignored and counted.
bool has_image_extension(const std::string& name) {
  static const char* const kUndecodedImageExtensions[] = {"bmp", "ppm", "pgm", "tif", "tiff", "gif"};
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || name.find('/', dot) != std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (image_format_by_extension(ext) != nullptr) return true;
  for (const char* e : kUndecodedImageExtensions)
    if (ext == e) return true;
  return false;
}

}  // namespace

PackSummary pack_imagefolder(const std::string& src, const std::string& out,
                             const ImageFolderPackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!fs::is_directory(src)) {
    if (!fs::exists(src)) throw_error(ErrorCode::kNotFound, src + ": no such directory");
    throw_error(ErrorCode::kInvalidArgument, src + " is not a directory");
  }
  check_output_outside(src, out, "source");
  const std::vector<std::string> classes = list_dirs(src);
  if (classes.empty())
    throw_error(ErrorCode::kInvalidArgument, src + " has no class directories (expected SRC/<class>/<image>)");

  std::vector<Item> items;
  uint64_t total_bytes = 0;
  std::vector<std::string> ignored;  // files that are not images by extension
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path dir = fs::path(src) / classes[c];
    std::vector<std::pair<std::string, uint64_t>> files;  // relative path, size
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
    if (ec) throw_error(ErrorCode::kIoError, "list " + dir.string() + ": " + ec.message());
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) throw_error(ErrorCode::kIoError, "list " + dir.string() + ": " + ec.message());
      std::error_code e2;
      if (!it->is_regular_file(e2)) continue;
      uint64_t size = it->file_size(e2);
      files.emplace_back(it->path().lexically_relative(dir).string(), e2 ? 0 : size);
    }
    if (ec) throw_error(ErrorCode::kIoError, "list " + dir.string() + ": " + ec.message());
    std::sort(files.begin(), files.end());
    for (auto& [rel, size] : files) {
      if (!has_image_extension(rel)) {
        ignored.push_back((fs::path(classes[c]) / rel).string());
        continue;
      }
      items.push_back(Item{(dir / rel).string(), (fs::path(classes[c]) / rel).string(), static_cast<int64_t>(c)});
      total_bytes += size;
    }
  }
  if (items.empty())
    throw_error(ErrorCode::kInvalidArgument,
                src + " holds no image files under its class directories" +
                    (ignored.empty() ? std::string()
                                     : " (" + std::to_string(ignored.size()) + " files without an image extension, e.g. " +
                                           ignored.front() + ")"));

  if (options.part.enabled()) {
    items = part_slice(items, options.part, "images");
    total_bytes = 0;
    for (const Item& item : items) {
      std::error_code ec;
      const uint64_t size = fs::file_size(item.path, ec);
      total_bytes += ec ? 0 : size;
    }
  }

  Schema schema;
  schema.fields = {Field{"image", FieldKind::kImage}, Field{"label", FieldKind::kInt64}};
  add_key_field(schema);
  const DatasetWriterOptions wopts = writer_options(options, out);
  DatasetWriter writer(out, schema, wopts, options.overwrite);
  writer.manifest().class_names = classes;
  writer.manifest().meta["source"] = "imagefolder";
  if (options.baseline || options.fast_crop) writer.manifest().meta["baseline"] = "1";
  if (options.fast_crop) writer.manifest().meta["fast_crop"] = "1";

  const ShardWriterOptions shard_opts = writer.options().shard;
  auto produce = [&](size_t i) {
    Prepared p;
    const Item& item = items[i];
    try {
      std::vector<uint8_t> bytes = read_whole_file(item.path, options.max_file_bytes);
      p.input_bytes = bytes.size();
      JpegHeader info;
      ImageFormat format = ImageFormat::kUnknown;
      std::string why = check_image_header(bytes, &format, &info);
      if (!why.empty()) {
        p.bad = true;
        p.reason = why;
        return p;
      }
      // The fast-crop rewrite reads every coefficient itself, under the same rules.
      const bool transcoded = format == ImageFormat::kJpeg && (options.fast_crop || (options.baseline && info.progressive));
      if (options.check_decode && !transcoded) {
        why = check_image_decodes(bytes);
        if (!why.empty()) {
          p.bad = true;
          p.reason = why;
          return p;
        }
      }
      if (options.exif_transpose && format == ImageFormat::kJpeg) {
        ExifTranspose upright = jpeg_exif_transpose(bytes);
        if (!upright.jpeg.empty()) {
          bytes = std::move(upright.jpeg);
          p.exif_turned = true;
          p.exif_trimmed = upright.trimmed;
        }
      }
      if (options.fast_crop && format == ImageFormat::kJpeg) {
        p.fast_crop_before = bytes.size();
        bytes = internal::fast_crop_within_budget(bytes, {}, kFastCropMaxGrowth);
        p.fast_crop_after = bytes.size();
        p.rewritten = true;
      } else if (options.baseline && format == ImageFormat::kJpeg && info.progressive) {
        bytes = jpeg_to_baseline(bytes);
        p.rewritten = true;
      }
      const auto label = le64(item.label);
      const std::span<const uint8_t> fields[] = {as_bytes(item.key), bytes, label};
      p.record = prepare_record(schema, fields, shard_opts);
    } catch (const Error& e) {
      p.bad = true;
      p.code = e.code();
      p.reason = e.what();
    }
    return p;
  };

  PackSummary summary;
  uint64_t fast_crop_jpegs = 0, fast_crop_before = 0, fast_crop_after = 0;
  uint64_t exif_turned = 0, exif_trimmed = 0;
  ProgressReporter progress("pack imagefolder", items.size(), total_bytes, options.progress);
  uint64_t done = 0;
  const int threads = resolve_threads(options.threads);
  ordered_parallel_for<Prepared>(
      items.size(), threads, static_cast<size_t>(threads) * 8, produce, [&](size_t i, Prepared&& p) {
        check_cancel(options.cancel, writer, "pack imagefolder", out);
        summary.input_bytes += p.input_bytes;
        ++done;
        if (p.bad) {
          // Reasons from read_whole_file already name the path; others get it here.
          std::string msg = p.reason.find(items[i].path) != std::string::npos
                                ? p.reason
                                : items[i].path + ": " + p.reason;
          if (!options.skip_bad) throw_error(p.code, msg);
          summary.skipped.push_back(msg);
        } else {
          if (p.rewritten) ++summary.rewritten;
          exif_turned += p.exif_turned;
          exif_trimmed += p.exif_trimmed;
          if (p.fast_crop_before) {
            ++fast_crop_jpegs;
            fast_crop_before += p.fast_crop_before;
            fast_crop_after += p.fast_crop_after;
          }
          writer.add_prepared(p.record);
        }
        progress.update(done, summary.input_bytes);
      });
  progress.finish();
  Manifest m = finish_nonempty(writer, "pack imagefolder", summary);
  fill_summary(summary, m, writer);
  if (std::string note = fast_crop_size_note(fast_crop_jpegs, fast_crop_before, fast_crop_after); !note.empty())
    summary.notes.push_back(note);
  if (std::string note = exif_transpose_note(exif_turned, exif_trimmed); !note.empty()) summary.notes.push_back(note);
  if (!ignored.empty())
    summary.notes.push_back("ignored " + std::to_string(ignored.size()) + " file" + (ignored.size() == 1 ? "" : "s") +
                            " without an image extension (" + ignored.front() + (ignored.size() > 1 ? ", ..." : "") +
                            "), as torchvision's ImageFolder does");
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
