// Shard files: stoker's record container (spec: shards/FORMAT.md).
//
// A shard is [header block][records][index][trailer]. Every byte is covered by a
// CRC32C: the header block (padding included), each record's stored bytes, the
// zero padding between aligned records (checked to be zero), the index and the
// trailer. ShardWriter builds one shard under a temporary name and renames it into
// place only after fsync, so a killed writer never leaves a file that looks valid.
// ShardReader opens a shard, validates header and trailer, and loads the index in
// one read; all sizes and offsets from the file are checked before use.
//
// Threading: a ShardWriter is used by one thread. A ShardReader is immutable after
// open(): read_record() and the const accessors may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace stoker {

/// What a field holds. The kind tells readers how to interpret the bytes.
enum class FieldKind : uint8_t {
  kBytes = 0,   ///< opaque bytes
  kJpeg = 1,    ///< a JPEG file's bytes, as found in the source
  kInt64 = 2,   ///< one little-endian int64 (e.g. a class label)
  kTokens = 3,  ///< n rows of (seq_len + 1) tokens of `dtype`, row-major, little-endian;
                ///< row r covers stream positions [r*seq_len, r*seq_len + seq_len] so
                ///< inputs are row[0:seq_len] and next-token targets row[1:seq_len+1]
};

/// Element type of token arrays.
enum class DType : uint8_t { kNone = 0, kUint16 = 1, kUint32 = 2, kInt32 = 3, kInt64 = 4 };

size_t dtype_size(DType t) noexcept;
const char* dtype_name(DType t) noexcept;     ///< "uint16", ...
DType dtype_from_name(const std::string& s);  ///< throws kInvalidArgument
const char* field_kind_name(FieldKind k) noexcept;  ///< "bytes", "jpeg", "int64", "tokens"
FieldKind field_kind_from_name(const std::string& s);

struct Field {
  std::string name;        ///< 1..64 bytes of [A-Za-z0-9_.-]
  FieldKind kind = FieldKind::kBytes;
  DType dtype = DType::kNone;  ///< kTokens only
  uint32_t seq_len = 0;        ///< kTokens only: training sequence length (row = seq_len+1)
  bool operator==(const Field&) const = default;
};

/// The named, typed fields every record of a shard (and a dataset) has.
struct Schema {
  std::vector<Field> fields;
  bool operator==(const Schema&) const = default;
  /// Index of the field called `name`, or -1.
  int find(const std::string& name) const noexcept;
  /// Throws kInvalidArgument when names are empty, duplicated, too long or badly typed.
  void validate() const;
  /// "jpeg:jpeg label:int64" / "tokens:tokens/uint16/1025"
  std::string to_string() const;
};

enum class Compression : uint32_t { kNone = 0, kZstd = 1 };

/// Format constants (see shards/FORMAT.md).
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kHeaderBlock = 4096;        ///< header size granularity
inline constexpr uint32_t kMaxHeaderSize = 1u << 20;  ///< larger headers are rejected
inline constexpr uint32_t kTrailerSize = 64;
inline constexpr uint32_t kMaxFields = 64;
inline constexpr uint32_t kMaxFieldName = 64;

/// One index entry: where a record lives and how to check and unpack it.
struct RecordLocation {
  uint64_t offset = 0;       ///< of the stored bytes, from the start of the file
  uint32_t stored_size = 0;  ///< bytes on disk (compressed size when compressed)
  uint32_t raw_size = 0;     ///< bytes after decompression (== stored_size if not)
  uint32_t crc = 0;          ///< CRC32C of the stored bytes
  uint32_t flags = 0;        ///< kRecordZstd when this record is zstd-compressed
  std::vector<uint32_t> field_sizes;  ///< raw size of each field, in schema order
};
inline constexpr uint32_t kRecordZstd = 1;

/// A decoded record: field payloads pointing into `buffer` (owned).
struct Record {
  std::vector<uint8_t> buffer;
  std::vector<std::span<const uint8_t>> fields;
  int64_t int64_field(size_t i) const;  ///< throws kDataLoss if field i is not 8 bytes
};

struct ShardWriterOptions {
  Compression compression = Compression::kNone;
  int zstd_level = 3;      ///< 1..19, used when compression is kZstd
  uint32_t align = 1;      ///< record start alignment: 1 (packed) or 4096 (O_DIRECT-padded)
  bool fsync = true;       ///< fsync the file and its directory before rename
};

/// A record packed for storage: stored bytes (compressed or not) and their index
/// entry (offset left 0; the writer assigns it). Packers build these on worker
/// threads and hand them to ShardWriter::add_stored in order.
struct PreparedRecord {
  std::vector<uint8_t> stored;
  RecordLocation location;
};
/// Checks `fields` against `schema` (kInvalidArgument), concatenates, compresses per
/// `options` (kept raw when zstd does not make it smaller) and checksums.
PreparedRecord prepare_record(const Schema& schema,
                              std::span<const std::span<const uint8_t>> fields,
                              const ShardWriterOptions& options);

