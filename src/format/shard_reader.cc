#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cstring>

#include "format/path_hint.h"
#include "format/record_checks.h"
#include "format/shard_layout.h"
#include "stoker/crc32c.h"
#include "stoker/error.h"
#include "stoker/shard.h"
#include "util/bytes.h"

namespace stoker {

namespace {
std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}
}  // namespace

int64_t Record::int64_field(size_t i) const {
  if (i >= fields.size() || fields[i].size() != 8)
    throw_error(ErrorCode::kDataLoss, "field " + std::to_string(i) + " is not an int64");
  return static_cast<int64_t>(internal::get_u64(fields[i].data()));
}

std::shared_ptr<const ShardReader> ShardReader::open(const std::string& path, ShardReaderOptions options) {
  std::shared_ptr<ShardReader> r(new ShardReader());
  r->path_ = path;
  r->options_ = options;
  internal::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw errno_error("open shard " + path, errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) throw errno_error("stat " + path, errno);
  if (!S_ISREG(st.st_mode)) throw_error(ErrorCode::kInvalidArgument, path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBlock + kTrailerSize)
    throw_error(ErrorCode::kDataLoss, path + ": truncated: " + std::to_string(size) +
                                          " bytes is smaller than a header block and a trailer");

  std::vector<uint8_t> block(kHeaderBlock);
  internal::pread_full(fd.get(), block.data(), block.size(), 0, path);
  if (std::memcmp(block.data(), "STKSHARD", 8) != 0)  // say what the file is instead
    throw_error(ErrorCode::kDataLoss,
                path + ": header: wrong magic (not a stoker shard); " + internal::describe_non_dataset(path));
  const uint32_t header_size = internal::peek_header_size(block, path);
  if (header_size > size - kTrailerSize) {
    if (internal::get_u32(&block[kHeaderBlock - 4]) != crc32c(block.data(), kHeaderBlock - 4))
      throw_error(ErrorCode::kDataLoss, path + ": header: checksum mismatch (the size field reads " +
                                            std::to_string(header_size) + ", past the end of the file)");
    throw_error(ErrorCode::kDataLoss, path + ": header: size " + std::to_string(header_size) + " runs past the end of the file");
  }
  if (header_size > block.size()) {
    block.resize(header_size);
    internal::pread_full(fd.get(), block.data() + kHeaderBlock, header_size - kHeaderBlock, kHeaderBlock, path);
  }
  r->header_ = internal::decode_header(block, path);

  std::array<uint8_t, kTrailerSize> tb{};
  internal::pread_full(fd.get(), tb.data(), tb.size(), size - kTrailerSize, path);
  internal::Trailer t = internal::decode_trailer(tb, path);
  if (t.file_size != size)
    throw_error(ErrorCode::kDataLoss, path + ": trailer: file is " + std::to_string(size) + " bytes but the trailer says " +
                                          std::to_string(t.file_size) + " (truncated or appended to)");
  if (t.header_crc != internal::get_u32(&block[header_size - 4]))
    throw_error(ErrorCode::kDataLoss, path + ": trailer: header checksum copy does not match the header");
  if (t.version != r->header_.version)
    throw_error(ErrorCode::kDataLoss, path + ": trailer: version " + std::to_string(t.version) +
                                          " differs from the header's " + std::to_string(r->header_.version));
  if (t.entry_size != internal::entry_size(r->header_.schema))
    throw_error(ErrorCode::kDataLoss, path + ": trailer: index entry size " + std::to_string(t.entry_size) + " does not match the schema");
  if (t.index_offset < header_size || t.index_offset > size - kTrailerSize ||
      t.index_size != size - kTrailerSize - t.index_offset)
    throw_error(ErrorCode::kDataLoss, path + ": trailer: index at " + std::to_string(t.index_offset) + " size " +
                                          std::to_string(t.index_size) + " does not fit the file");
  if (t.record_count != t.index_size / t.entry_size || t.index_size % t.entry_size != 0)
    throw_error(ErrorCode::kDataLoss, path + ": trailer: record count " + std::to_string(t.record_count) +
                                          " does not match the index size");

  // The index size is bounded by the real file size checked above, so this allocation
  // cannot be inflated by a hostile trailer.
  std::vector<uint8_t> index(t.index_size);
  internal::pread_full(fd.get(), index.data(), index.size(), t.index_offset, path);
  const uint32_t crc = crc32c(index.data(), index.size());
  if (crc != t.index_crc)
    throw_error(ErrorCode::kDataLoss, path + ": index: checksum mismatch (stored " + hex32(t.index_crc) +
                                          ", computed " + hex32(crc) + ")");
  r->locations_ = internal::decode_index(index, r->header_.schema, t.record_count, header_size, t.index_offset,
                                         r->header_.align, options.max_record_bytes, path);
  r->file_size_ = size;
  r->data_end_ = t.index_offset;
  r->index_crc_ = t.index_crc;
  r->fd_ = fd.release();
  return r;
}

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<uint8_t> ShardReader::read_stored(uint64_t i) const {
  if (i >= locations_.size())
    throw_error(ErrorCode::kInvalidArgument, path_ + ": record " + std::to_string(i) + " does not exist (shard has " +
                                                 std::to_string(locations_.size()) + ")");
  const RecordLocation& l = locations_[i];
  std::vector<uint8_t> buf(l.stored_size);
  size_t n = internal::pread_full(fd_, buf.data(), buf.size(), l.offset, path_);
  if (n != buf.size())
    throw_error(ErrorCode::kDataLoss, path_ + ": record " + std::to_string(i) + ": short read (" + std::to_string(n) +
                                          " of " + std::to_string(buf.size()) + " bytes): file truncated");
  internal::check_record_crc(header_.schema, l, buf, path_ + ": record " + std::to_string(i));
  return buf;
}

