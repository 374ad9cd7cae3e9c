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
// Version 2 adds typed fields (image, float scalars, fixed-shape and variable-length
// arrays, text) and a `__key__` text field naming each record's source; version-1
// shards (bytes, jpeg, int64, tokens) are still read exactly as before.
//
// Threading: a ShardWriter is used by one thread. A ShardReader is immutable after
// open(): read_record() and the const accessors may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/image.h"  // ImageFormat: what a kImage field holds

namespace stoker {

/// What a field holds. The kind tells readers how to interpret the bytes and how big
/// they must be (readers check every index entry against it; see Field::check_size).
/// Values are the on-disk codes: v1 shards hold kinds 0..3, v2 shards any of them.
enum class FieldKind : uint8_t {
  kBytes = 0,    ///< opaque bytes, any size (0 included)
  kImage = 1,    ///< an image file's bytes as found in the source: JPEG, PNG or WebP,
                 ///< told apart by magic bytes (image_format_of). v1 shards hold JPEG only.
  kJpeg = kImage,  ///< the v1 name of kImage
  kInt64 = 2,    ///< one little-endian int64 (e.g. a class label): exactly 8 bytes
  kTokens = 3,   ///< n >= 1 rows of (seq_len + 1) tokens of `dtype`, row-major, little-endian;
                 ///< row r covers stream positions [r*seq_len, r*seq_len + seq_len] so
                 ///< inputs are row[0:seq_len] and next-token targets row[1:seq_len+1]
  kFloat32 = 4,  ///< one little-endian IEEE float32: exactly 4 bytes (v2)
  kFloat64 = 5,  ///< one little-endian IEEE float64: exactly 8 bytes (v2)
  kNdarray = 6,  ///< a fixed-shape array: prod(shape) elements of `dtype`, C order,
                 ///< little-endian; exactly prod(shape) * dtype_size bytes (v2)
  kVarArray = 7, ///< an array [n, *shape] with n >= 0 varying per record (e.g. boxes
                 ///< [n, 4]): n * prod(shape) elements of `dtype`, C order, little-endian;
                 ///< the size is a whole multiple of prod(shape) * dtype_size, n = size / that (v2)
  kText = 8,     ///< UTF-8 text, any length (0 included), no terminator; packers validate
                 ///< the encoding (v2)
  kVideo = 9,    ///< a video file (mp4, mkv, webm, mov, avi) behind its media index:
                 ///< [index][file bytes] (stoker/media.h, FORMAT.md "Media fields") (v2)
  kAudio = 10,   ///< an audio file (wav, flac, mp3, ogg, opus, m4a), laid out as kVideo (v2)
};

/// Element type of token rows and arrays (on-disk codes; 1..4 exist in v1).
enum class DType : uint8_t {
  kNone = 0,
  kUint16 = 1,
  kUint32 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kUint8 = 5,
  kInt8 = 6,
  kInt16 = 7,
  kFloat16 = 8,  ///< IEEE half
  kFloat32 = 9,
  kFloat64 = 10,
  kBool = 11,    ///< one byte, 0 or 1
};
inline constexpr uint8_t kMaxDType = 11;
inline constexpr uint8_t kMaxFieldKind = 10;

size_t dtype_size(DType t) noexcept;          ///< 0 for kNone
const char* dtype_name(DType t) noexcept;     ///< "uint16", "float32", "bool", ... (numpy's names)
DType dtype_from_name(const std::string& s);  ///< throws kInvalidArgument naming the choices
/// "bytes", "image", "int64", "tokens", "float32", "float64", "ndarray", "vararray", "text",
/// "video", "audio".
const char* field_kind_name(FieldKind k) noexcept;
/// The names above; "jpeg" (the v1 manifest's name) is kImage. Throws kInvalidArgument.
FieldKind field_kind_from_name(const std::string& s);

/// The name of the field that carries each record's source key in v2 datasets
/// (kText): the WebDataset key, the ImageFolder relative path, or the Writer's key.
inline constexpr const char* kKeyField = "__key__";
inline constexpr uint32_t kMaxDims = 8;  ///< ndarray / vararray dimensions in a schema

struct Field {
  std::string name;        ///< 1..64 bytes of [A-Za-z0-9_.-]
  FieldKind kind = FieldKind::kBytes;
  DType dtype = DType::kNone;  ///< kTokens, kNdarray, kVarArray only
  uint32_t seq_len = 0;        ///< kTokens only: training sequence length (row = seq_len+1)
  /// kNdarray: the full shape (0..kMaxDims dims, each >= 1; [] is one element);
  /// kVarArray: the inner shape after the variable first dimension (0..kMaxDims-1 dims).
  std::vector<uint32_t> shape = {};
  bool operator==(const Field&) const = default;

