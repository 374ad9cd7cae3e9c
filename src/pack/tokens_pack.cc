// pack_tokens: a flat token file or a Megatron-LM .bin/.idx pair -> `tokens:tokens`.
//
// The input is seen as one flat stream of T tokens made of extents of the source file
// (one extent for a flat file; the index's sequences, merged when adjacent, for
// Megatron). Record k holds rows [k*R, k*R + R) and so needs the contiguous stream
// window [k*R*N, (k*R + rows)*N] (rows*N + 1 tokens): worker threads pread that
// window, expand it into overlapping rows of N+1 tokens, and compress it (zstd, per
// record); the main thread appends records in order.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "pack/token_docs.h"
#include "stoker/dataset.h"
#include "stoker/error.h"
#include "stoker/pack.h"
#include "util/bytes.h"

namespace stoker {

using namespace internal;
static_assert(std::endian::native == std::endian::little, "token packing assumes a little-endian host");

namespace {

constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kIdxHeader = 9 + 8 + 1 + 8 + 8;
constexpr size_t kDefaultRecordBytes = 256 * 1024;

// Megatron's dtype codes -> element size (0 = unknown code).
size_t megatron_elem_size(uint8_t code) {
  switch (code) {
    case 1: case 2: return 1;   // uint8, int8
    case 3: case 8: return 2;   // int16, uint16
    case 4: case 7: return 4;   // int32, float32
    case 5: case 6: return 8;   // int64, float64
    default: return 0;
  }
}

DType megatron_dtype(uint8_t code) {
  switch (code) {
    case 4: return DType::kInt32;
    case 5: return DType::kInt64;
    case 8: return DType::kUint16;
    default: return DType::kNone;
  }
}

bool has_idx_magic(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char buf[9];
  return pread_full(fd.get(), buf, sizeof buf, 0, path) == sizeof buf && std::memcmp(buf, kIdxMagic, 9) == 0;
}

struct Extent {
  uint64_t byte_offset;  // in the token file
  uint64_t tokens;
};

// A stream of tokens laid out as extents of one file; read() is thread-safe (pread).
class TokenStream {
 public:
  TokenStream(std::string path, size_t elem) : path_(std::move(path)), elem_(elem) {
    fd_.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd_) throw errno_error("open " + path_, errno);
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) throw errno_error("stat " + path_, errno);
    if (!S_ISREG(st.st_mode)) throw_error(ErrorCode::kInvalidArgument, path_ + " is not a regular file");
    file_size_ = static_cast<uint64_t>(st.st_size);
  }
  uint64_t file_size() const { return file_size_; }
  void add_extent(uint64_t byte_offset, uint64_t tokens) {
    if (tokens == 0) return;
    if (!extents_.empty()) {
      Extent& last = extents_.back();
      if (last.byte_offset + last.tokens * elem_ == byte_offset) {
        last.tokens += tokens;
        total_ += tokens;
        return;
      }
    }
    starts_.push_back(total_);
    extents_.push_back({byte_offset, tokens});
    total_ += tokens;
  }
  uint64_t total() const { return total_; }

  // Copies stream tokens [first, first + count) into out.
  void read(uint64_t first, uint64_t count, uint8_t* out) const {
    size_t e = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
    while (count) {
      const Extent& x = extents_.at(e);
      const uint64_t within = first - starts_[e];
      const uint64_t n = std::min(count, x.tokens - within);
      const size_t bytes = static_cast<size_t>(n * elem_);
      const uint64_t off = x.byte_offset + within * elem_;
      if (pread_full(fd_.get(), out, bytes, off, path_) != bytes)
        throw_error(ErrorCode::kDataLoss, path_ + ": file shrank while being read (at byte " + std::to_string(off) + ")");
      out += bytes;
      first += n;
      count -= n;
      ++e;
    }
  }

 private:
  std::string path_;
  size_t elem_;
  UniqueFd fd_;
  uint64_t file_size_ = 0;
  std::vector<Extent> extents_;
  std::vector<uint64_t> starts_;
  uint64_t total_ = 0;
};

std::string strip_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0
             ? s.substr(0, s.size() - suffix.size())
             : std::string();
}

}  // namespace

