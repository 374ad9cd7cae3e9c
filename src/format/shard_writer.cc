#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <cstring>

#include "format/shard_layout.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/shard.h"
#include "util/bytes.h"
#include "util/utf8.h"

namespace stoker {

using internal::put_u32;
using internal::put_u64;

namespace {

// Appends go through a 1 MiB buffer: records are often a few KiB.
constexpr size_t kWriteBuffer = 1 << 20;

void check_fields(const Schema& schema, std::span<const std::span<const uint8_t>> fields) {
  if (fields.size() != schema.fields.size())
    throw_error(ErrorCode::kInvalidArgument,
                "record has " + std::to_string(fields.size()) + " fields, schema has " +
                    std::to_string(schema.fields.size()));
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& f = schema.fields[i];
    if (fields[i].size() > 0xFFFFFFFFu)
      throw_error(ErrorCode::kInvalidArgument, "field '" + f.name + "' is larger than 4 GiB");
    if (std::string why = f.check_size(fields[i].size()); !why.empty())
      throw_error(ErrorCode::kInvalidArgument, why);
    if (f.kind == FieldKind::kText) {
      const size_t bad = internal::utf8_error_offset(fields[i]);
      if (bad != fields[i].size())
        throw_error(ErrorCode::kInvalidArgument, "text field '" + f.name + "' is not valid UTF-8 (byte " +
                                                     std::to_string(bad) + ")");
    }
  }
}

}  // namespace

PreparedRecord prepare_record(const Schema& schema,
                              std::span<const std::span<const uint8_t>> fields,
                              const ShardWriterOptions& options) {
  check_fields(schema, fields);
  PreparedRecord rec;
  size_t raw = 0;
  for (auto f : fields) raw += f.size();
  if (raw > 0xFFFFFFFFu) throw_error(ErrorCode::kInvalidArgument, "record is larger than 4 GiB");
  rec.location.field_sizes.reserve(fields.size());
  for (auto f : fields) rec.location.field_sizes.push_back(static_cast<uint32_t>(f.size()));
  rec.location.raw_size = static_cast<uint32_t>(raw);

  std::vector<uint8_t> plain;
  plain.reserve(raw);
  for (auto f : fields) plain.insert(plain.end(), f.begin(), f.end());

  if (options.compression == Compression::kZstd && raw > 0) {
    std::vector<uint8_t> packed(ZSTD_compressBound(raw));
    size_t n = ZSTD_compress(packed.data(), packed.size(), plain.data(), raw, options.zstd_level);
    if (ZSTD_isError(n))
      throw_error(ErrorCode::kInvalidArgument, std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    if (n < raw) {  // keep the raw bytes when compression does not pay
      packed.resize(n);
      rec.stored = std::move(packed);
      rec.location.flags = kRecordZstd;
    }
  }
  if (rec.location.flags == 0) rec.stored = std::move(plain);
  rec.location.stored_size = static_cast<uint32_t>(rec.stored.size());
  rec.location.crc = crc32c(rec.stored.data(), rec.stored.size());
  return rec;
}

struct ShardWriter::Impl {
  std::string path, tmp_path;
  Schema schema;
  ShardWriterOptions options;
  internal::UniqueFd fd;
  std::vector<uint8_t> header;
  std::vector<uint8_t> buffer;
  std::vector<RecordLocation> locations;
  uint64_t file_pos = 0;  // bytes written or buffered so far
  uint64_t raw_bytes = 0, stored_bytes = 0;
  bool finished = false;

  void append(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    file_pos += size;
    if (buffer.size() + size > kWriteBuffer) {
      flush();
      if (size >= kWriteBuffer) {
        internal::write_full(fd.get(), p, size, tmp_path);
        return;
      }
    }
    buffer.insert(buffer.end(), p, p + size);
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[4096] = {};
    uint64_t rem = file_pos % alignment;
    if (alignment <= 1 || rem == 0) return;
    uint64_t pad = alignment - rem;
    while (pad) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof zeros));
      append(zeros, n);
      pad -= n;
    }
  }
  void flush() {
    if (!buffer.empty()) internal::write_full(fd.get(), buffer.data(), buffer.size(), tmp_path);
    buffer.clear();
  }
};