  /// Exact payload size for fixed-size kinds (int64, float32, float64, ndarray), else 0.
  uint64_t fixed_size() const noexcept;
  /// Payload sizes must be a whole multiple of this: a token row, a var-array row
  /// (prod(shape) * dtype size); 1 for bytes, image, text; fixed_size() for fixed kinds.
  uint64_t unit_size() const noexcept;
  /// Empty when a payload of `size` bytes fits this field, else why not
  /// ("int64 field 'label' has 7 bytes, not 8").
  std::string check_size(uint64_t size) const;
};

/// The named, typed fields every record of a shard (and a dataset) has.
struct Schema {
  std::vector<Field> fields;
  bool operator==(const Schema&) const = default;
  /// Index of the field called `name`, or -1.
  int find(const std::string& name) const noexcept;
  /// Index of the `__key__` field, or -1 (v1 datasets have none).
  int key_field() const noexcept { return find(kKeyField); }
  /// Throws kInvalidArgument naming the field when names are empty, duplicated, too
  /// long or badly typed, a dtype/seq_len/shape is missing, stray or out of range, a
  /// fixed size overflows 4 GiB, or `__key__` is not a text field.
  void validate() const;
  /// The oldest format version that can hold this schema: 1 when every field is
  /// bytes/image/int64/tokens with a v1 dtype, else 2.
  uint32_t min_version() const noexcept;
  /// "image:image label:int64" / "tokens:tokens/uint16/1025" / "emb:ndarray/float32/512"
  /// / "boxes:vararray/float32/*x4"
  std::string to_string() const;
};

enum class Compression : uint32_t { kNone = 0, kZstd = 1 };

/// Format constants (see shards/FORMAT.md).
inline constexpr uint32_t kShardVersion = 2;     ///< what writers write by default
inline constexpr uint32_t kShardVersionMin = 1;  ///< oldest version readers accept
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
  /// Field i's bytes as text (no copy; valid while the record lives).
  std::string_view text_field(size_t i) const;
};

/// The record's source key (its `__key__` field), or "" when the schema has none (v1).
/// `fields` are a record's payloads in schema order, as unpack_record_into returns them.
std::string_view record_key(const Schema& schema, std::span<const std::span<const uint8_t>> fields) noexcept;
inline std::string_view record_key(const Schema& schema, const Record& r) noexcept {
  return record_key(schema, r.fields);
}

struct ShardWriterOptions {
  Compression compression = Compression::kNone;
  int zstd_level = 3;      ///< 1..19, used when compression is kZstd
  uint32_t align = 1;      ///< record start alignment: 1 (packed) or 4096 (O_DIRECT-padded)
  bool fsync = true;       ///< fsync the file and its directory before rename
  /// Format version to write: 2, or 1 for a schema that v1 can hold (min_version() == 1)
  /// so that older readers can open it.
  uint32_t version = kShardVersion;
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

  /// Appends a record; `fields` has one payload per schema field, each of a size the
  /// field's kind allows (Field::check_size). Throws kInvalidArgument otherwise.
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

}  // namespace stoker
