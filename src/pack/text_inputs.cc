#include "pack/text_inputs.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "pack/tar_reader.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/shard.h"
#include "util/bytes.h"
#include "util/unique_fd.h"

namespace stoker::internal {

namespace {

namespace fs = std::filesystem;

std::optional<TextInputKind> kind_of(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".txt") return TextInputKind::kPlainText;
  if (ext == ".jsonl" || ext == ".ndjson") return TextInputKind::kJsonLines;
  const std::string name = fs::path(path).filename().string();
  for (const char* t : {".tar", ".tgz", ".tar.gz", ".tar.zst", ".tar.xz", ".tar.bz2"})
    if (name.size() > std::strlen(t) && name.ends_with(t)) return TextInputKind::kTar;
  return std::nullopt;
}

bool is_dataset_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(path) / "MANIFEST", ec);
}

// A dataset's records in pieces of about `piece_bytes` of stored records.
void cut_records(const std::string& dir, uint64_t piece_bytes, std::vector<TextPiece>& out) {
  const auto ds = Dataset::open(dir);
  TextPiece p{dir, TextInputKind::kDataset, 0, 0, 0, 0};
  uint64_t global = 0;
  for (size_t s = 0; s < ds->shard_count(); ++s) {
    const auto reader = ds->shard(s);
    for (uint64_t r = 0; r < reader->record_count(); ++r, ++global) {
      p.size += reader->location(r).stored_size;
      p.records++;
      if (p.size >= piece_bytes) {
        out.push_back(p);
        p = TextPiece{dir, TextInputKind::kDataset, 0, 0, global + 1, 0};
      }
    }
  }
  if (p.records > 0) out.push_back(p);
}

uint64_t file_size_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw errno_error("stat " + path, errno);
  return static_cast<uint64_t>(st.st_size);
}

// Cuts a JSON Lines file after the first '\n' at or past each multiple of piece_bytes.
void cut_lines(const std::string& path, uint64_t size, uint64_t piece_bytes, std::vector<TextPiece>& out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + path, errno);
  uint64_t start = 0;
  char buf[64 * 1024];
  while (start < size) {
    uint64_t end = std::min(size, start + piece_bytes);
    while (end < size) {  // find the line's end
      const size_t n = pread_full(fd.get(), buf, sizeof buf, end, path);
      const void* nl = n ? std::memchr(buf, '\n', n) : nullptr;
      if (nl) {
        end += static_cast<uint64_t>(static_cast<const char*>(nl) - buf) + 1;
        break;
      }
      if (n == 0) {
        end = size;
        break;
      }
      end += n;
    }
    end = std::min(end, size);
    out.push_back({path, TextInputKind::kJsonLines, start, end - start});
    start = end;
  }
}

}  // namespace

std::vector<TextPiece> plan_text_pieces(const std::vector<std::string>& inputs, uint64_t piece_bytes) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (is_dataset_dir(in)) {
      files.push_back(in);
    } else if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file() && kind_of(e.path().string())) found.push_back(e.path().string());
      if (found.empty())
        throw_error(ErrorCode::kInvalidArgument, in + ": no .txt, .jsonl or tar files (nor a MANIFEST) in the directory");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      if (!fs::exists(in, ec)) throw_error(ErrorCode::kNotFound, in + ": no such file");
      if (!kind_of(in))
        throw_error(ErrorCode::kInvalidArgument, in + ": not a text input (.txt: one document per file; .jsonl or "
                                                      ".ndjson: one JSON object per line; a tar of .txt members; a "
                                                      "dataset directory)");
      files.push_back(in);
    }
  }
  std::vector<TextPiece> pieces;
  for (const std::string& f : files) {
    if (is_dataset_dir(f)) {
      cut_records(f, std::max<uint64_t>(piece_bytes, 1), pieces);
      continue;
    }
    const uint64_t size = file_size_of(f);
    const TextInputKind kind = *kind_of(f);
    if (kind == TextInputKind::kPlainText || kind == TextInputKind::kTar)
      pieces.push_back({f, kind, 0, size});
    else
      cut_lines(f, size, std::max<uint64_t>(piece_bytes, 1), pieces);
  }
  return pieces;
}

