// extract_dataset: a dataset's records back out as files.
//
// Records with a `__key__` (v2) are written under their key, so each traces to its
// source: ImageFolder packs as out/<key>, other schemas WebDataset-style as
// out/<key>.<field>. v1 image datasets become an ImageFolder tree, token datasets the
// flat token stream, anything else one file per field per record. Every output name is built from
// checked parts (a class name must be a plain directory name) and files are created
// with O_NOFOLLOW, so nothing is written outside the output directory. Image and
// generic records are read and written by worker threads (file order does not
// matter); the token stream is written in order by the calling thread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "format/record_checks.h"
#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "stoker/media.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/pack.h"
#include "util/bytes.h"

namespace stoker {

using namespace internal;
namespace fs = std::filesystem;

namespace {

bool plain_name(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 255) return false;
  for (char c : s)
    if (c == '/' || c == '\0') return false;
  return true;
}

// Creates dir (one level) if missing; refuses anything there that is not a directory
// (a symlink planted in the output must not redirect writes).
void make_plain_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return;
  if (errno != EEXIST) throw errno_error("mkdir " + path, errno);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) throw errno_error("stat " + path, errno);
  if (!S_ISDIR(st.st_mode))
    throw_error(ErrorCode::kInvalidArgument, path + " exists and is not a directory (symlinks are not followed)");
}

// A key is used as a relative path: every component must be a plain name.
bool safe_key(std::string_view key) {
  if (key.empty() || key.size() > 4096 || key.front() == '/') return false;
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string_view::npos) end = key.size();
    const std::string part(key.substr(start, end - start));
    if (!plain_name(part)) return false;
    start = end + 1;
  }
  return key.find('\0') == std::string_view::npos;
}

// The NumPy dtype string of a stoker dtype (little-endian).
const char* npy_descr(DType t) {
  switch (t) {
    case DType::kBool: return "|b1";
    case DType::kUint8: return "|u1";
    case DType::kInt8: return "|i1";
    case DType::kInt16: return "<i2";
    case DType::kUint16: return "<u2";
    case DType::kInt32: return "<i4";
    case DType::kUint32: return "<u4";
    case DType::kInt64: return "<i8";
    case DType::kFloat16: return "<f2";
    case DType::kFloat32: return "<f4";
    case DType::kFloat64: return "<f8";
    case DType::kNone: break;
  }
  return "|u1";
}

// An array field as a version-1.0 .npy file (header padded to 64 bytes, as NumPy does).
std::vector<uint8_t> to_npy(const Field& f, std::span<const uint8_t> data) {
  std::vector<uint64_t> shape;
  if (f.kind == FieldKind::kVarArray) {
    const uint64_t unit = f.unit_size();
    shape.push_back(unit ? data.size() / unit : 0);
  }
  for (uint32_t d : f.shape) shape.push_back(d);
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string dict = std::string("{'descr': '") + npy_descr(f.dtype) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string head = "\x93NUMPY";
  head += '\x01';
  head += '\x00';
  head += static_cast<char>(dict.size() & 0xFF);
  head += static_cast<char>(dict.size() >> 8);
  head += dict;
  std::vector<uint8_t> out(head.size() + data.size());
  std::memcpy(out.data(), head.data(), head.size());
  if (!data.empty()) std::memcpy(out.data() + head.size(), data.data(), data.size());
  return out;
}

// How one field of a keyed record is written: WebDataset's conventions (a .cls is
// decimal text, an array a .npy file), so `pack wds` reads the output back.
std::vector<uint8_t> field_file(const Field& f, std::span<const uint8_t> data, std::string& suffix) {
  suffix = "." + f.name;
  char buf[64];
  switch (f.kind) {
    case FieldKind::kInt64: {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(get_u64(data.data())));
      return {buf, buf + std::strlen(buf)};
    }
    case FieldKind::kFloat32: {
      float v;
      std::memcpy(&v, data.data(), 4);
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
      return {buf, buf + std::strlen(buf)};
    }
    case FieldKind::kFloat64: {
      double v;
      std::memcpy(&v, data.data(), 8);
      std::snprintf(buf, sizeof buf, "%.17g", v);
      return {buf, buf + std::strlen(buf)};
    }
    case FieldKind::kNdarray:
    case FieldKind::kVarArray:
      if (f.name.size() < 3 || f.name.compare(f.name.size() - 3, 3, "npy") != 0) suffix += ".npy";
      return to_npy(f, data);
    case FieldKind::kVideo:
    case FieldKind::kAudio: {
      MediaInfo info;  // the file as it was packed, without its index
      const std::span<const uint8_t> file = parse_media_value(data, info);
      return {file.begin(), file.end()};
    }
    default:
      return {data.begin(), data.end()};
  }
}

