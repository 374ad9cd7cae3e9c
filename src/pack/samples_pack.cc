// pack_samples: fine-tuning samples as JSON Lines of token lists, one record each
// (pack.h). Pieces of whole lines are parsed on the workers into the records' field
// bytes; the calling thread names them FILE:LINE and writes them in input order.
#include <chrono>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "pack/text_inputs.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker {

namespace fs = std::filesystem;
using namespace internal;

namespace {

constexpr uint64_t kPieceBytes = 4ull << 20;

struct ParsedSample {
  uint64_t line;  // within its piece
  std::vector<uint8_t> tokens, mask;
};

struct ParsedPiece {
  std::vector<ParsedSample> samples;
  std::optional<JsonLinesProblem> problem;
  uint64_t lines = 0;
};

}  // namespace

PackSummary pack_samples(const std::vector<std::string>& inputs, const std::string& out,
                         const SamplesPackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (inputs.empty()) throw_error(ErrorCode::kInvalidArgument, "pack samples: no inputs");
  if (options.dtype != DType::kUint16 && options.dtype != DType::kUint32 && options.dtype != DType::kInt32 &&
      options.dtype != DType::kInt64)
    throw_error(ErrorCode::kInvalidArgument, "pack samples: --dtype must be uint16, uint32, int32 or int64");
  for (const std::string& in : inputs) check_output_outside(in, out, "input");
  // A part takes its slice of the pieces (whole lines).
  const std::vector<TextPiece> pieces = part_slice(plan_text_pieces(inputs, kPieceBytes), options.part, "JSON Lines pieces");
  uint64_t input_bytes = 0;
  for (const TextPiece& p : pieces) {
    if (p.kind != TextInputKind::kJsonLines)
      throw_error(ErrorCode::kInvalidArgument, p.file + ": pack samples reads JSON Lines (.jsonl, .ndjson) of token "
                                                        "lists, not plain text (pack text tokenises text)");
    input_bytes += p.size;
  }
  const bool with_mask = !options.mask_key.empty();
  Schema schema{{Field{kKeyField, FieldKind::kText}, Field{"tokens", FieldKind::kVarArray, options.dtype, 0, {}}}};
  if (with_mask) schema.fields.push_back(Field{"loss_mask", FieldKind::kVarArray, DType::kUint8, 0, {}});

  auto produce = [&](size_t i) {
    ParsedPiece r;
    const std::string text = read_text_piece(pieces[i]);
    r.problem = read_json_objects(
        text,
        [&](const nlohmann::json& j) -> std::string {
          ParsedSample s;
          size_t n = 0, m = 0;
          if (std::string why = json_integers(j, options.tokens_key, options.dtype, s.tokens, &n); !why.empty())
            return why;
          if (with_mask) {
            if (std::string why = json_integers(j, options.mask_key, DType::kInt64, s.mask, &m); !why.empty())
              return why;
            if (m != n)
              return "\"" + options.mask_key + "\" has " + std::to_string(m) + " entries for " + std::to_string(n) +
                     " tokens";
            std::vector<uint8_t> bits(m);
            for (size_t k = 0; k < m; ++k) {
              const uint8_t v = s.mask[k * 8];
              bool zero_rest = true;
              for (size_t b = 1; b < 8; ++b) zero_rest = zero_rest && s.mask[k * 8 + b] == 0;
              if (!zero_rest || v > 1)
                return "\"" + options.mask_key + "\"[" + std::to_string(k) + "] is not 0 or 1";
              bits[k] = v;
            }
            s.mask = std::move(bits);
          }
          s.line = r.lines;  // read_json_objects counts the line before handing it over
          r.samples.push_back(std::move(s));
          return {};
        },
        r.lines);
    return r;
  };

  DatasetWriterOptions wo = writer_options(options, out);
  if (options.zstd_level < 0 || options.zstd_level > 19)
    throw_error(ErrorCode::kInvalidArgument, "pack samples: --zstd level must be 0..19");
  if (options.zstd_level > 0) {
    wo.shard.compression = Compression::kZstd;
    wo.shard.zstd_level = options.zstd_level;
  }
  DatasetWriter writer(out, schema, wo, options.overwrite);
  PackSummary summary;
  ProgressReporter progress("pack samples", pieces.size(), input_bytes, options.progress);
  const int threads = resolve_threads(options.threads);
  std::string file_now;
  uint64_t lines_before = 0, bytes_done = 0, tokens = 0;
  ordered_parallel_for<ParsedPiece>(
      pieces.size(), threads, static_cast<size_t>(threads) * 2, produce, [&](size_t i, ParsedPiece&& r) {
        check_cancel(options.cancel, writer, "pack samples", out);
        const TextPiece& piece = pieces[i];
        if (piece.file != file_now) file_now = piece.file, lines_before = internal::lines_before(piece);
        if (r.problem)
          throw_error(ErrorCode::kInvalidArgument,
                      piece.file + ":" + std::to_string(lines_before + r.problem->line) + ": " + r.problem->why);
        const std::string name = fs::path(piece.file).filename().string();
        for (const ParsedSample& s : r.samples) {
          const std::string key = name + ":" + std::to_string(lines_before + s.line);
          std::vector<std::span<const uint8_t>> fields{
              {reinterpret_cast<const uint8_t*>(key.data()), key.size()}, s.tokens};
          if (with_mask) fields.push_back(s.mask);
          writer.add(fields);
          tokens += s.tokens.size() / dtype_size(options.dtype);
        }
        lines_before += r.lines;
        bytes_done += piece.size;
        progress.update(i + 1, bytes_done);
      });
  progress.finish();
  writer.manifest().meta["source"] = "jsonl:samples";
  const Manifest m = finish_nonempty(writer, "pack samples", summary);
  fill_summary(summary, m, writer);
  summary.input_bytes = input_bytes;
  summary.notes.push_back("packed " + std::to_string(summary.records) + " samples, " + std::to_string(tokens) +
                          " tokens" + (with_mask ? ", with loss masks" : ""));
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