Record ShardReader::read_record(uint64_t i) const {
  std::vector<uint8_t> stored = read_stored(i);
  const RecordLocation& l = locations_[i];
  if (!(l.flags & kRecordZstd)) {
    Record r;
    r.buffer = std::move(stored);
    size_t off = 0;
    for (uint32_t fs : l.field_sizes) {
      r.fields.emplace_back(r.buffer.data() + off, fs);
      off += fs;
    }
    return r;
  }
  return unpack_record(header_.schema, l, stored, path_ + ": record " + std::to_string(i), options_.max_record_bytes);
}

namespace {
// One decompression context per thread, kept for the thread's life. ZSTD_decompress
// makes and frees a ~160 KiB context per call: above glibc's mmap threshold that is an
// mmap, page faults and a munmap per record, which on 256 KiB token chunks cost more
// than a tenth of the decompression itself.
ZSTD_DCtx* thread_dctx() {
  struct Holder {
    ZSTD_DCtx* ctx = ZSTD_createDCtx();
    ~Holder() { ZSTD_freeDCtx(ctx); }
  };
  thread_local Holder h;
  if (!h.ctx) throw_error(ErrorCode::kResourceExhausted, "zstd: cannot allocate a decompression context");
  return h.ctx;
}
}  // namespace

std::vector<std::span<const uint8_t>> unpack_record_into(const Schema& schema, const RecordLocation& loc,
                                                         std::span<const uint8_t> stored, std::span<uint8_t> out,
                                                         const std::string& where) {
  if (stored.size() != loc.stored_size)
    throw_error(ErrorCode::kDataLoss, where + ": read " + std::to_string(stored.size()) + " bytes, expected " +
                                          std::to_string(loc.stored_size) + " (short read or truncated file)");
  internal::check_record_crc(schema, loc, stored, where);
  if (out.size() < loc.raw_size)
    throw_error(ErrorCode::kInvalidArgument, where + ": output buffer of " + std::to_string(out.size()) +
                                                 " bytes is smaller than the record's " + std::to_string(loc.raw_size));
  if (loc.field_sizes.size() != schema.fields.size())
    throw_error(ErrorCode::kDataLoss, where + ": index entry does not match the schema");
  if (loc.flags & kRecordZstd) {
    unsigned long long declared = ZSTD_getFrameContentSize(stored.data(), stored.size());
    if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN || declared != loc.raw_size)
      throw_error(ErrorCode::kDataLoss, where + ": zstd frame header is bad or declares the wrong size");
    size_t n = ZSTD_decompressDCtx(thread_dctx(), out.data(), loc.raw_size, stored.data(), stored.size());
    if (ZSTD_isError(n))
      throw_error(ErrorCode::kDataLoss, where + ": zstd: " + ZSTD_getErrorName(n));
    if (n != loc.raw_size)
      throw_error(ErrorCode::kDataLoss, where + ": zstd produced " + std::to_string(n) + " bytes, expected " +
                                            std::to_string(loc.raw_size));
  } else {
    if (stored.size() != loc.raw_size) throw_error(ErrorCode::kDataLoss, where + ": stored size != raw size");
    std::memcpy(out.data(), stored.data(), stored.size());
  }
  return internal::slice_fields(out.data(), loc);
}

Record unpack_record(const Schema& schema, const RecordLocation& loc, std::span<const uint8_t> stored,
                     const std::string& where, uint64_t max_record_bytes) {
  if (loc.raw_size > max_record_bytes)
    throw_error(ErrorCode::kResourceExhausted, where + ": raw size " + std::to_string(loc.raw_size) + " exceeds the limit");
  Record r;
  r.buffer.resize(loc.raw_size);
  r.fields = unpack_record_into(schema, loc, stored, r.buffer, where);
  return r;
}

}  // namespace stoker
