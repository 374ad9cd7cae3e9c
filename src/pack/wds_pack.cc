// pack_wds: WebDataset tars -> `jpeg:jpeg label:int64` shards.
//
// The main thread streams each tar (TarReader), groups consecutive members by key into
// samples and collects them into batches of bounded size; worker threads validate each
// sample (JPEG header, label text) and prepare its record; the main thread appends the
// records in tar order. A bad sample is reported (or skipped) when its turn comes.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>

#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "pack/tar_reader.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "util/parse.h"
#include "stoker/pack.h"

namespace stoker {

using namespace internal;

namespace {

constexpr size_t kBatchSamples = 512;
constexpr uint64_t kBatchBytes = 64ull << 20;

struct Sample {
  std::string tar;
  std::string key;
  std::optional<std::vector<uint8_t>> jpeg;
  std::optional<std::string> cls;
  std::string problem;  // set while grouping (e.g. a duplicate field)
};

struct Prepared {
  std::string bad;  // reason, empty when good
  PreparedRecord record;
};

// WebDataset's split: key = path up to the first '.' of the file-name part.
void split_key(const std::string& name, std::string& key, std::string& ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) {
    key.clear();
    ext.clear();
    return;
  }
  key = name.substr(0, dot);
  ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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

}  // namespace

PackSummary pack_wds(const std::vector<std::string>& tars, const std::string& out, const WdsPackOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (tars.empty()) throw_error(ErrorCode::kInvalidArgument, "pack wds: no tar files given");
  // Open every tar up front: a typo fails before any output is written.
  std::vector<std::unique_ptr<FileSource>> sources;
  uint64_t total_bytes = 0;
  for (const std::string& t : tars) {
    sources.push_back(std::make_unique<FileSource>(t));
    total_bytes += sources.back()->size();
  }

  Schema schema;
  schema.fields = {Field{"jpeg", FieldKind::kJpeg}, Field{"label", FieldKind::kInt64}};
  DatasetWriterOptions wopts;
  wopts.shard_size = options.shard_size;
  wopts.shard.align = options.align;
  DatasetWriter writer(out, schema, wopts, options.overwrite);
  writer.manifest().class_names = options.class_names;
  writer.manifest().meta["source"] = "wds";
  const ShardWriterOptions shard_opts = writer.options().shard;
  const int threads = resolve_threads(options.threads);

  PackSummary summary;
  ProgressReporter progress("pack wds", 0, total_bytes, options.progress);
  uint64_t consumed_before = 0;  // bytes of finished tars
  uint64_t samples_seen = 0;

  auto produce = [&](const Sample& s) {
    Prepared p;
    const std::string where = s.tar + ": sample '" + s.key + "'";
    if (!s.problem.empty()) {
      p.bad = where + ": " + s.problem;
      return p;
    }
    if (!s.jpeg) {
      p.bad = where + ": no .jpg/.jpeg member";
      return p;
    }
    if (!s.cls) {
      p.bad = where + ": no .cls member";
      return p;
    }
    int64_t label = 0;
    if (!parse_label(*s.cls, label) || label < 0) {
      p.bad = where + ": .cls is not a non-negative decimal label";
      return p;
    }
    if (!options.class_names.empty() && static_cast<uint64_t>(label) >= options.class_names.size()) {
      p.bad = where + ": label " + std::to_string(label) + " is not below the class count " +
              std::to_string(options.class_names.size());
      return p;
    }
    std::string why = check_jpeg_header(*s.jpeg, nullptr);
    if (!why.empty()) {
      p.bad = where + ": " + why;
      return p;
    }
    const auto lb = le64(label);
    const std::span<const uint8_t> fields[] = {*s.jpeg, lb};
    p.record = prepare_record(schema, fields, shard_opts);
    return p;
  };

  std::vector<Sample> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&](uint64_t tar_offset) {
    ordered_parallel_for<Prepared>(
        batch.size(), threads, static_cast<size_t>(threads) * 8, [&](size_t i) { return produce(batch[i]); },
        [&](size_t, Prepared&& p) {
          if (!p.bad.empty()) {
            if (!options.skip_bad) throw_error(ErrorCode::kDataLoss, p.bad);
            summary.skipped.push_back(p.bad);
          } else {
            writer.add_prepared(p.record);
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
    TarReader reader(*sources[t], tars[t], topts);
    TarMember m;
    std::optional<Sample> cur;
    auto close_sample = [&] {
      if (!cur) return;
      batch_bytes += cur->jpeg ? cur->jpeg->size() : 0;
      batch.push_back(std::move(*cur));
      cur.reset();
      if (batch.size() >= kBatchSamples || batch_bytes >= kBatchBytes) flush(reader.offset());
    };
    while (reader.next(m)) {
      summary.input_bytes += m.data.size();
      std::string key, ext;
      split_key(m.name, key, ext);
      if (key.empty()) continue;  // no extension: not part of any sample
      if (cur && cur->key != key) close_sample();
      if (!cur) {
        cur.emplace();
        cur->tar = tars[t];
        cur->key = key;
      }
      if (ext == "jpg" || ext == "jpeg") {
        if (cur->jpeg) cur->problem = "more than one .jpg/.jpeg member";
        else cur->jpeg = std::move(m.data);
      } else if (ext == "cls") {
        if (cur->cls) cur->problem = "more than one .cls member";
        else cur->cls = std::string(m.data.begin(), m.data.end());
      }
      m.data = {};
    }
    close_sample();
    flush(reader.offset());
    consumed_before += reader.offset();
  }
  progress.finish();
  Manifest done = writer.finish();
  fill_summary(summary, done, writer);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