/// Writes one shard. Records are appended with add(); finish() writes index and
/// trailer, fsyncs and renames `path + ".tmp"` to `path`. Destroying an unfinished
/// writer removes the temporary file.
class ShardWriter {
 public:
  /// Throws kIoError/kResourceExhausted when the temporary file cannot be created.
  ShardWriter(std::string path, Schema schema, ShardWriterOptions options = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  /// Appends a record; `fields` has one payload per schema field. kInt64 fields must be
  /// 8 bytes, kTokens fields a whole number of rows. Throws kInvalidArgument otherwise.
  void add(std::span<const std::span<const uint8_t>> fields);
  /// Appends a record prepared by prepare_record() (with the same schema and options).
  void add_prepared(const PreparedRecord& record);

  /// Bytes the file would have if finished now (records + index + trailer).
  uint64_t projected_size() const noexcept;
  uint64_t record_count() const noexcept;

  struct Summary {
    std::string path;
    uint64_t records = 0;
    uint64_t file_size = 0;
    uint64_t raw_bytes = 0;     ///< sum of records' raw sizes
    uint64_t stored_bytes = 0;  ///< sum of records' stored sizes
    uint32_t index_crc = 0;     ///< identifies this shard's content (in the manifest)
  };
  /// Writes index and trailer, fsyncs, renames into place. Idempotent errors: after a
  /// throw the temporary file is removed.
  Summary finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Parsed header of a shard (what FORMAT.md calls the header block).
struct ShardHeader {
  uint32_t version = 0;
  uint32_t header_size = 0;
  uint32_t align = 1;
  Compression compression = Compression::kNone;
  int32_t zstd_level = 0;
  Schema schema;
};

struct ShardReaderOptions {
  /// Records whose raw size exceeds this are rejected (kResourceExhausted) before any
  /// allocation: a corrupt or hostile size field must not cause a giant allocation.
  uint64_t max_record_bytes = 1ull << 30;
};

class ShardReader {
 public:
  /// Opens and validates header, trailer and index (one read each). Throws
  /// kNotFound/kIoError for OS failures and kDataLoss naming the part that is bad.
  static std::shared_ptr<const ShardReader> open(const std::string& path,
                                                 ShardReaderOptions options = {});
  ~ShardReader();

  const std::string& path() const noexcept { return path_; }
  const ShardHeader& header() const noexcept { return header_; }
  const Schema& schema() const noexcept { return header_.schema; }
  uint64_t record_count() const noexcept { return locations_.size(); }
  const RecordLocation& location(uint64_t i) const { return locations_.at(i); }
  uint64_t file_size() const noexcept { return file_size_; }
  uint64_t data_end() const noexcept { return data_end_; }  ///< == index offset
  uint32_t index_crc() const noexcept { return index_crc_; }
  int fd() const noexcept { return fd_; }  ///< buffered read-only fd, owned by the reader

  /// Reads, checks and unpacks record i. Throws kDataLoss naming shard, record and
  /// reason on checksum mismatch or bad compressed data.
  Record read_record(uint64_t i) const;
  /// Reads the stored (possibly compressed) bytes of record i and checks its CRC.
  std::vector<uint8_t> read_stored(uint64_t i) const;

 private:
  ShardReader() = default;
  std::string path_;
  int fd_ = -1;
  ShardHeader header_;
  std::vector<RecordLocation> locations_;
  uint64_t file_size_ = 0;
  uint64_t data_end_ = 0;
  uint32_t index_crc_ = 0;
  ShardReaderOptions options_;
};

/// Checks the CRC of stored bytes and unpacks them (zstd or plain) into a Record.
/// `where` names the record in error messages ("shard-00001.stk record 17").
/// Used by the loader on bytes read by the IO engine. Throws kDataLoss.
Record unpack_record(const Schema& schema, const RecordLocation& loc,
                     std::span<const uint8_t> stored, const std::string& where,
                     uint64_t max_record_bytes = 1ull << 30);

/// Like unpack_record but writes the raw bytes into `out` (size >= loc.raw_size)
/// without allocating; returns the field spans into `out`.
std::vector<std::span<const uint8_t>> unpack_record_into(
    const Schema& schema, const RecordLocation& loc, std::span<const uint8_t> stored,
    std::span<uint8_t> out, const std::string& where);

/// Parses a header block (exposed for the fuzz target and tests). Throws kDataLoss.
ShardHeader parse_shard_header(std::span<const uint8_t> block, const std::string& where);

}  // namespace stoker
