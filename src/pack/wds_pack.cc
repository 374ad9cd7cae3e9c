// pack_wds: WebDataset tars -> one field per member extension, plus `__key__`.
//
// Pass 1 (discover) streams every tar reading only member names and .npy headers: it
// fixes the schema (which extensions, which npy dtype and shape rule) and finds
// incomplete samples before anything is written. Pass 2 streams the tars again,
// groups consecutive members by key into samples and collects them into batches of
// bounded size; worker threads check each member against its field's kind and prepare
// the record; the main thread appends the records in tar order. A bad sample is
// reported (or skipped) when its turn comes, so the output does not depend on the
// thread count.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "decode/exif_orientation.h"
#include "decode/formats.h"
#include "decode/image_check.h"
#include "decode/restart_index.h"
#include "format/npy.h"
#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "pack/tar_reader.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/image.h"
#include "util/parse.h"
#include "stoker/pack.h"
#include "util/utf8.h"

namespace stoker {

using namespace internal;

namespace {

constexpr size_t kBatchSamples = 512;
constexpr uint64_t kBatchBytes = 64ull << 20;
// Enough of a .npy member for its header (NumPy pads headers to 64 bytes; v1 headers
// are at most 64 KiB).
constexpr uint64_t kNpyPrefix = 65536 + 16;

// WebDataset's split: key = path up to the first '.' of the file-name part.
void split_key(const std::string& name, std::string& key, std::string& ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base || dot + 1 == name.size()) {
    key.clear();
    ext.clear();
    return;
  }
  key = name.substr(0, dot);
  ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // Spellings of one format are one field: a sample's "x.jpeg" fills the same field
  // as another's "y.jpg" (else the schema would hold both and every sample lack one).
  // A decoded format's canonical spelling is its row's first extension.
  static const std::pair<const char*, const char*> kSpellings[] = {{"tiff", "tif"}};
  const size_t last = ext.rfind('.') == std::string::npos ? 0 : ext.rfind('.') + 1;
  for (const auto& [spelling, canonical] : kSpellings)
    if (ext.compare(last, std::string::npos, spelling) == 0) ext = ext.substr(0, last) + canonical;
  if (const ImageFormatRow* row = image_format_by_extension(ext.substr(last)))
    ext = ext.substr(0, last) + row->extensions.front();
}

// The last dot-separated part decides the kind ("seg.png" is an image).
FieldKind kind_of(const std::string& ext, bool& npy) {
  const size_t dot = ext.rfind('.');
  const std::string last = dot == std::string::npos ? ext : ext.substr(dot + 1);
  npy = last == "npy";
  if (image_format_by_extension(last) != nullptr) return FieldKind::kImage;
  if (last == "cls") return FieldKind::kInt64;
  if (last == "txt" || last == "json") return FieldKind::kText;
  if (npy) return FieldKind::kNdarray;  // or kVarArray, once every shape is known
  if (const auto media = media_kind_by_extension(last)) return *media;
  return FieldKind::kBytes;
}

std::string sanitize(const std::string& ext) {
  std::string out = ext;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) c = '_';
  }
  return out;
}

// Decimal label text ("7", " 7\n"): returns false on anything else.
bool parse_label(const std::string& text, int64_t& out) {
  size_t i = 0, n = text.size();
  while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  while (n > i && std::isspace(static_cast<unsigned char>(text[n - 1]))) --n;
  std::string_view v(text.data() + i, n - i);
  if (!v.empty() && v[0] == '+') {  // from_chars takes '-' only
    v.remove_prefix(1);
    if (!v.empty() && v[0] == '-') return false;
  }
  const auto label = internal::parse_decimal<int64_t>(v);
  if (!label) return false;
  out = *label;
  return true;
}