MegatronIndex read_megatron_index(const std::string& idx_path, int64_t bin_size) {
  std::vector<uint8_t> b = read_whole_file(idx_path, 1ull << 40);
  auto bad = [&](const std::string& why) { throw_error(ErrorCode::kDataLoss, idx_path + ": " + why); };
  if (b.size() < kIdxHeader) bad("too short for a Megatron index header (" + std::to_string(b.size()) + " bytes)");
  if (std::memcmp(b.data(), kIdxMagic, 9) != 0) bad("not a Megatron index (bad magic)");
  MegatronIndex idx;
  idx.version = get_u64(b.data() + 9);
  if (idx.version != 1) bad("unsupported Megatron index version " + std::to_string(idx.version));
  idx.dtype_code = b[17];
  const size_t elem = megatron_elem_size(idx.dtype_code);
  if (elem == 0) bad("unknown Megatron dtype code " + std::to_string(idx.dtype_code));
  idx.dtype = megatron_dtype(idx.dtype_code);
  const uint64_t seqs = get_u64(b.data() + 18);
  const uint64_t docs = get_u64(b.data() + 26);
  const uint64_t room = b.size() - kIdxHeader;
  if (seqs > room / 12 || docs > (room - seqs * 12) / 8)
    bad("counts (" + std::to_string(seqs) + " sequences, " + std::to_string(docs) +
        " documents) exceed the file's " + std::to_string(b.size()) + " bytes");
  if (docs == 0) bad("empty document index");
  const uint8_t* p = b.data() + kIdxHeader;
  idx.sizes.resize(seqs);
  idx.pointers.resize(seqs);
  idx.doc_idx.resize(docs);
  for (uint64_t i = 0; i < seqs; ++i) idx.sizes[i] = static_cast<int32_t>(get_u32(p + 4 * i));
  p += 4 * seqs;
  for (uint64_t i = 0; i < seqs; ++i) idx.pointers[i] = static_cast<int64_t>(get_u64(p + 8 * i));
  p += 8 * seqs;
  for (uint64_t i = 0; i < docs; ++i) idx.doc_idx[i] = static_cast<int64_t>(get_u64(p + 8 * i));
  for (uint64_t i = 0; i < seqs; ++i) {
    if (idx.sizes[i] < 0) bad("sequence " + std::to_string(i) + " has negative size");
    if (idx.pointers[i] < 0) bad("sequence " + std::to_string(i) + " has a negative pointer");
    if (bin_size >= 0) {
      const uint64_t end = static_cast<uint64_t>(idx.pointers[i]) + static_cast<uint64_t>(idx.sizes[i]) * elem;
      if (static_cast<uint64_t>(idx.pointers[i]) > static_cast<uint64_t>(bin_size) ||
          end > static_cast<uint64_t>(bin_size))
        bad("sequence " + std::to_string(i) + " (bytes " + std::to_string(idx.pointers[i]) + ".." +
            std::to_string(end) + ") lies outside the " + std::to_string(bin_size) + "-byte .bin file");
    }
  }
  if (idx.doc_idx[0] != 0) bad("document index does not start at 0");
  for (uint64_t i = 1; i < docs; ++i)
    if (idx.doc_idx[i] < idx.doc_idx[i - 1]) bad("document index decreases at entry " + std::to_string(i));
  if (static_cast<uint64_t>(idx.doc_idx.back()) != seqs)
    bad("document index ends at " + std::to_string(idx.doc_idx.back()) + ", not at the sequence count " +
        std::to_string(seqs));
  return idx;
}

PackSummary pack_tokens(const std::string& file, const std::string& out, const TokensPackOptions& options) {
  return pack_tokens_impl(file, out, options, true);
}

