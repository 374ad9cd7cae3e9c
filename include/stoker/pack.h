// Packers: turn data users already have into stoker datasets, and back out again.
//
// pack_imagefolder (an ImageFolder tree of JPEGs), pack_tokens (a nanoGPT-style flat
// token file or a Megatron-LM .bin/.idx pair) and pack_wds (WebDataset tars) each write
// one dataset directory through DatasetWriter. Reading, validation, CRC32C and zstd run
// on a pool of worker threads while records are appended in one deterministic order, so
// the same input gives byte-identical shards and manifest whatever the thread count.
// extract_dataset writes a dataset's records back out as files. The sample generators
// make synthetic inputs (an ImageNet-like ImageFolder, a Zipf-like token stream) for
// demos, tests and benchmarks; they are deterministic for a given seed.
//
// Every packer writes format version 2 (shards/FORMAT.md): image datasets and
// WebDataset samples keep each record's source in a `__key__` text field.
//
// Errors are stoker::Error (see error.h) naming the offending file and reason: a bad
// input file is kDataLoss (or kInvalidArgument for a malformed request), an OS failure
// kIoError / kNotFound. An output directory that is or lies inside an input (or, for
// directories, holds it) is kInvalidArgument before anything is written. A run stopped
// through `cancel`, or failing, removes every file it wrote and throws; a dataset
// already in the output is untouched until the new one is committed (dataset.h). A
// pack that would write 0 records (everything skipped) is kInvalidArgument. Each function is called from one thread and blocks until done;
// distinct calls may run concurrently on distinct outputs.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/media.h"

#include "stoker/dataset.h"
#include "stoker/shard.h"
#include "stoker/tokenizer.h"