DType dtype_of(NpyDtype d) {
  switch (d) {
    case NpyDtype::kBool: return DType::kBool;
    case NpyDtype::kI8: return DType::kInt8;
    case NpyDtype::kU8: return DType::kUint8;
    case NpyDtype::kI16: return DType::kInt16;
    case NpyDtype::kU16: return DType::kUint16;
    case NpyDtype::kI32: return DType::kInt32;
    case NpyDtype::kU32: return DType::kUint32;
    case NpyDtype::kI64: return DType::kInt64;
    case NpyDtype::kF16: return DType::kFloat16;
    case NpyDtype::kF32: return DType::kFloat32;
    case NpyDtype::kF64: return DType::kFloat64;
    case NpyDtype::kU64: break;
  }
  return DType::kNone;
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// What pass 1 learns about one extension.
struct Member {
  std::string ext;
  FieldKind kind = FieldKind::kBytes;
  bool npy = false;
  uint64_t samples = 0;   // samples that have it
  std::string first_key;  // first sample that has it (tar: key)
  // .npy only: the first header seen, and whether later first dimensions differed.
  bool have_npy = false;
  NpyDtype dtype = NpyDtype::kU8;
  std::vector<uint64_t> shape;
  bool first_dim_varies = false;
};

struct Discovery {
  std::map<std::string, Member> members;  // by extension
  uint64_t samples = 0;
  std::string missing;  // the first "tar: sample 'k' has no 'ext' member" found, if any
};

Discovery discover(const std::vector<std::string>& tars, const WdsPackOptions& options) {
  Discovery d;
  std::set<std::string> first_exts;  // extensions of the very first sample
  std::string first_where;
  for (const std::string& tar : tars) {
    TarReaderOptions topts;
    topts.max_member_size = options.max_member_bytes;
    TarReader reader(tar, tar, topts);
    TarMember m;
    std::string cur_key;
    std::set<std::string> cur_exts;
    auto close = [&] {
      if (cur_key.empty()) return;
      const std::string where = tar + ": sample '" + cur_key + "'";
      if (d.samples == 0) {
        first_exts = cur_exts;
        first_where = where;
      } else if (d.missing.empty()) {
        for (const std::string& e : first_exts)
          if (!cur_exts.count(e)) {
            d.missing = where + " has no '" + e + "' member";
            break;
          }
        for (const std::string& e : cur_exts)
          if (d.missing.empty() && !first_exts.count(e)) d.missing = first_where + " has no '" + e + "' member";
      }
      ++d.samples;
      cur_key.clear();
      cur_exts.clear();
    };
    for (;;) {
      try {
        if (!reader.next_header(m)) break;
      } catch (const Error& e) {
        // A truncated or damaged tar: with skip_bad, pass 2 keeps the samples before
        // the damage and reports the rest; the sample cut by it is not counted.
        if (!options.skip_bad || e.code() != ErrorCode::kDataLoss) throw;
        cur_key.clear();
        cur_exts.clear();
        break;
      }
      if (options.cancel && options.cancel->load(std::memory_order_relaxed)) return d;
      std::string key, ext;
      split_key(m.name, key, ext);
      if (key.empty()) continue;  // no extension: not part of any sample
      if (key != cur_key) close();
      cur_key = key;
      cur_exts.insert(ext);
      Member& mem = d.members[ext];
      if (mem.samples++ == 0) {
        mem.ext = ext;
        mem.kind = kind_of(ext, mem.npy);
        mem.first_key = tar + ": sample '" + key + "'";
      }
      if (!mem.npy) continue;
      try {
        reader.read_data(m, kNpyPrefix);
      } catch (const Error& e) {
        if (!options.skip_bad || e.code() != ErrorCode::kDataLoss) throw;
        cur_key.clear();
        cur_exts.clear();
        break;
      }
      const std::string where = tar + ": sample '" + key + "': member '" + m.name + "'";
      NpyHeader h;
      try {
        h = parse_npy_header(m.data, where);
      } catch (const Error&) {
        if (options.skip_bad) continue;  // pass 2 reports it with the other bad samples
        throw;
      }
      if (!mem.have_npy) {
        mem.have_npy = true;
        mem.dtype = h.dtype;
        mem.shape = h.shape;
        mem.first_key = tar + ": sample '" + key + "'";
        continue;
      }
      if (h.dtype != mem.dtype)
        throw_error(ErrorCode::kInvalidArgument,
                    "'" + ext + "' members differ in dtype: " + mem.first_key + " has " + npy_dtype_name(mem.dtype) +
                        ", " + tar + ": sample '" + key + "' has " + npy_dtype_name(h.dtype) +
                        "; a field holds one dtype");
      if (h.shape == mem.shape) continue;
      const bool inner_equal = h.shape.size() == mem.shape.size() && !h.shape.empty() &&
                               std::equal(h.shape.begin() + 1, h.shape.end(), mem.shape.begin() + 1);
      if (!inner_equal)
        throw_error(ErrorCode::kInvalidArgument,
                    "'" + ext + "' members differ in shape: " + mem.first_key + " has " + shape_text(mem.shape) + ", " +
                        tar + ": sample '" + key + "' has " + shape_text(h.shape) +
                        "; .npy members must share one shape (an ndarray field) or differ only in their first "
                        "dimension (a variable-length field)");
      mem.first_dim_varies = true;
    }
    close();
  }
  return d;
}

Schema schema_from(const Discovery& d) {
  Schema s;
  add_key_field(s);
  std::map<std::string, std::string> names;  // field name -> extension
  for (const auto& [ext, m] : d.members) {
    Field f;
    f.name = sanitize(ext);
    f.kind = m.kind;
    if (f.name.size() > kMaxFieldName)
      throw_error(ErrorCode::kInvalidArgument, "member extension '" + ext + "' is longer than " +
                                                   std::to_string(kMaxFieldName) + " bytes, too long for a field name");
    if (f.name == kKeyField)
      throw_error(ErrorCode::kInvalidArgument, "member extension '" + ext + "' collides with the key field " + kKeyField);
    if (auto [it, fresh] = names.emplace(f.name, ext); !fresh)
      throw_error(ErrorCode::kInvalidArgument, "member extensions '" + it->second + "' and '" + ext +
                                                   "' both become field '" + f.name + "'");
    if (m.npy) {
      if (!m.have_npy)
        throw_error(ErrorCode::kDataLoss, m.first_key + ": no readable '" + ext + "' member to take the field's dtype from");
      f.dtype = dtype_of(m.dtype);
      if (f.dtype == DType::kNone)
        throw_error(ErrorCode::kInvalidArgument, m.first_key + ": '" + ext + "' has dtype " + npy_dtype_name(m.dtype) +
                                                     ", which stoker does not store (convert it to int64 or float64)");
      const bool zero_first = !m.shape.empty() && m.shape[0] == 0;
      const bool var = m.first_dim_varies || zero_first;
      f.kind = var ? FieldKind::kVarArray : FieldKind::kNdarray;
      for (size_t i = var ? 1 : 0; i < m.shape.size(); ++i) {
        if (m.shape[i] == 0 || m.shape[i] > 0xFFFFFFFFu)
          throw_error(ErrorCode::kInvalidArgument, m.first_key + ": '" + ext + "' has shape " + shape_text(m.shape) +
                                                       ", which a field cannot hold (dimension 0 or >= 2^32)");
        f.shape.push_back(static_cast<uint32_t>(m.shape[i]));
      }
    }
    s.fields.push_back(std::move(f));
  }
  std::sort(s.fields.begin() + 1, s.fields.end(), [](const Field& a, const Field& b) { return a.name < b.name; });
  s.validate();
  return s;
}

struct Sample {
  std::string tar;
  std::string key;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> members;  // (ext, bytes), tar order
  std::string problem;  // set while grouping (e.g. a duplicate member)
};

struct Prepared {
  std::string bad;  // reason, empty when good
  bool incomplete = false;
  bool rewritten = false;
  uint64_t fast_crop_before = 0, fast_crop_after = 0;  // JPEGs rewritten for fast crop
  uint64_t fast_crop_jpegs = 0;
  uint64_t exif_turned = 0, exif_trimmed = 0;  // JPEGs exif_transpose turned (and trimmed)
  ReencodeTally reencoded;
  PreparedRecord record;
};

}  // namespace