PackSummary internal::pack_tokens_impl(const std::string& file, const std::string& out,
                                       const TokensPackOptions& options, bool split_records,
                                       const std::map<std::string, std::string>& meta) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.seq_len < 1) throw_error(ErrorCode::kInvalidArgument, "--seq-len must be at least 1");
  if (options.zstd_level < 0 || options.zstd_level > 19)
    throw_error(ErrorCode::kInvalidArgument, "--zstd level must be 1..19 (or 0 for none)");
  if (!std::filesystem::exists(file)) throw_error(ErrorCode::kNotFound, file + ": no such file");
  check_output_outside(file, out, "input");

  // Megatron pair? (FILE.idx, or FILE.bin with a sibling FILE.idx carrying the magic.)
  std::string idx_path, bin_path = file;
  if (std::string stem = strip_suffix(file, ".idx"); !stem.empty()) {  // magic checked when parsed
    idx_path = file;
    bin_path = stem + ".bin";
  } else if (std::string stem2 = strip_suffix(file, ".bin"); !stem2.empty() && has_idx_magic(stem2 + ".idx")) {
    idx_path = stem2 + ".idx";
  } else if (has_idx_magic(file)) {
    throw_error(ErrorCode::kInvalidArgument, file + " is a Megatron index; name it *.idx next to its *.bin");
  }

  DType dtype = options.dtype;
  std::unique_ptr<TokenStream> stream;
  std::string source;
  std::vector<uint64_t> doc_starts;  // document boundaries, when the input has them
  bool docs = false;
  if (!idx_path.empty()) {
    auto probe = std::make_unique<TokenStream>(bin_path, 1);
    MegatronIndex idx = read_megatron_index(idx_path, static_cast<int64_t>(probe->file_size()));
    if (idx.dtype == DType::kNone)
      throw_error(ErrorCode::kInvalidArgument, idx_path + ": Megatron dtype code " + std::to_string(idx.dtype_code) +
                                                   " is not a supported token type (uint16, int32, int64)");
    if (dtype != DType::kNone && dtype != idx.dtype)
      throw_error(ErrorCode::kInvalidArgument, idx_path + " holds " + dtype_name(idx.dtype) + " tokens, not " +
                                                   dtype_name(dtype) + " as --dtype says");
    dtype = idx.dtype;
    stream = std::make_unique<TokenStream>(bin_path, dtype_size(dtype));
    for (size_t i = 0; i < idx.sizes.size(); ++i)
      stream->add_extent(static_cast<uint64_t>(idx.pointers[i]), static_cast<uint64_t>(idx.sizes[i]));
    source = "megatron:" + base_name(bin_path);
    if (options.eos)
      throw_error(ErrorCode::kInvalidArgument, idx_path + ": --eos is for flat token files; a Megatron index gives the documents");
    doc_starts = megatron_doc_starts(idx);
    docs = true;
  } else {
    if (dtype != DType::kUint16 && dtype != DType::kUint32 && dtype != DType::kInt32 && dtype != DType::kInt64)
      throw_error(ErrorCode::kInvalidArgument, file + ": a flat token file needs --dtype uint16|uint32 (int32, int64 also accepted)");
    stream = std::make_unique<TokenStream>(file, dtype_size(dtype));
    if (stream->file_size() % dtype_size(dtype) != 0)
      throw_error(ErrorCode::kInvalidArgument, file + ": size " + std::to_string(stream->file_size()) +
                                                   " is not a multiple of " + std::to_string(dtype_size(dtype)) +
                                                   " (" + dtype_name(dtype) + " tokens); wrong --dtype?");
    stream->add_extent(0, stream->file_size() / dtype_size(dtype));
    source = "flat:" + base_name(file);
    if (options.eos) {
      const TokenStream& st = *stream;
      doc_starts = eos_doc_starts([&](uint64_t first, uint64_t count, uint8_t* out) { st.read(first, count, out); },
                                  st.total(), dtype, *options.eos, file);
      docs = true;
    }
  }

  const uint64_t N = options.seq_len;
  const uint64_t T = stream->total();
  if (T < N + 1)
    throw_error(ErrorCode::kInvalidArgument, file + ": " + std::to_string(T) + " tokens is shorter than one row of " +
                                                 std::to_string(N + 1) + " (--seq-len " + std::to_string(N) + " + 1)");
  const size_t elem = dtype_size(dtype);
  const uint64_t row_bytes = (N + 1) * elem;
  const uint64_t rows = (T - 1) / N;
  uint64_t R = options.rows_per_record ? options.rows_per_record : std::max<uint64_t>(1, kDefaultRecordBytes / row_bytes);
  if (R * row_bytes > 0xFFFFFFFFull)
    throw_error(ErrorCode::kInvalidArgument, "--rows-per-record " + std::to_string(R) + " makes records over 4 GiB");
  const uint64_t records = (rows + R - 1) / R;
  // Rows overlap by one token, so they use rows*N + 1 tokens of the stream.
  const uint64_t dropped = T - (rows * N + 1);
  // A part takes records [k0, k1): the same records a one-part pack writes there.
  uint64_t k0 = 0, k1 = records;
  if (split_records && options.part.enabled()) {
    const std::pair<uint64_t, uint64_t> r = options.part.range(records);
    if (r.first == r.second)
      throw_error(ErrorCode::kInvalidArgument, "part " + options.part.to_string() + " of the " + std::to_string(records) +
                                                   " records of " + file + " is empty: use at most " +
                                                   std::to_string(records) + " parts (or fewer --rows-per-record)");
    k0 = r.first;
    k1 = r.second;
  }
  const bool last_part = k1 == records;

  Schema schema;
  Field f{"tokens", FieldKind::kTokens, dtype, static_cast<uint32_t>(N)};
  schema.fields = {f};
  if (docs) schema.fields.push_back(Field{kDocStartsField, FieldKind::kVarArray, DType::kInt32, 0, {}});
  DatasetWriterOptions wopts = writer_options(options, out);
  if (options.zstd_level > 0) {
    wopts.shard.compression = Compression::kZstd;
    wopts.shard.zstd_level = options.zstd_level;
  }
  DatasetWriter writer(out, schema, wopts, options.overwrite);
  Manifest& m = writer.manifest();
  m.meta["seq_len"] = std::to_string(N);
  m.meta["dtype"] = dtype_name(dtype);
  // The counts are this part's share (commit_parts sums them): its rows, the stream
  // tokens from its first row's start to the next part's, the documents starting there.
  const uint64_t first_token = k0 * R * N, end_token = last_part ? T : k1 * R * N;
  m.meta["tokens"] = std::to_string(end_token - first_token);
  m.meta["rows"] = std::to_string(std::min(k1 * R, rows) - k0 * R);
  m.meta["rows_per_record"] = std::to_string(R);
  m.meta["tokens_dropped"] = std::to_string(last_part ? dropped : 0);
  m.meta["source"] = source;
  if (docs)
    m.meta["documents"] = std::to_string(
        std::lower_bound(doc_starts.begin(), doc_starts.end(), end_token) -
        std::lower_bound(doc_starts.begin(), doc_starts.end(), first_token));
  if (options.eos) m.meta["eos"] = std::to_string(*options.eos);
  for (const auto& [k, v] : meta) m.meta[k] = v;

  const ShardWriterOptions shard_opts = writer.options().shard;
  auto produce = [&](size_t k) {
    const uint64_t r0 = k * R, n = std::min(R, rows - r0);
    std::vector<uint8_t> window(static_cast<size_t>((n * N + 1) * elem));
    stream->read(r0 * N, n * N + 1, window.data());
    std::vector<uint8_t> raw(static_cast<size_t>(n * row_bytes));
    for (uint64_t j = 0; j < n; ++j)
      std::memcpy(raw.data() + j * row_bytes, window.data() + j * N * elem, static_cast<size_t>(row_bytes));
    std::vector<uint8_t> starts;
    if (docs) starts = record_doc_starts(doc_starts, r0 * N, (r0 + n) * N, file);
    const std::span<const uint8_t> fields[] = {raw, starts};
    return prepare_record(schema, std::span(fields, docs ? 2 : 1), shard_opts);
  };

  PackSummary summary;
  ProgressReporter progress("pack tokens", k1 - k0, 0, options.progress);
  const int threads = resolve_threads(options.threads);
  ordered_parallel_for<PreparedRecord>(
      k1 - k0, threads, static_cast<size_t>(threads) * 4, [&](size_t i) { return produce(k0 + i); },
      [&](size_t i, PreparedRecord&& rec) {
        check_cancel(options.cancel, writer, "pack tokens", out);
        writer.add_prepared(rec);
        progress.update(i + 1, writer.raw_bytes());
      });
  progress.finish();
  summary.input_bytes = (end_token - first_token) * elem;
  Manifest done = writer.finish();
  fill_summary(summary, done, writer);
  summary.tokens_dropped = last_part ? dropped : 0;
  if (summary.tokens_dropped)
    summary.notes.push_back("dropped the last " + std::to_string(dropped) + " of " + std::to_string(T) +
                            " tokens: they make no full row of " + std::to_string(N + 1) + " (--seq-len " +
                            std::to_string(N) + " + 1); manifest meta tokens_dropped");
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