// Creates the directories of `rel` (a checked key) under `out`, one level at a time,
// never through a symlink.
void make_key_dirs(const std::string& out, std::string_view rel, std::mutex& mu, std::set<std::string>& made) {
  size_t slash = rel.find('/');
  while (slash != std::string_view::npos) {
    const std::string dir = out + "/" + std::string(rel.substr(0, slash));
    {
      std::lock_guard<std::mutex> lock(mu);
      if (made.insert(dir).second) make_plain_dir(dir);
    }
    slash = rel.find('/', slash + 1);
  }
}

std::string padded_index(uint64_t i, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llu", width, static_cast<unsigned long long>(i));
  return buf;
}

// Record i of `ds`, or kDataLoss naming its `__key__` (read from the unverified
// stored bytes) when its checksum or layout is bad.
Record read_named(const Dataset& ds, const std::string& dataset, uint64_t i) {
  try {
    return ds.read(i);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kDataLoss) throw;
    std::string key;
    try {
      const auto [s, r] = ds.locate(i);
      const auto reader = ds.shard(s);
      const RecordLocation& l = reader->location(r);
      std::vector<uint8_t> stored(l.stored_size);
      if (pread_full(reader->fd(), stored.data(), stored.size(), l.offset, reader->path()) == stored.size())
        key = unverified_key(reader->schema(), l, stored);
    } catch (const Error&) {
      // No key to add: the message stands as it is.
    }
    throw_error(ErrorCode::kDataLoss, dataset + " record " + std::to_string(i) + key_suffix(key) + ": " + e.what());
  }
}

// The output is built in a hidden sibling directory and renamed into place when
// complete, so OUT is either absent (or the empty directory it was) or whole; on
// failure or cancel the sibling is removed. Siblings left by a killed run go first.
class StagedOutput {
 public:
  explicit StagedOutput(const std::string& out) : out_(out) {
    std::string o = out;
    while (o.size() > 1 && o.back() == '/') o.pop_back();
    const fs::path p(o);
    const std::string prefix = "." + p.filename().string() + ".extract" + kPendingMarker;
    const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
    std::error_code ec;
    if (fs::exists(fs::symlink_status(p, ec))) {
      if (!fs::is_directory(fs::symlink_status(p, ec)))
        throw_error(ErrorCode::kInvalidArgument, out + " exists and is not a directory (symlinks are not followed)");
      if (!fs::is_empty(p, ec))
        throw_error(ErrorCode::kInvalidArgument,
                    out + " exists and is not empty: extract writes a whole new directory (remove it, or choose another)");
    }
    fs::create_directories(parent, ec);
    if (ec) throw_error(ErrorCode::kIoError, "create directory " + parent.string() + ": " + ec.message());
    for (const auto& entry : fs::directory_iterator(parent, ec))
      if (entry.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(entry.path(), ec);
    staging_ = (parent / (prefix + std::to_string(::getpid()))).string();
    make_plain_dir(staging_);
  }
  ~StagedOutput() {
    if (committed_) return;
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  const std::string& dir() const noexcept { return staging_; }
  void commit() {
    // rename(2) replaces an empty directory; anything else in OUT was refused above.
    if (::rename(staging_.c_str(), out_.c_str()) != 0) throw errno_error("rename " + staging_ + " to " + out_, errno);
    committed_ = true;
    fsync_parent_dir(out_);
  }

 private:
  std::string out_, staging_;
  bool committed_ = false;
};

}  // namespace

PackSummary extract_dataset(const std::string& dataset, const std::string& final_out, const ExtractOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  check_output_outside(dataset, final_out, "dataset");
  auto ds = Dataset::open(dataset);
  const Schema& schema = ds->schema();
  const Manifest& m = ds->manifest();
  const uint64_t n = ds->record_count();

  StagedOutput staged(final_out);
  const std::string& out = staged.dir();

  int jpeg = -1, label = schema.find("label"), tokens = -1;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    if (schema.fields[i].kind == FieldKind::kJpeg && jpeg < 0) jpeg = static_cast<int>(i);
    if (schema.fields[i].kind == FieldKind::kTokens && tokens < 0) tokens = static_cast<int>(i);
  }
  if (label >= 0 && schema.fields[label].kind != FieldKind::kInt64) label = -1;
  if (label < 0)
    for (size_t i = 0; i < schema.fields.size(); ++i)
      if (schema.fields[i].kind == FieldKind::kInt64) {
        label = static_cast<int>(i);
        break;
      }