PackSummary pack_wds(const std::vector<std::string>& all_tars, const std::string& out, const WdsPackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (all_tars.empty()) throw_error(ErrorCode::kInvalidArgument, "pack wds: no tar files given");
  if (options.video_reencode.enabled()) options.video_reencode.check();
  // A part discovers its schema from its own tars; commit_parts checks that they agree.
  const std::vector<std::string> tars = part_slice(all_tars, options.part, "tars");
  uint64_t total_bytes = 0;
  for (const std::string& t : tars) {
    check_output_outside(t, out, "input");
    std::error_code ec;
    const auto size = std::filesystem::file_size(t, ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) throw_error(ErrorCode::kNotFound, "open " + t + ": " + ec.message());
      throw_error(ErrorCode::kIoError, "open " + t + ": " + ec.message());
    }
    total_bytes += size;
  }

  // Pass 1: the schema, and incomplete samples, before anything is written.
  const Discovery d = discover(tars, options);
  if (options.cancel && options.cancel->load()) throw_error(ErrorCode::kCancelled, "pack wds interrupted; nothing was written");
  if (d.samples == 0)
    throw_error(ErrorCode::kInvalidArgument, "pack wds: the tars hold no samples (members named KEY.EXTENSION)");
  if (!d.missing.empty() && !options.skip_incomplete) {
    std::string counts;
    for (const auto& [ext, m] : d.members)
      if (m.samples < d.samples)
        counts += (counts.empty() ? "" : ", ") + std::string("'") + ext + "' in " + std::to_string(m.samples) + " of " +
                  std::to_string(d.samples);
    throw_error(ErrorCode::kInvalidArgument, d.missing + " (samples have " + counts +
                                                 "); every sample needs every member, or pass --skip-incomplete to skip "
                                                 "the samples that lack one");
  }
  const Schema schema = schema_from(d);
  const int cls_field = [&] {
    for (size_t i = 0; i < schema.fields.size(); ++i)
      if (schema.fields[i].name == "cls") return static_cast<int>(i);
    return -1;
  }();
  // Each field's extension (the field name may have been sanitised).
  std::vector<std::string> field_ext(schema.fields.size());
  for (const auto& [ext, m] : d.members) field_ext[static_cast<size_t>(schema.find(sanitize(ext)))] = ext;

  DatasetWriter writer(out, schema, writer_options(options, out), options.overwrite);
  writer.manifest().class_names = options.class_names;
  writer.manifest().meta["source"] = "wds";
  if (options.fast_crop) {
    writer.manifest().meta["baseline"] = "1";
    writer.manifest().meta["fast_crop"] = "1";
  }
  note_video_reencode(options, writer.manifest());
  const ShardWriterOptions shard_opts = writer.options().shard;
  const int threads = resolve_threads(options.threads);

  PackSummary summary;
  ProgressReporter progress("pack wds", d.samples, total_bytes, options.progress);
  uint64_t consumed_before = 0;  // bytes of finished tars
  uint64_t samples_seen = 0, incomplete = 0;
  uint64_t fast_crop_jpegs = 0, fast_crop_before = 0, fast_crop_after = 0;
  uint64_t exif_turned = 0, exif_trimmed = 0;
  ReencodeTally reencoded;

  auto produce = [&](const Sample& s) {
    Prepared p;
    const std::string where = s.tar + ": sample '" + s.key + "'";
    if (!s.problem.empty()) {
      p.bad = where + ": " + s.problem;
      return p;
    }
    if (utf8_error_offset(as_bytes(s.key)) != s.key.size()) {
      p.bad = where + ": the key is not valid UTF-8";
      return p;
    }
    std::vector<std::span<const uint8_t>> fields(schema.fields.size());
    std::vector<std::array<uint8_t, 8>> scalars(schema.fields.size());
    std::vector<std::vector<uint8_t>> rewritten(schema.fields.size());  // JPEGs turned upright or rewritten for fast crop
    fields[0] = as_bytes(s.key);
    for (size_t f = 1; f < schema.fields.size(); ++f) {
      const Field& field = schema.fields[f];
      const std::string& ext = field_ext[f];
      auto it = std::find_if(s.members.begin(), s.members.end(), [&](const auto& m) { return m.first == ext; });
      if (it == s.members.end()) {
        p.bad = where + ": no '" + ext + "' member";
        p.incomplete = true;
        return p;
      }
      const std::vector<uint8_t>& data = it->second;
      const std::string mwhere = where + ": member '" + s.key + "." + ext + "'";
      switch (field.kind) {
        case FieldKind::kImage: {
          if (std::string why = check_image_header(data, nullptr, nullptr); !why.empty()) {
            p.bad = mwhere + ": " + why;
            return p;
          }
          const bool transcoded = options.fast_crop && image_format_of(data) == ImageFormat::kJpeg;
          if (options.check_decode && !transcoded) {
            if (std::string why = check_image_decodes(data); !why.empty()) {
              p.bad = mwhere + ": " + why;
              return p;
            }
          }
          fields[f] = data;
          if (options.exif_transpose && image_format_of(data) == ImageFormat::kJpeg) {
            try {
              ExifTranspose upright = jpeg_exif_transpose(data);
              if (!upright.jpeg.empty()) {
                rewritten[f] = std::move(upright.jpeg);
                fields[f] = rewritten[f];
                ++p.exif_turned;
                p.exif_trimmed += upright.trimmed;
              }
            } catch (const Error& e) {
              p.bad = mwhere + ": " + e.what();
              return p;
            }
          }
          if (options.fast_crop && image_format_of(data) == ImageFormat::kJpeg) {
            try {
              const std::span<const uint8_t> source = fields[f];
              std::vector<uint8_t> fast = internal::fast_crop_within_budget(source, {}, kFastCropMaxGrowth);
              p.fast_crop_before += source.size();
              p.fast_crop_after += fast.size();
              rewritten[f] = std::move(fast);
              ++p.fast_crop_jpegs;
            } catch (const Error& e) {
              p.bad = mwhere + ": " + e.what();
              return p;
            }
            fields[f] = rewritten[f];
            p.rewritten = true;
          }
          break;
        }
        case FieldKind::kVideo:
        case FieldKind::kAudio: {
          try {
            rewritten[f] = media_field_value(data, field.kind, options, p.reencoded);
          } catch (const Error& e) {
            p.bad = mwhere + ": " + e.what();
            return p;
          }
          fields[f] = rewritten[f];
          break;
        }
        case FieldKind::kInt64: {
          int64_t label = 0;
          if (!parse_label(std::string(data.begin(), data.end()), label)) {
            p.bad = mwhere + ": not a decimal integer";
            return p;
          }
          if (static_cast<int>(f) == cls_field && !options.class_names.empty() &&
              (label < 0 || static_cast<uint64_t>(label) >= options.class_names.size())) {
            p.bad = mwhere + ": label " + std::to_string(label) + " is not below the class count " +
                    std::to_string(options.class_names.size());
            return p;
          }
          scalars[f] = le64(label);
          fields[f] = scalars[f];
          break;
        }
        case FieldKind::kText: {
          if (size_t bad = utf8_error_offset(data); bad != data.size()) {
            p.bad = mwhere + ": not valid UTF-8 (byte " + std::to_string(bad) + ")";
            return p;
          }
          fields[f] = data;
          break;
        }
        case FieldKind::kNdarray:
        case FieldKind::kVarArray: {
          try {
            NpyHeader h = parse_npy_header(data, mwhere);
            const bool var = field.kind == FieldKind::kVarArray;
            bool fits = dtype_of(h.dtype) == field.dtype && h.shape.size() == field.shape.size() + (var ? 1 : 0);
            for (size_t i = 0; fits && i < field.shape.size(); ++i) fits = h.shape[i + (var ? 1 : 0)] == field.shape[i];
            if (!fits) {
              p.bad = mwhere + ": array " + npy_dtype_name(h.dtype) + " " + shape_text(h.shape) + " does not fit field " +
                      schema.fields[f].name + " (" + dtype_name(field.dtype) + ")";
              return p;
            }
            if (data.size() - h.data_offset != h.data_bytes) {
              p.bad = mwhere + ": holds " + std::to_string(data.size() - h.data_offset) + " bytes of data, its header says " +
                      std::to_string(h.data_bytes);
              return p;
            }
            fields[f] = std::span<const uint8_t>(data).subspan(h.data_offset);
          } catch (const Error& e) {
            p.bad = e.what();
            return p;
          }
          break;
        }
        default:
          fields[f] = data;
      }
    }
    try {
      p.record = prepare_record(schema, fields, shard_opts);
    } catch (const Error& e) {
      p.bad = where + ": " + e.what();
    }
    return p;
  };

  std::vector<Sample> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&](uint64_t tar_offset) {
    ordered_parallel_for<Prepared>(
        batch.size(), threads, static_cast<size_t>(threads) * 8, [&](size_t i) { return produce(batch[i]); },
        [&](size_t, Prepared&& p) {
          check_cancel(options.cancel, writer, "pack wds", out);
          if (p.incomplete && options.skip_incomplete) {
            ++incomplete;
            summary.skipped.push_back(p.bad + " (incomplete sample skipped)");
          } else if (!p.bad.empty()) {
            if (!options.skip_bad) throw_error(ErrorCode::kDataLoss, p.bad);
            summary.skipped.push_back(p.bad);
          } else {
            writer.add_prepared(p.record);
            summary.rewritten += p.rewritten;
            fast_crop_jpegs += p.fast_crop_jpegs;
            fast_crop_before += p.fast_crop_before;
            fast_crop_after += p.fast_crop_after;
            exif_turned += p.exif_turned;
            exif_trimmed += p.exif_trimmed;
            reencoded.add(p.reencoded);
          }
        });
    samples_seen += batch.size();
    batch.clear();
    batch_bytes = 0;
    progress.update(samples_seen, consumed_before + tar_offset);
  };

  for (size_t t = 0; t < tars.size(); ++t) {
    TarReaderOptions topts;
    topts.max_member_size = options.max_member_bytes;
    TarReader reader(tars[t], tars[t], topts);
    TarMember m;
    std::optional<Sample> cur;
    auto close_sample = [&] {
      if (!cur) return;
      batch.push_back(std::move(*cur));
      cur.reset();
      if (batch.size() >= kBatchSamples || batch_bytes >= kBatchBytes) flush(reader.offset());
    };
    // With skip_bad, a truncated or damaged tar gives the samples before the damage;
    // the one it cuts, and the rest of the tar, are reported as skipped.
    auto damaged = [&](const Error& e) {
      if (!options.skip_bad || e.code() != ErrorCode::kDataLoss) return false;
      std::string what = e.what();
      if (cur) what += " (sample '" + cur->key + "' and the rest of the tar skipped)";
      else what += " (the rest of the tar skipped)";
      cur.reset();
      summary.skipped.push_back(what);
      return true;
    };
    for (;;) {
      try {
        if (!reader.next_header(m)) break;
      } catch (const Error& e) {
        if (damaged(e)) break;
        throw;
      }
      check_cancel(options.cancel, writer, "pack wds", out);
      std::string key, ext;
      split_key(m.name, key, ext);
      if (key.empty()) continue;  // no extension: not part of any sample
      if (cur && cur->key != key) close_sample();
      if (!cur) {
        cur.emplace();
        cur->tar = tars[t];
        cur->key = key;
      }
      try {
        reader.read_data(m);
      } catch (const Error& e) {
        if (damaged(e)) break;
        throw;
      }
      summary.input_bytes += m.data.size();
      batch_bytes += m.data.size();
      for (const auto& [e, _] : cur->members)
        if (e == ext && cur->problem.empty()) cur->problem = "more than one '" + ext + "' member";
      if (schema.find(sanitize(ext)) < 0 && cur->problem.empty())
        cur->problem = "member '" + m.name + "' appeared since the schema was discovered (the tar changed?)";
      cur->members.emplace_back(ext, std::move(m.data));
      m.data = {};
    }
    close_sample();
    flush(reader.offset());
    consumed_before += reader.offset();
  }
  progress.finish();
  if (incomplete) writer.manifest().meta["skipped_incomplete"] = std::to_string(incomplete);
  Manifest done = finish_nonempty(writer, "pack wds", summary);
  fill_summary(summary, done, writer);
  if (std::string note = exif_transpose_note(exif_turned, exif_trimmed); !note.empty()) summary.notes.push_back(note);
  if (std::string note = fast_crop_size_note(fast_crop_jpegs, fast_crop_before, fast_crop_after); !note.empty())
    summary.notes.push_back(note);
  if (std::string note = reencode_note(options, reencoded); !note.empty()) summary.notes.push_back(note);
  if (incomplete) summary.notes.push_back("skipped " + std::to_string(incomplete) + " incomplete samples");
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
