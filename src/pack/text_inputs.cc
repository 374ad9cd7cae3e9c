#include "pack/text_inputs.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

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
  return std::nullopt;
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
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file() && kind_of(e.path().string())) found.push_back(e.path().string());
      if (found.empty()) throw_error(ErrorCode::kInvalidArgument, in + ": no .txt or .jsonl files in the directory");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      if (!fs::exists(in, ec)) throw_error(ErrorCode::kNotFound, in + ": no such file");
      if (!kind_of(in))
        throw_error(ErrorCode::kInvalidArgument, in + ": not a text input (.txt: one document per file; .jsonl or "
                                                      ".ndjson: one JSON object per line)");
      files.push_back(in);
    }
  }
  std::vector<TextPiece> pieces;
  for (const std::string& f : files) {
    const uint64_t size = file_size_of(f);
    if (*kind_of(f) == TextInputKind::kPlainText)
      pieces.push_back({f, TextInputKind::kPlainText, 0, size});
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