  int width = 8;
  for (uint64_t v = n; v >= 100000000ull; v /= 10) ++width;
  const int threads = resolve_threads(options.threads);
  PackSummary summary;
  ProgressReporter progress("extract", n, 0, options.progress);

  // Document boundaries (a second field, doc_starts) are dropped: the stream is
  // rebuilt as a flat file, which has no place for them (--eos finds EOS-ended ones again).
  if (tokens >= 0 && (schema.fields.size() == 1 || (schema.fields.size() == 2 && schema.find("doc_starts") >= 0))) {
    // Flat stream: row 0 whole, then each row without its first token, which must
    // equal the previous row's last token.
    const Field& f = schema.fields[tokens];
    const size_t elem = dtype_size(f.dtype), row = (static_cast<size_t>(f.seq_len) + 1) * elem;
    const std::string path = out + "/tokens.bin";
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) throw errno_error("create " + path, errno);
    std::vector<uint8_t> last(elem);
    bool first = true;
    uint64_t rows_done = 0;
    ordered_parallel_for<Record>(
        n, threads, static_cast<size_t>(threads) * 4, [&](size_t i) { return read_named(*ds, dataset, i); },
        [&](size_t i, Record&& r) {
          std::span<const uint8_t> data = r.fields[tokens];
          if (data.size() % row != 0)
            throw_error(ErrorCode::kDataLoss, dataset + " record " + std::to_string(i) + ": token field of " +
                                                  std::to_string(data.size()) + " bytes is not whole rows");
          for (size_t off = 0; off < data.size(); off += row, ++rows_done) {
            const uint8_t* p = data.data() + off;
            if (first) {
              write_full(fd.get(), p, row, path);
              summary.bytes += row;
              first = false;
            } else {
              if (std::memcmp(p, last.data(), elem) != 0)
                throw_error(ErrorCode::kDataLoss, dataset + " record " + std::to_string(i) + ": row " +
                                                      std::to_string(rows_done) +
                                                      " does not start with the previous row's last token");
              write_full(fd.get(), p + elem, row - elem, path);
              summary.bytes += row - elem;
            }
            std::memcpy(last.data(), p + row - elem, elem);
          }
          summary.raw_bytes += data.size();
          progress.update(i + 1, summary.bytes);
          if (options.cancel && options.cancel->load(std::memory_order_relaxed))
            throw_error(ErrorCode::kCancelled, "extract interrupted after " + std::to_string(i + 1) + " of " +
                                                   std::to_string(n) + " records; nothing was written to " + final_out);
        });
    if (::fsync(fd.get()) != 0) throw errno_error("fsync " + path, errno);
    fd.reset();
    staged.commit();
    summary.records = n;
    summary.shards = ds->shard_count();
    progress.finish();
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return summary;
  }

  const int key = schema.key_field();
  // An ImageFolder pack (key, image, label): out/<key> is the source's own path.
  auto src = m.meta.find("source");
  // A VideoFolder pack (key, video, label) likewise.
  const bool folder = key >= 0 && label >= 0 && schema.fields.size() == 3 && src != m.meta.end() &&
                      ((jpeg >= 0 && src->second == "imagefolder") ||
                       (schema.find("video") >= 0 && src->second == "videofolder"));
  const bool image = key < 0 && jpeg >= 0 && label >= 0;
  std::vector<std::string> class_dirs;
  if (image || folder) {
    for (const std::string& c : m.class_names) {
      if (!plain_name(c))
        throw_error(ErrorCode::kDataLoss, dataset + ": class name '" + c +
                                              "' is not a plain directory name; refusing to extract");
      class_dirs.push_back(out + "/" + c);
    }
    if (image)
      for (const std::string& d : class_dirs) make_plain_dir(d);
  }
  std::mutex mu;
  std::set<int64_t> made;  // label directories made for labels without a class name
  std::set<std::string> made_dirs, keys;

  struct Written {
    uint64_t bytes = 0;
    std::string skipped;  // with skip_bad: why record i was not written
  };
  auto produce = [&](size_t i) -> Written {
    Record r;
    try {
      r = read_named(*ds, dataset, i);
    } catch (const Error& e) {
      if (!options.skip_bad || e.code() != ErrorCode::kDataLoss) throw;
      return Written{0, e.what()};
    }
    const std::string idx = padded_index(i, width);
    uint64_t written = 0;
    if (key >= 0) {
      const std::string k(record_key(schema, r));
      if (!safe_key(k))
        throw_error(ErrorCode::kDataLoss, dataset + " record " + std::to_string(i) + ": key '" + k +
                                              "' is not a relative path of plain names; refusing to extract");
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!keys.insert(k).second)
          throw_error(ErrorCode::kDataLoss, dataset + " record " + std::to_string(i) + ": key '" + k +
                                                "' is used by an earlier record; refusing to overwrite its files");
      }
      make_key_dirs(out, k, mu, made_dirs);
      for (size_t f = 0; f < schema.fields.size(); ++f) {
        if (static_cast<int>(f) == key || (folder && static_cast<int>(f) == label)) continue;
        std::string suffix;
        std::vector<uint8_t> bytes = field_file(schema.fields[f], r.fields[f], suffix);
        write_whole_file(out + "/" + k + (folder ? "" : suffix), bytes);
        written += bytes.size();
      }
    } else if (image) {
      const int64_t lab = r.int64_field(static_cast<size_t>(label));
      std::string dir;
      if (lab >= 0 && static_cast<uint64_t>(lab) < class_dirs.size()) {
        dir = class_dirs[static_cast<size_t>(lab)];
      } else {
        dir = out + "/" + std::to_string(lab);
        std::lock_guard<std::mutex> lock(mu);
        if (made.insert(lab).second) make_plain_dir(dir);
      }
      write_whole_file(dir + "/" + idx + ".jpg", r.fields[jpeg]);
      written += r.fields[jpeg].size();
    } else {
      for (size_t f = 0; f < schema.fields.size(); ++f) {
        const std::string ext = schema.fields[f].kind == FieldKind::kJpeg ? ".jpg" : "";
        write_whole_file(out + "/" + idx + "." + schema.fields[f].name + ext, r.fields[f]);
        written += r.fields[f].size();
      }
    }
    return Written{written, {}};
  };
  uint64_t done = 0;
  ordered_parallel_for<Written>(n, threads, static_cast<size_t>(threads) * 8, produce, [&](size_t, Written&& w) {
    if (options.cancel && options.cancel->load(std::memory_order_relaxed))
      throw_error(ErrorCode::kCancelled, "extract interrupted after " + std::to_string(done) + " of " +
                                             std::to_string(n) + " records; nothing was written to " + final_out);
    if (!w.skipped.empty()) summary.skipped.push_back(std::move(w.skipped));
    summary.bytes += w.bytes;
    progress.update(++done, summary.bytes);
  });
  progress.finish();
  staged.commit();
  summary.records = n - summary.skipped.size();
  summary.shards = ds->shard_count();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