namespace stoker {

/// What a pack (or extract) run did. Printed by the CLI as its summary.
struct PackSummary {
  uint64_t records = 0;       ///< records written
  uint64_t shards = 0;        ///< shard files written
  uint64_t bytes = 0;         ///< total size of the shard files
  uint64_t raw_bytes = 0;     ///< sum of records' uncompressed sizes
  uint64_t stored_bytes = 0;  ///< sum of records' stored (possibly compressed) sizes
  uint64_t input_bytes = 0;   ///< bytes read from the input files
  uint64_t rewritten = 0;     ///< JPEGs rewritten: progressive ones (--baseline), all (fast_crop)
  uint64_t tokens_dropped = 0;  ///< pack_tokens: trailing stream tokens that make no full row
  /// Facts worth a line in the CLI's summary ("dropped 7 trailing tokens ...").
  std::vector<std::string> notes;
  /// Inputs skipped with skip_bad: one "name: reason" line each, in input order.
  std::vector<std::string> skipped;
  double seconds = 0;         ///< wall time of the whole run
};

/// Options shared by the packers.
struct PackOptions {
  uint64_t shard_size = 256ull << 20;  ///< roll to a new shard past this many bytes (>= 4 KiB)
  uint32_t align = 1;                  ///< record alignment in shards: 1 or 4096
  int threads = 0;                     ///< worker threads; 0 = every CPU this process may use (capped by a cgroup quota)
  bool skip_bad = false;               ///< skip (count, list) bad inputs instead of failing
  /// Check that every image decodes (a JPEG's entropy-coded data and fast-crop index
  /// are read, PNG and WebP decoded), so that an image the loader would fail on is
  /// refused (or skipped) at pack time rather than in training. false: header checks only.
  bool check_decode = true;
  /// Replace a dataset already in the output directory. The old one stays whole and
  /// readable until the new one is complete (DatasetWriter), whatever stops the run.
  bool overwrite = false;
  bool progress = false;               ///< draw progress on stderr (only if it is a terminal)
  /// Polled between records; when it reads true the run stops, removes the shard files
  /// it wrote (finished ones and the open .tmp) and throws kCancelled. May be set from a
  /// signal handler (the CLI sets it on SIGINT/SIGTERM). nullptr: never cancelled.
  const std::atomic<bool>* cancel = nullptr;
  /// Write only part `part.index` of `part.count` into `out` (dataset.h, "Parts"; then
  /// commit_parts in commit.h publishes the dataset). The input is cut into `count`
  /// contiguous ranges (PartSpec::range), so the parts' records, in part order, are
  /// those of a one-part pack in the same order: ImageFolder cuts its sorted image list,
  /// WebDataset the tar list as given, tokens the stream's records (record boundaries,
  /// so every part's records are byte-identical to the one-part pack's; a document
  /// crossing a cut is continued in the next part with its doc_starts), text the
  /// documents (whole files and whole JSON lines, in input order; each part's token
  /// stream is cut into rows on its own, so the rows differ from a one-part pack's and
  /// each part drops its own trailing tokens). A part whose range is empty (more parts
  /// than inputs) is kInvalidArgument. `overwrite` does not apply to a part.
  PartSpec part;
  /// Add the records to the dataset already in `out` as its next generation
  /// (DatasetWriterOptions::append): same schema, class names and options (meta) as the
  /// dataset, or kInvalidArgument; a Loader already open keeps reading the generation it
  /// opened. Not with `part` or `overwrite`.
  bool append = false;
  /// Video fields (pack_videofolder, pack_wds): re-encode every video before it is
  /// probed and stored (stoker/media.h, reencode_video: a keyframe every gop frames, a
  /// constant frame rate, optionally scaled), so that a clip decodes at most one GOP of
  /// frames it does not use. Off while gop == 0. A video that fails to re-encode is
  /// kDataLoss naming it and the reason (skipped with skip_bad). Manifest meta
  /// "video_reencode" = its describe(); summary.notes gives the sizes before and after.
  VideoReencodeSpec video_reencode;
};

/// Options of the packers that store images (ImageFolder, WebDataset).
struct ImagePackOptions : PackOptions {
  /// Losslessly rewrite every JPEG with jpeg_for_fast_crop (image.h): crops then decode
  /// only the restart intervals they cover. Implies baseline. The restart interval is
  /// chosen per image so that the rewrite adds at most about 5 % to the file (coarser
  /// at low bit rates); summary.notes gives the JPEGs' total size before and after.
  /// Manifest meta "fast_crop" = "1"; extract gives pixel-identical, not byte-identical, files.
  bool fast_crop = false;
  /// Turn JPEGs whose EXIF Orientation tag is not 1 upright, losslessly (TurboJPEG's
  /// transform; the tag is then set to 1), as PIL's ImageOps.exif_transpose would before
  /// training. Without it the pixels are stored as the camera wrote them and trained on
  /// that way (libjpeg-turbo and torchvision's decode_jpeg ignore EXIF). Where the image's
  /// size makes the exact turn impossible, the partial edge MCU (< 16 px) is dropped;
  /// summary.notes counts both. PNG and WebP orientation is not read.
  bool exif_transpose = false;
};

/// ImageFolder options.
struct ImageFolderPackOptions : ImagePackOptions {
  /// Losslessly rewrite progressive JPEGs as baseline: a progressive file is decoded in
  /// several passes over its coefficients, so it costs the loader more on every epoch.
  bool baseline = false;
  /// Files larger than this are bad inputs (kResourceExhausted unless skip_bad).
  uint64_t max_file_bytes = 1ull << 30;
};

/// Packs SRC/<class>/<...>/<file> into `out` with schema
/// `__key__:text image:image label:int64`. Classes are the sub-directories of `src`
/// sorted byte-wise; label = class index; Manifest::class_names holds their names.
/// Files are taken in byte-wise order of (class, relative path) and stored unchanged
/// (unless `baseline` rewrites a progressive JPEG, or `fast_crop` every JPEG);
/// `__key__` is the path relative to `src` ("cat/0001.png"). As torchvision's
/// ImageFolder, files are taken by extension (jpg jpeg png webp, and bmp ppm pgm tif
/// tiff gif, which are refused as formats stoker does not decode); others
/// (.DS_Store, Thumbs.db, a README) are ignored and counted in a note. The format is
/// then told by the magic bytes; a file that is not JPEG, PNG or WebP, or that does
/// not decode (check_decode), is kDataLoss naming it and the reason, or skipped with
/// skip_bad. Regular files at the top level of `src` are ignored. Throws kInvalidArgument when `src` has no
/// class directories or `out` is inside `src`.
PackSummary pack_imagefolder(const std::string& src, const std::string& out,
                             const ImageFolderPackOptions& options = {});

/// Packs a tree of videos by class, SRC/<class>/<...>/<video> (mp4, mkv, webm, mov,
/// avi; other files are ignored and counted in the notes), into a dataset of
/// `__key__:text video:video label:int64` records. Each video is probed with libavformat
/// and, with check_decode, decoded in full, and stored behind its media index
/// (stoker/media.h); one that cannot be used is kDataLoss naming the file and the
/// reason (a codec without a decoder included), or skipped with skip_bad.
/// kUnavailable in a build without libav.
PackSummary pack_videofolder(const std::string& src, const std::string& out, const PackOptions& options = {});

/// Token options.
struct TokensPackOptions : PackOptions {
  /// Element type of a flat token file. For a Megatron .idx pair the index's dtype is
  /// used; kNone accepts it, anything else must match.
  DType dtype = DType::kUint16;
  uint32_t seq_len = 1024;       ///< training sequence length N (>= 1); rows hold N+1 tokens
  uint32_t rows_per_record = 0;  ///< rows per record; 0 = as many as fit in ~256 KiB raw
  int zstd_level = 0;            ///< 0 = store raw; 1..19 = zstd per record
  /// Flat files: the end-of-document token id (nanoGPT style: a document ends with its
  /// EOS, which belongs to it). Set, the dataset stores document boundaries (below);
  /// an id that never occurs in the stream is kInvalidArgument.
  /// A Megatron index gives them itself, so it takes no eos.
  std::optional<int64_t> eos;
};

/// Packs a token stream into `out` with schema `tokens:tokens` (Field kind kTokens,
/// dtype, seq_len N). Row r holds stream tokens [r*N, r*N + N] (N+1 tokens), so a
/// stream of T tokens gives floor((T-1)/N) rows. The up to N-1 trailing tokens that
/// make no full row are dropped — like DistributedSampler's drop_last, nothing is
/// invented to fill a row — and said so: summary.tokens_dropped, a note, and manifest
/// meta "tokens_dropped". Rows are grouped `rows_per_record` to a record (the last
/// record may hold fewer). Records have no `__key__`: a record is a chunk of rows cut
/// from one stream, not a source item; its rows' stream positions identify it.
/// `file` is either a flat little-endian array of `dtype` (nanoGPT's train.bin) or a
/// Megatron-LM .bin or .idx path whose sibling .idx starts with "MMIDIDX\0\0"; the
/// Megatron sequences are read in index order as one flat stream.
/// Manifest meta: "seq_len", "dtype", "tokens" (tokens in the source stream), "rows",
/// "rows_per_record", "tokens_dropped" and "source" ("flat:<file name>" or
/// "megatron:<.bin name>").
/// Document boundaries (with `eos`, and always from a Megatron index): a second field
/// `doc_starts` (vararray int32) per record, the positions where documents start
/// relative to the record's first token, the first one <= 0 (shards/FORMAT.md); meta
/// "documents" (their count) and "eos". They feed the Loader's position_ids, loss_mask,
/// doc_ids and cu_seqlens.
PackSummary pack_tokens(const std::string& file, const std::string& out,
                        const TokensPackOptions& options = {});

/// Text options.
struct TextPackOptions : PackOptions {
  std::string tokenizer;                 ///< the tokenizer file (open_tokenizer: .tiktoken, .json, .model)
  TokenizerOptions tokenizer_options;    ///< its pattern and specials, for a tiktoken file of no known encoding
  /// Prepended / appended to every document: a decimal id (below the vocabulary size)
  /// or a token's text ("<|endoftext|>", "<s>"), as Tokenizer::token_id finds it.
  std::optional<std::string> bos, eos;
  std::string jsonl_key = "text";        ///< JSON Lines: the key holding each document's text
  std::string text_field;                ///< a dataset input: its text field ("": its one text field besides __key__)
  /// Special tokens recognised inside documents (default none: a document's text that
  /// looks like a special token is tokenised as the text it is).
  SpecialTokens allowed_special;
  uint32_t seq_len = 1024;               ///< as TokensPackOptions
  uint32_t rows_per_record = 0;          ///< as TokensPackOptions
  int zstd_level = 0;                    ///< as TokensPackOptions
};

/// Tokenises text into `out`, a token dataset exactly as pack_tokens writes from a
/// Megatron pair (schema `tokens:tokens` + `doc_starts`: every document's boundaries),
/// so the Loader's tokens, targets, position_ids, loss_mask, doc_ids and cu_seqlens work
/// on it as on any token dataset. Inputs, in the order given: `.txt` files (one document
/// per file, the whole file), `.jsonl`/`.ndjson` files (one document per non-blank line:
/// the string under jsonl_key), WebDataset tars (each `.txt` member a document, in tar
/// order; any compression libarchive reads), stoker datasets (a directory holding a
/// MANIFEST: each record's text field a document, in record order), or directories of
/// files (their files in byte-wise path order). Each document becomes [bos] + its tokens + [eos]; documents follow one
/// another in one stream cut into rows as pack_tokens cuts it (the trailing tokens that
/// make no full row dropped, and said so). Tokens are uint16 when the vocabulary fits,
/// else int32. The text is tokenised on `threads` workers (JSON Lines cut into pieces of
/// whole lines), in a deterministic order, into a temporary Megatron .bin/.idx pair in a
/// hidden sibling of `out` (removed whatever happens; it needs the disk for the token
/// stream once more), which pack_tokens then writes; manifest meta "source" is
/// "megatron:text.bin". Errors: a missing tokenizer or input is kNotFound; a file of
/// another kind, a bad --bos/--eos, a JSON line that is not an object, lacks the key or
/// holds no string there is kInvalidArgument naming the file and line.
PackSummary pack_text(const std::vector<std::string>& inputs, const std::string& out,
                      const TextPackOptions& options = {});

/// Options of pack_samples.
struct SamplesPackOptions : PackOptions {
  std::string tokens_key = "tokens";  ///< the key holding each sample's token ids (a list of integers)
  std::string mask_key;               ///< "": no mask; else the key of a list of 0/1 as long as the ids
  DType dtype = DType::kInt32;        ///< uint16, uint32, int32 or int64: every id must fit
  int zstd_level = 0;                 ///< 0 = store raw; 1..19 = zstd per record
};

/// Packs fine-tuning samples given as token lists into `out`, one record per sample
/// (schema `__key__:text tokens:vararray/DTYPE` + `loss_mask:vararray/uint8` with a
/// mask key), for the Loader's packed samples (LoaderOptions::seq_len). Inputs, in the
/// order given: JSON Lines files (one sample per non-blank line, an object holding the
/// keys), or directories of them. A record's `__key__` is "FILE:LINE". Lines are parsed
/// on `threads` workers; records come out in input order. Errors name the file and line:
/// a line that is not a JSON object, lacks a key, holds something other than a list of
/// integers there, an id the dtype cannot hold, a mask of another length or with a value
/// other than 0 and 1.
PackSummary pack_samples(const std::vector<std::string>& inputs, const std::string& out,
                         const SamplesPackOptions& options = {});

/// WebDataset options.
struct WdsPackOptions : ImagePackOptions {
  /// Class names stored in the manifest (e.g. read from a --classes file); labels must
  /// then be below their count. Empty = none.
  std::vector<std::string> class_names;
  uint64_t max_member_bytes = 1ull << 30;  ///< larger tar members are rejected
  /// Skip (count and list in summary.skipped) samples that lack a member other samples
  /// have, instead of failing on the first.
  bool skip_incomplete = false;
};

/// Packs WebDataset tars (.tar, or compressed: .tar.gz, .tar.zst, .tar.xz, .tar.bz2,
/// detected from the bytes), in the order given, into `out`. Consecutive members
/// sharing a key (the member path up to the first '.' of its file name) form a sample;
/// each extension (the rest of the name, lower-cased, "seg.png" kept whole) becomes a
/// field named after it (characters outside [A-Za-z0-9_.-] turned to '_'; spellings of
/// one format are one field: `jpeg` is `jpg`, `tiff` is `tif`), mapped the WebDataset way:
///   jpg jpeg png webp (and any extension ending in .jpg/.png/...) -> image (the
///       format is sniffed from the bytes and the header checked);
///   cls -> int64 (decimal text; below class_names.size() when class names are given);
///   txt json -> text (UTF-8 checked);
///   npy -> ndarray when every sample's array has one shape, else vararray when the
///       shapes differ only in their first dimension (dtype equal everywhere);
///   anything else -> bytes.
/// `__key__` holds the key. Fields are `__key__` and then the extensions in byte order.
///
/// The schema is discovered in a first pass over the tars (member names and .npy
/// headers only; data is skipped — by seeking in a plain tar, by decompressing in a
/// compressed one, which costs a second decompression), so nothing is written before it is known to fit
/// every sample: npy shapes that fit neither rule are kInvalidArgument naming both
/// keys and shapes, and a sample lacking a member others have is kInvalidArgument
/// naming the key and the member (skip_incomplete skips such samples instead). The
/// second pass reads and checks every member; a bad one is kDataLoss naming tar, key
/// and member (skipped with skip_bad); images are checked to decode (check_decode).
/// Malformed or truncated tars are kDataLoss naming tar and offset; with skip_bad the
/// samples before the damage are packed and the rest of that tar is a skip entry.
PackSummary pack_wds(const std::vector<std::string>& tars, const std::string& out,
                     const WdsPackOptions& options = {});

/// A parsed Megatron-LM MMapIndexedDataset index (.idx).
struct MegatronIndex {
  uint64_t version = 0;
  uint8_t dtype_code = 0;   ///< Megatron's code: 1 uint8 ... 4 int32, 5 int64, 8 uint16
  DType dtype = DType::kNone;  ///< stoker's equivalent (kNone when unsupported)
  std::vector<int32_t> sizes;     ///< tokens per sequence
  std::vector<int64_t> pointers;  ///< byte offset of each sequence in the .bin
  std::vector<int64_t> doc_idx;   ///< sequence index at which each document starts
};
/// Reads and validates `idx_path`. When `bin_size` is given, every sequence must lie
/// inside a .bin of that many bytes. Throws kDataLoss naming the file and the problem
/// (bad magic, unsupported version or dtype, counts larger than the file, pointers
/// out of range, decreasing document index), kNotFound / kIoError for OS failures.
MegatronIndex read_megatron_index(const std::string& idx_path, int64_t bin_size = -1);

/// Options of extract_dataset.
struct ExtractOptions {
  int threads = 0;        ///< 0 = every CPU this process may use
  bool progress = false;  ///< draw progress on stderr (only if it is a terminal)
  /// Skip (count, list in summary.skipped) records whose checksum or layout is bad,
  /// instead of failing on the first. Not for token datasets: a gap would break the
  /// stream rebuilt from their rows.
  bool skip_bad = false;
  /// As PackOptions::cancel: stop between records and throw kCancelled; nothing is
  /// left in `out`.
  const std::atomic<bool>* cancel = nullptr;
};

/// Writes the records of the dataset at `dataset` (a directory with a MANIFEST) under
/// `out` (created), so each traces back to its source:
///   - v2 datasets with a `__key__`: ImageFolder packs (image + label + key) as
///     out/<key> (the source's relative path, e.g. out/cat/0001.png); other schemas,
///     WebDataset's way, as out/<key>.<field> per field (out/a/0001.jpg, .cls as
///     decimal text, .npy as a NumPy file with its shape, text as UTF-8, float
///     scalars as decimal text). Keys are checked to stay inside `out`;
///   - v1 image datasets (a jpeg field and an int64 label) as
///     out/<class name or label>/<global index, 8+ digits>.jpg, stored bytes unchanged;
///   - a --fast-crop dataset's JPEGs are the rewritten ones: pixel-identical to the
///     originals, not byte-identical;
///   - token datasets as out/tokens.bin, the flat stream rebuilt from the rows (row 0
///     whole, then each next row without its first token, checked to overlap);
///   - other v1 schemas as out/<index>.<field> per field.
/// Never writes outside `out`: class names or keys that are not plain relative paths
/// are kDataLoss, and existing symlinks are not followed. `out` must not be, or lie
/// inside, the dataset directory, and must be absent or an empty directory
/// (kInvalidArgument). The output is written in a hidden sibling directory
/// (`.OUT.extract.pending-PID`) and renamed to `out` when complete: a failed, cancelled
/// or killed extract leaves no partial `out` (a later extract removes a killed run's
/// sibling). A record whose checksum fails is kDataLoss naming its index and
/// `__key__` (skipped with skip_bad). summary.records counts records written,
/// summary.bytes bytes written.
PackSummary extract_dataset(const std::string& dataset, const std::string& out,
                            const ExtractOptions& options = {});

// --- synthetic inputs ------------------------------------------------------------

struct SampleImageFolderOptions {
  uint64_t images = 1000;         ///< total images
  uint32_t classes = 10;          ///< class directories (class_0000 ...)
  uint64_t seed = 0;              ///< same seed -> byte-identical files
  int quality = 90;               ///< JPEG quality
  double progressive_frac = 0.004;  ///< fraction written as progressive JPEGs
  int threads = 0;                ///< 0 = every CPU this process may use
  bool progress = false;
};
/// Writes an ImageNet-like ImageFolder under `out`: textured JPEGs (baseline 4:2:0)
/// mostly 500x375 or 375x500, some smaller and larger, ~85 KiB on average.
/// Returns records = images, input_bytes = bytes of JPEG written.
PackSummary make_sample_imagefolder(const std::string& out, const SampleImageFolderOptions& options = {});

struct SampleWdsOptions {
  uint64_t samples = 1000;   ///< samples in all
  uint64_t per_tar = 250;    ///< samples per tar (shard-000000.tar, ...)
  uint32_t classes = 10;     ///< class labels 0..classes-1; mask values 1..classes (<= 255)
  uint32_t features = 16;    ///< length of each sample's float32 feature vector
  uint64_t seed = 0;         ///< same seed -> byte-identical files
  int quality = 90;          ///< JPEG quality
  int threads = 0;           ///< 0 = every CPU this process may use
  bool progress = false;
};
/// Writes WebDataset tars under `out` (ustar, libarchive) whose samples `sample_NNNNNNNN`
/// hold five members, the multi-field case `pack wds` maps by extension: .jpg (an image
/// as make_sample_imagefolder draws it), .png (an 8-bit gray segmentation mask of the
/// same size: filled ellipses of values 1..classes on 0), .cls (the decimal class),
/// .txt (a caption of 6-16 words, UTF-8) and .npy (float32 [features]).
/// Returns records = samples, input_bytes = bytes of members written.
PackSummary make_sample_wds(const std::string& out, const SampleWdsOptions& options = {});

struct SampleTokensOptions {
  uint64_t tokens = 1 << 20;  ///< stream length
  uint32_t vocab = 50257;     ///< token values are < vocab (<= 65536 for uint16)
  DType dtype = DType::kUint16;  ///< kUint16 or kUint32
  uint64_t seed = 0;
};
/// Writes a flat token file: a Zipf-like stream with repeated phrases, so it
/// compresses roughly like tokenised text. Deterministic from the seed.
PackSummary make_sample_tokens(const std::string& path, const SampleTokensOptions& options = {});

/// The header check every packer makes on an image field's value, for a writer of its
/// own (the Python stoker.Writer): "" when `bytes` look like a decodable image, else why
/// not ("not an image (JPEG, PNG or WebP magic bytes expected)", "truncated PNG", ...).
/// The format is sniffed from the magic bytes (never a file name); then a JPEG's marker
/// segments up to its first SOF and its TurboJPEG header, a PNG's IHDR chunk, a WebP's
/// RIFF size and first chunk are checked. Cheaper than a decode: a header that passes
/// may still hide corrupt data (PackOptions::check_decode). Thread-safe.
std::string image_header_problem(std::span<const uint8_t> bytes);

}  // namespace stoker
