// open_tokenizer: the formats table. A format is one row: how its files are named, how
// its first bytes look, and its reader.
#include "stoker/tokenizer.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <fstream>

#include "stoker/error.h"
#include "text/hf_tokenizer_json.h"
#include "text/sentencepiece_tokenizer.h"
#include "text/tiktoken_file.h"

namespace stoker {

namespace {

struct TokenizerFormat {
  const char* name;
  const char* extension;                // the file name's ending that claims it
  bool (*looks_like)(std::string_view head);  // the first bytes, for other names
  std::unique_ptr<Tokenizer> (*open)(const std::string& path, const TokenizerOptions& options);
};

bool json_head(std::string_view head) {
  const size_t i = head.find_first_not_of(" \t\r\n");
  return i != std::string_view::npos && head[i] == '{';
}

// "<base64> <digits>\n" as the first line.
bool ranks_head(std::string_view head) {
  const size_t nl = head.find('\n');
  const std::string_view line = head.substr(0, nl);
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size()) return false;
  for (char c : line.substr(0, sp))
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && c != '=') return false;
  for (char c : line.substr(sp + 1))
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '\r') return false;
  return true;
}

// A serialized protobuf ModelProto starts with field 1 (pieces), length-delimited.
bool sentencepiece_head(std::string_view head) { return !head.empty() && head[0] == 0x0A; }

const TokenizerFormat kFormats[] = {
    {"tiktoken", ".tiktoken", ranks_head, internal::open_tiktoken},
    {"tokenizer.json", ".json", json_head, internal::open_hf_tokenizer_json},
    {"sentencepiece", ".model", sentencepiece_head, internal::open_sentencepiece},
};

bool ends_with(const std::string& s, const char* suffix) {
  const std::string_view x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

}  // namespace

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& path, const TokenizerOptions& options) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw errno_error("tokenizer " + path, errno);
  if (!S_ISREG(st.st_mode)) throw_error(ErrorCode::kInvalidArgument, path + ": not a regular file");
  for (const TokenizerFormat& f : kFormats)
    if (ends_with(path, f.extension)) return f.open(path, options);
  std::string head(256, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  for (const TokenizerFormat& f : kFormats)
    if (f.looks_like(head)) return f.open(path, options);
  throw_error(ErrorCode::kInvalidArgument,
              path + ": not a tokenizer stoker reads (a tiktoken ranks file, a tokenizer.json, a SentencePiece .model)");
}

}  // namespace stoker