ShardWriter::ShardWriter(std::string path, Schema schema, ShardWriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  schema.validate();
  if (options.align != 1 && options.align != 4096)
    throw_error(ErrorCode::kInvalidArgument, "shard align must be 1 or 4096, got " + std::to_string(options.align));
  if (options.compression == Compression::kZstd &&
      (options.zstd_level < 1 || options.zstd_level > ZSTD_maxCLevel()))
    throw_error(ErrorCode::kInvalidArgument, "zstd level must be 1.." + std::to_string(ZSTD_maxCLevel()));
  if (options.version < kShardVersionMin || options.version > kShardVersion)
    throw_error(ErrorCode::kInvalidArgument, "shard version must be " + std::to_string(kShardVersionMin) + ".." +
                                                 std::to_string(kShardVersion) + ", got " + std::to_string(options.version));
  if (schema.min_version() > options.version)
    throw_error(ErrorCode::kInvalidArgument, "schema " + schema.to_string() + " needs shard version " +
                                                 std::to_string(schema.min_version()) + ", not " +
                                                 std::to_string(options.version));
  Impl& w = *impl_;
  w.path = std::move(path);
  w.tmp_path = w.path + ".tmp";
  w.schema = std::move(schema);
  w.options = options;
  w.header = internal::encode_header(w.schema, options);
  w.fd.reset(::open(w.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!w.fd) throw errno_error("create " + w.tmp_path, errno);
  w.buffer.reserve(kWriteBuffer);
  w.append(w.header.data(), w.header.size());
}

ShardWriter::~ShardWriter() {
  if (impl_ && !impl_->finished && impl_->fd) {
    impl_->fd.reset();
    ::unlink(impl_->tmp_path.c_str());
  }
}

void ShardWriter::add(std::span<const std::span<const uint8_t>> fields) {
  add_prepared(prepare_record(impl_->schema, fields, impl_->options));
}

void ShardWriter::add_prepared(const PreparedRecord& record) {
  Impl& w = *impl_;
  if (w.finished) throw_error(ErrorCode::kInvalidArgument, "add to a finished shard " + w.path);
  if (record.location.field_sizes.size() != w.schema.fields.size() ||
      record.stored.size() != record.location.stored_size)
    throw_error(ErrorCode::kInvalidArgument, "prepared record does not match the schema of " + w.path);
  w.pad_to(w.options.align);
  RecordLocation loc = record.location;
  loc.offset = w.file_pos;
  w.append(record.stored.data(), record.stored.size());
  w.raw_bytes += loc.raw_size;
  w.stored_bytes += loc.stored_size;
  w.locations.push_back(std::move(loc));
}

uint64_t ShardWriter::projected_size() const noexcept {
  const Impl& w = *impl_;
  return w.file_pos + w.locations.size() * internal::entry_size(w.schema) + kTrailerSize;
}

uint64_t ShardWriter::record_count() const noexcept { return impl_->locations.size(); }

ShardWriter::Summary ShardWriter::finish() {
  Impl& w = *impl_;
  if (w.finished) throw_error(ErrorCode::kInvalidArgument, "shard " + w.path + " finished twice");
  try {
    const uint64_t index_offset = w.file_pos;
    std::vector<uint8_t> index = internal::encode_index(w.schema, w.locations);
    const uint32_t index_crc = crc32c(index.data(), index.size());
    w.append(index.data(), index.size());
    internal::Trailer t;
    t.index_offset = index_offset;
    t.index_size = index.size();
    t.record_count = w.locations.size();
    t.entry_size = static_cast<uint32_t>(internal::entry_size(w.schema));
    t.index_crc = index_crc;
    t.header_crc = internal::get_u32(w.header.data() + w.header.size() - 4);
    t.version = w.options.version;
    t.file_size = w.file_pos + kTrailerSize;
    std::array<uint8_t, kTrailerSize> tb = internal::encode_trailer(t);
    w.append(tb.data(), tb.size());
    w.flush();
    if (w.options.fsync && ::fsync(w.fd.get()) != 0) throw errno_error("fsync " + w.tmp_path, errno);
    w.fd.reset();
    if (::rename(w.tmp_path.c_str(), w.path.c_str()) != 0)
      throw errno_error("rename " + w.tmp_path + " to " + w.path, errno);
    if (w.options.fsync) internal::fsync_parent_dir(w.path);
    w.finished = true;
    Summary s;
    s.path = w.path;
    s.records = w.locations.size();
    s.file_size = t.file_size;
    s.raw_bytes = w.raw_bytes;
    s.stored_bytes = w.stored_bytes;
    s.index_crc = index_crc;
    return s;
  } catch (...) {
    w.fd.reset();
    ::unlink(w.tmp_path.c_str());
    w.finished = true;
    throw;
  }
}

}  // namespace stoker
