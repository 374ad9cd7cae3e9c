// pack_text: text files and JSON Lines -> a token dataset, by way of a Megatron pair.
//
// Workers tokenise pieces of the inputs (text_inputs.h) while the calling thread
// appends their documents, in input order, to a temporary Megatron .bin and keeps each
// document's size; the .idx written beside it then makes every document a Megatron
// document, and pack_tokens turns the pair into rows and document boundaries exactly as
// it does for any Megatron input: one writer of token datasets, not two.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>

#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "pack/text_inputs.h"
#include "stoker/error.h"
#include "stoker/remote.h"
#include "stoker/pack.h"
#include "util/bytes.h"
#include "util/parse.h"
#include "util/unique_fd.h"

namespace stoker {

using namespace internal;

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPieceBytes = 4ull << 20;  // JSON Lines text per work item

// A decimal id below the vocabulary size, or a token's text.
uint32_t resolve_token(const Tokenizer& tok, const std::string& spec, const char* option, const std::string& file) {
  if (const auto id = parse_decimal<uint32_t>(spec)) {
    if (*id < tok.vocab_size()) return *id;
  } else if (auto id = tok.token_id(spec)) {
    return *id;
  }
  throw_error(ErrorCode::kInvalidArgument, std::string(option) + " " + spec + ": neither an id below " +
                                               std::to_string(tok.vocab_size()) + " nor a token of " + file);
}

// A directory removed with everything in it when the run ends, whichever way.
class ScratchDir {
 public:
  explicit ScratchDir(fs::path p) : path_(std::move(p)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const char* name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

struct TokenizedPiece {
  std::vector<uint32_t> tokens;    // the piece's documents, one after another
  std::vector<uint64_t> doc_sizes;
  uint64_t lines = 0;
  std::optional<JsonLinesProblem> problem;
};

// The .bin/.idx pair of Megatron-LM's MMapIndexedDataset (read back by
// read_megatron_index): one sequence and one document per text document.
class MegatronPairWriter {
 public:
  MegatronPairWriter(std::string bin, bool wide) : bin_(std::move(bin)), wide_(wide) {
    fd_.reset(::open(bin_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd_) throw errno_error("create " + bin_, errno);
  }
  void add(const TokenizedPiece& p, const std::string& where) {
    buf_.resize(p.tokens.size() * elem());
    uint8_t* o = buf_.data();
    for (uint32_t t : p.tokens) {
      if (wide_) put_u32(o, t), o += 4;
      else put_u16(o, static_cast<uint16_t>(t)), o += 2;
    }
    write_full(fd_.get(), buf_.data(), buf_.size(), bin_);
    for (uint64_t n : p.doc_sizes) {
      if (n > static_cast<uint64_t>(INT32_MAX))
        throw_error(ErrorCode::kInvalidArgument, where + ": a document of " + std::to_string(n) +
                                                     " tokens is over the 2^31 - 1 a Megatron index holds");
      sizes_.push_back(static_cast<int32_t>(n));
      pointers_.push_back(static_cast<int64_t>(bytes_));
      bytes_ += n * elem();
      tokens_ += n;
    }
  }
  void finish(const std::string& idx) {
    fd_.reset();
    const uint64_t n = sizes_.size();
    std::vector<uint8_t> b(9 + 8 + 1 + 8 + 8 + n * 12 + (n + 1) * 8);
    uint8_t* p = b.data();
    std::memcpy(p, "MMIDIDX\0\0", 9);
    put_u64(p + 9, 1);
    p[17] = wide_ ? 4 : 8;  // Megatron's int32 / uint16 codes
    put_u64(p + 18, n);
    put_u64(p + 26, n + 1);
    p += 34;
    for (uint64_t i = 0; i < n; ++i) put_u32(p + 4 * i, static_cast<uint32_t>(sizes_[i]));
    p += 4 * n;
    for (uint64_t i = 0; i < n; ++i) put_u64(p + 8 * i, static_cast<uint64_t>(pointers_[i]));
    p += 8 * n;
    for (uint64_t i = 0; i <= n; ++i) put_u64(p + 8 * i, i);
    write_whole_file(idx, b);
  }
  uint64_t tokens() const { return tokens_; }
  uint64_t documents() const { return sizes_.size(); }

 private:
  size_t elem() const { return wide_ ? 4 : 2; }
  std::string bin_;
  bool wide_;
  UniqueFd fd_;
  std::vector<uint8_t> buf_;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_;
  uint64_t bytes_ = 0, tokens_ = 0;
};

}  // namespace

PackSummary pack_text(const std::vector<std::string>& inputs, const std::string& out, const TextPackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (inputs.empty()) throw_error(ErrorCode::kInvalidArgument, "pack text: no inputs");
  if (options.tokenizer.empty()) throw_error(ErrorCode::kInvalidArgument, "pack text: --tokenizer is required");
  for (const std::string& in : inputs) check_output_outside(in, out, "input");
  const std::unique_ptr<Tokenizer> tok = open_tokenizer(options.tokenizer, options.tokenizer_options);
  std::optional<uint32_t> bos, eos;
  if (options.bos) bos = resolve_token(*tok, *options.bos, "--bos", options.tokenizer);
  if (options.eos) eos = resolve_token(*tok, *options.eos, "--eos", options.tokenizer);
  // A part tokenises its slice of the pieces (whole documents) into a stream of its own.
  const std::vector<TextPiece> pieces = part_slice(plan_text_pieces(inputs, kPieceBytes), options.part, "text pieces");
  uint64_t text_bytes = 0;
  for (const TextPiece& p : pieces) text_bytes += p.size;

  auto produce = [&](size_t i) {
    const TextPiece& piece = pieces[i];
    TokenizedPiece r;
    auto document = [&](std::string_view doc) {
      const size_t before = r.tokens.size();
      if (bos) r.tokens.push_back(*bos);
      tok->encode(doc, r.tokens, options.allowed_special);
      if (eos) r.tokens.push_back(*eos);
      r.doc_sizes.push_back(r.tokens.size() - before);
    };
    if (piece.kind == TextInputKind::kTar || piece.kind == TextInputKind::kDataset) {
      read_document_piece(piece, options.text_field, document);
      return r;
    }
    const std::string text = read_text_piece(piece);
    if (piece.kind == TextInputKind::kPlainText)
      document(text);
    else
      r.problem = read_json_lines(text, options.jsonl_key, document, r.lines);
    return r;
  };

  // The token stream is written next to the output (same file system), or to TMPDIR for
  // an object store.
  fs::path target = is_remote_url(out) ? fs::temp_directory_path() / "stoker-text" : fs::absolute(out).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  fs::create_directories(target.parent_path());
  ScratchDir scratch(target.parent_path() / ("." + target.filename().string() + ".text-pending-" +
                                             std::to_string(::getpid()) +
                                             (options.part.enabled() ? "-" + part_shard_prefix(options.part) : "")));
  const std::string bin = scratch.file("text.bin");
  MegatronPairWriter pair(bin, tok->vocab_size() > 65536);
  ProgressReporter progress("pack text: tokenize", pieces.size(), text_bytes, options.progress);
  const int threads = resolve_threads(options.threads);
  std::string file_now;
  uint64_t lines_before = 0, bytes_done = 0;  // lines of file_now in the pieces already appended
  ordered_parallel_for<TokenizedPiece>(
      pieces.size(), threads, static_cast<size_t>(threads) * 2, produce, [&](size_t i, TokenizedPiece&& r) {
        if (options.cancel && options.cancel->load())
          throw_error(ErrorCode::kCancelled, "pack text interrupted while tokenising; nothing was packed");
        const TextPiece& piece = pieces[i];
        if (piece.file != file_now) file_now = piece.file, lines_before = internal::lines_before(piece);
        if (r.problem)
          throw_error(ErrorCode::kInvalidArgument,
                      piece.file + ":" + std::to_string(lines_before + r.problem->line) + ": " + r.problem->why);
        pair.add(r, piece.file);
        lines_before += r.lines;
        bytes_done += piece.size;
        progress.update(i + 1, bytes_done);
      });
  progress.finish();
  pair.finish(scratch.file("text.idx"));
  if (pair.tokens() < static_cast<uint64_t>(options.seq_len) + 1)
    throw_error(ErrorCode::kInvalidArgument, "pack text: the inputs make " + std::to_string(pair.tokens()) +
                                                 " tokens, fewer than one row of " + std::to_string(options.seq_len + 1) +
                                                 " (--seq-len " + std::to_string(options.seq_len) + " + 1)");

  TokensPackOptions t;
  static_cast<PackOptions&>(t) = options;
  t.dtype = DType::kNone;  // the index says
  t.seq_len = options.seq_len;
  t.rows_per_record = options.rows_per_record;
  t.zstd_level = options.zstd_level;
  // What a reader of the dataset needs to decode it, or to tokenise more text alike.
  std::map<std::string, std::string> meta{{"tokenizer", fs::path(options.tokenizer).filename().string()},
                                          {"tokenizer_format", std::string(tok->format())}};
  if (bos) meta["bos"] = std::to_string(*bos);
  if (eos) meta["eos"] = std::to_string(*eos);
  PackSummary s = pack_tokens_impl(bin, out, t, false, meta);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.notes.insert(s.notes.begin(), "tokenized " + std::to_string(pair.documents()) + " documents (" +
                                      format_bytes(static_cast<double>(text_bytes)) + " of text) into " +
                                      std::to_string(pair.tokens()) + " tokens with " + std::string(tok->format()) +
                                      " " + fs::path(options.tokenizer).filename().string());
  s.input_bytes = text_bytes;
  s.seconds = secs;
  return s;
}

}  // namespace stoker