std::string read_text_piece(const TextPiece& piece) {
  UniqueFd fd(::open(piece.file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + piece.file, errno);
  std::string s(static_cast<size_t>(piece.size), '\0');
  if (pread_full(fd.get(), s.data(), s.size(), piece.offset, piece.file) != s.size())
    throw_error(ErrorCode::kDataLoss, piece.file + ": file shrank while being read");
  return s;
}

void read_document_piece(const TextPiece& piece, const std::string& text_field,
                         const std::function<void(std::string_view)>& document) {
  if (piece.kind == TextInputKind::kTar) {
    TarReader tar(piece.file, piece.file);
    TarMember m;
    while (tar.next_header(m)) {
      if (!m.name.ends_with(".txt")) continue;
      tar.read_data(m);
      document(std::string_view(reinterpret_cast<const char*>(m.data.data()), m.data.size()));
    }
    return;
  }
  const auto ds = Dataset::open(piece.file);
  const Schema& schema = ds->schema();
  int field = -1;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& f = schema.fields[i];
    if (f.kind != FieldKind::kText || f.name == kKeyField) continue;
    if (text_field.empty() ? field >= 0 : f.name != text_field) {
      if (text_field.empty())
        throw_error(ErrorCode::kInvalidArgument, piece.file + ": several text fields (schema " + schema.to_string() +
                                                     "); name one with --text-field");
      continue;
    }
    field = static_cast<int>(i);
  }
  if (field < 0)
    throw_error(ErrorCode::kInvalidArgument, piece.file + ": no text field" +
                                                 (text_field.empty() ? std::string() : " '" + text_field + "'") +
                                                 " to tokenise (schema " + schema.to_string() + ")");
  for (uint64_t r = piece.first_record; r < piece.first_record + piece.records; ++r) {
    const Record rec = ds->read(r);
    document(rec.text_field(static_cast<size_t>(field)));
  }
}

uint64_t lines_before(const TextPiece& piece) {
  if (piece.offset == 0) return 0;
  UniqueFd fd(::open(piece.file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open " + piece.file, errno);
  std::vector<char> buf(1 << 20);
  uint64_t lines = 0;
  for (uint64_t at = 0; at < piece.offset;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), piece.offset - at));
    if (pread_full(fd.get(), buf.data(), want, at, piece.file) != want)
      throw_error(ErrorCode::kDataLoss, piece.file + ": file shrank while being read");
    lines += static_cast<uint64_t>(std::count(buf.begin(), buf.begin() + static_cast<long>(want), '\n'));
    at += want;
  }
  return lines;
}

std::optional<JsonLinesProblem> read_json_objects(std::string_view lines,
                                                  const std::function<std::string(const nlohmann::json&)>& object,
                                                  uint64_t& line_count) {
  line_count = 0;
  size_t pos = 0;
  while (pos < lines.size()) {
    size_t end = lines.find('\n', pos);
    if (end == std::string_view::npos) end = lines.size();
    const std::string_view line = lines.substr(pos, end - pos);
    pos = end + 1;
    ++line_count;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double
      return JsonLinesProblem{line_count, std::string("not JSON: ") + e.what()};
    }
    if (!j.is_object()) return JsonLinesProblem{line_count, "not a JSON object"};
    std::string why = object(j);
    if (!why.empty()) return JsonLinesProblem{line_count, std::move(why)};
  }
  return std::nullopt;
}

std::optional<JsonLinesProblem> read_json_lines(std::string_view lines, const std::string& key,
                                                const std::function<void(std::string_view)>& document,
                                                uint64_t& line_count) {
  return read_json_objects(
      lines,
      [&](const nlohmann::json& j) -> std::string {
        auto it = j.find(key);
        if (it == j.end()) return "no \"" + key + "\" key";
        if (!it->is_string()) return "\"" + key + "\" is not a string";
        document(it->get_ref<const std::string&>());
        return {};
      },
      line_count);
}

std::string json_integers(const nlohmann::json& j, const std::string& key, DType dtype, std::vector<uint8_t>& out,
                        size_t* count) {
  auto it = j.find(key);
  if (it == j.end()) return "no \"" + key + "\" key";
  if (!it->is_array()) return "\"" + key + "\" is not a list of integers";
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
  switch (dtype) {
    case DType::kUint16: hi = 65535; break;
    case DType::kUint32: hi = 4294967295ll; break;
    case DType::kInt32: lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max(); break;
    default: lo = std::numeric_limits<int64_t>::min(); break;
  }
  const size_t size = dtype_size(dtype);
  out.resize(it->size() * size);
  size_t i = 0;
  for (const auto& v : *it) {
    if (!v.is_number_integer()) return "\"" + key + "\"[" + std::to_string(i) + "] is not an integer";
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi) ? hi + 1 : v.get<int64_t>();
    if (x < lo || x > hi)
      return "\"" + key + "\"[" + std::to_string(i) + "] = " + v.dump() + " does not fit " + dtype_name(dtype);
    const uint64_t u = static_cast<uint64_t>(x);
    for (size_t b = 0; b < size; ++b) out[i * size + b] = static_cast<uint8_t>(u >> (8 * b));
    ++i;
  }
  *count = i;
  return {};
}


}  // namespace stoker::internal
