// The Loader: a dataset in, a stream of ready batches out.
//
// Stages, each on its own named threads:
//   stoker-io     images: walks this rank's schedule (order.h), plans aligned, coalesced
//                 reads of the records a batch needs and runs them on the IO engine
//                 (io.h). Tokens: reads the compressed records (chunks of rows) of the
//                 shuffle windows the workers have taken and of the next one, ahead;
//   stoker-dec/N  images: check each record's CRC, unpack it, decode and transform the
//                 JPEG (image.h) straight into the batch's slot. Tokens: the workers
//                 schedule themselves a shuffle window at a time (no hand-off per batch
//                 or per record, which at tens of microseconds a batch would cost more
//                 than the work): a worker takes the next window, claims the slots of
//                 the batches that draw from it, decompresses each of its records once
//                 per epoch and copies the record's rows into those batches while they
//                 are in its cache. When the free slots cannot hold the window's batches
//                 (a small ring, a slow consumer, a wide window) the window is kept
//                 instead: every worker helps decompress its records into a shared
//                 buffer and fill its batches as slots free up (two such at a time);
//   consumer      next() hands out the next batch of the epoch, in order.
// A fixed ring of `slots` batch slots bounds memory: batch k starts only when a slot is
// free, so the footprint is set by the ring (and, for tokens, by a decompressed record
// per worker plus at most two kept windows of them), not by the dataset.
// Output is deterministic: for a seed and epoch, batch k holds the same samples in the
// same order with the same augmentation draws, whatever the thread count and timing.
//
// Every stage counts busy and waiting time; stats() returns them, and for a remote
// dataset the network stage too (NetworkStats: bytes and requests fetched, requests in
// flight, the readers' wait on fetches, the cache's hit rate and fill).
//
// Threading: a Loader is driven by one consumer thread (next(), set_epoch(), state());
// a second thread calling next(), try_next(), set_epoch() or load_state() while one of
// them runs gets kInvalidArgument, never an interleaving. stats() and close() may be
// called from any thread. Batches may be released on any thread and may outlive the
// Loader.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/batch.h"
#include "stoker/buckets.h"
#include "stoker/image.h"
#include "stoker/io.h"
#include "stoker/media.h"
#include "stoker/order.h"
#include "stoker/remote.h"
#include "stoker/shard.h"
#include "stoker/feed_stats.h"
#include "stoker/stats.h"
#include "stoker/tokenizer.h"

namespace stoker {

/// What to do with a record that cannot be read, checked or decoded.
enum class OnError {
  kError,  ///< stop: next() throws the error, naming shard, record and reason (default)
  /// Drop it, count it (stats().skipped), log it once. On one rank batches stay full
  /// (filled from the following samples); on several, the batch goes out shorter, so
  /// that every rank delivers the same number of batches and a resume stays exact.
  kSkip,
};
const char* on_error_name(OnError e) noexcept;
OnError on_error_from_name(const std::string& s);  ///< "error" | "skip"

/// A packed sample longer than a row (LoaderOptions::seq_len).
enum class LongSamples {
  kError,     ///< kInvalidArgument when the Loader opens, naming the record and its length
  kTruncate,  ///< its first seq_len tokens (the rest never delivered; counted in stats())
  kSplit,     ///< full rows of seq_len, then the remainder packed like any sample
};
const char* long_samples_name(LongSamples l) noexcept;
LongSamples long_samples_from_name(const std::string& s);  ///< "error" | "truncate" | "split"

/// How one field of the records becomes part of a batch (LoaderOptions::fields). Every
/// field has a default: the first image field gets LoaderOptions::transform, every other
/// field comes as stored (below). kInvalidArgument names the field and the parameter of
/// a spec that cannot be used.
struct FieldTransform {
  enum class Kind {
    /// Image: RandomResizedCrop(size, scale, ratio) + a horizontal flip with flip_prob,
    /// fused into the decode (JPEG: only the crop's MCUs are decoded).
    kRandomResizedCrop,
    /// Image: resize the shorter side to `resize` (0: round(size / 0.875)), then take
    /// the center size x size (torchvision Resize + CenterCrop).
    kCenterCrop,
    /// An image-like field (a segmentation mask): exactly the crop, resize and flip drawn
    /// for the image field `follow`, resampled with `interpolation`, `channels` deep
    /// (1: the stored gray level or palette index; 3: RGB). Output uint8 [B, S, S, C].
    kFollow,
    /// As stored: images and bytes as byte strings, text as UTF-8 strings, scalars as
    /// [B], ndarrays as [B, *shape], variable-length arrays as values + offsets; video
    /// and audio as their files' bytes (without the media index).
    kAsStored,
    /// Video: clips decoded, cropped and resized as `video` says (stoker/media.h
    /// VideoClipSpec): uint8 [B, T, H, W, 3] and NAME.pts float64 [B, T] (seconds).
    kVideoClip,
    /// Audio: windows (or whole tracks) resampled as `audio` says (stoker/media.h
    /// AudioClipSpec): float32 [B, C, seconds * rate] and NAME.start float64 [B].
    kAudioClip,
  };
  Kind kind = Kind::kAsStored;
  int size = 224;                              ///< output is size x size, 1..8192
  float scale_min = 0.08f, scale_max = 1.0f;   ///< RandomResizedCrop area bounds, 0 < min <= max <= 1
  float ratio_min = 3.f / 4, ratio_max = 4.f / 3;  ///< aspect bounds, 0 < min <= max
  float flip_prob = 0.5f;                      ///< in [0, 1]
  int resize = 0;                              ///< kCenterCrop: short side before the crop, >= size (0: size / 0.875)
  std::string follow;                          ///< kFollow: the image field whose draw this one takes
  Interpolation interpolation = Interpolation::kNearest;  ///< kFollow
  int channels = 1;                            ///< kFollow: 1 or 3
  VideoClipSpec video;                         ///< kVideoClip
  AudioClipSpec audio;                         ///< kAudioClip
};

struct LoaderOptions {
  std::string path;             ///< dataset directory, or an http(s):// / s3:// URL of one
  /// A URL is read through a node-local ShardCache (include/stoker/remote.h) under
  /// cache_dir (required with a URL): each run tells it this rank's shards in the order
  /// it reads them, and a shard stays pinned only while the loader reads or decodes
  /// its records (plus idle ones while the room allows); the rest may be evicted, least
  /// recently used first, and are fetched again when read again. cache_limit: bytes of
  /// shards kept (0: the dataset's size); below the largest shard it is
  /// kInvalidArgument at construction, and a limit below the prefetch window shrinks the
  /// window. README "Remote datasets" says what each order kind costs with a small one.
  std::string cache_dir;
  uint64_t cache_limit = 0;
  unsigned cache_prefetch = 4;  ///< shards fetched ahead of the one being read
  RemoteOptions remote;         ///< connections, part size, S3 profile, retries, timeout (retry budget)
  /// How a URL's records reach the loader. kShards: whole shards through the cache, as
  /// above. kRecords: each record by its own ranged GET (io.queue_depth of them in
  /// flight), nothing but the shard indexes kept (in memory): a global shuffle of a
  /// dataset the cache cannot hold then fetches each record once per epoch instead of
  /// about a shard per record. Datasets of records only (token data: kInvalidArgument).
  /// kAuto: kRecords when the order kind is shuffled, the data is records and
  /// cache_limit holds fewer than all of the dataset's shards; kShards otherwise.
  RemoteReads remote_reads = RemoteReads::kAuto;
  /// A weighted mixture instead of `path`: these datasets, drawn in proportion to
  /// `weights` (one each, > 0) as MixtureOrder (stoker/mixture.h) says — per seed and
  /// epoch, the same sequence for every world size, resumable from state(). An epoch is
  /// `samples_per_epoch` samples (0: the sources' sizes summed); a source that runs out
  /// within it starts a new, reshuffled epoch of its own. Batches hold the sources'
  /// outputs that every source has (each must agree across them: kind, dtype, shape;
  /// text, bytes and ragged ones, `__key__` too, as values + offsets) plus "source"
  /// int64 [B], which source each sample came from; "index" is the sample's index in
  /// its source. An output that only some sources have is left out, with a warning
  /// (warning_sink) naming it and the sources without it. Every source is read by a
  /// loader of its own with these options (its own order, seeded from `order.seed` and
  /// its place in the list). OnError::kError only.
  std::vector<std::string> sources;
  std::vector<double> weights;
  /// Per source (none, or one map per source): its outputs' names in the mixture, so
  /// sources whose fields are named apart mix ({"jpg": "image"} for one, {"png":
  /// "image"} for the other). A name the source does not deliver is kInvalidArgument.
  /// Sources that share no output but "index" and "__key__" are kInvalidArgument.
  std::vector<std::map<std::string, std::string>> source_fields;
  uint64_t samples_per_epoch = 0;
  uint64_t batch_size = 64;     ///< per rank, >= 1
  /// Per-field transforms by field name (see FieldTransform for the defaults). Batch
  /// tensors are named after the fields; version-1 datasets keep the names "image" and
  /// "label". Each batch also has "index" (the samples' global record numbers).
  std::map<std::string, FieldTransform> fields;

  // --- images ---
  ImageTransform transform;                    ///< the first image field's, unless `fields` names it; kTrain, 224
  /// transform kNone: the first image field (unless `fields` names it) comes as stored,
  /// as byte strings; false: it is read and checked only (which measures storage alone).
  bool untransformed_image_as_stored = false;
  PixelFormat pixel_format = PixelFormat::kU8HWC;  ///< CPU-side output layout/type
  float mean[3] = {0.485f, 0.456f, 0.406f};    ///< for float pixel formats
  float std[3] = {0.229f, 0.224f, 0.225f};

  /// Aspect-ratio buckets (stoker/buckets.h: the list, the nearest-aspect rule, the
  /// order). Enabled: the first field, in schema order, that is a decoded image (with
  /// the fields that Follow it) or a video cut by a kVideoClip transform is resized to
  /// cover its batch's bucket and cropped to it — at random for kTrain (and a flip with
  /// flip_prob), centred for kEval, drawn from (seed, epoch, sample) — so its tensor is
  /// [B, h, w, 3] with the bucket's h x w, varying from batch to batch, and "bucket"
  /// int64 [B] gives the bucket's index in resolve_buckets(buckets). A clip's frames
  /// likewise, [B, T, h, w, 3] ([B, clips, T, h, w, 3]): VideoClipSpec::Crop::kRandom
  /// places one window (and flip) for the whole clip, uniformly, its scale and ratio
  /// unused; kCenter centres it; kNone stretches the whole frame to the bucket; the
  /// spec's height and width are unused. Every global step (batch_size × world size
  /// samples) is one bucket; drop_last drops each bucket's last partial step, else it is
  /// completed with that bucket's first samples of the epoch (repeats; "index" shows
  /// them). Each record's size is read when the Loader opens (bucket_plan.h), nothing
  /// decoded: an image's from its header, a video's upright size (width, height and
  /// rotation) from the media index stored at pack time. The order is a function of seed, epoch
  /// and the global batch: the same for every world size of one global batch, resumable
  /// at any step (state() records the global batch; a resume with another is
  /// kInvalidArgument). Local datasets of records only, OnError::kError only, no mixture.
  BucketOptions buckets;

  // --- tokens (schema with a tokens field) ---
  bool targets = false;               ///< also deliver `targets` (inputs shifted by one)
  ElemType token_type = ElemType::kUint16;  ///< output element type; kUint16/kUint32/kInt32/kInt64
  bool token_type_is_stored = true;   ///< true: deliver the stored dtype (ignore token_type)
  // Document outputs, for datasets packed with boundaries (pack_tokens with --eos, or
  // from a Megatron index; kInvalidArgument naming the dataset otherwise). Each is
  // aligned with `tokens` (input i's target is targets[i]):
  bool position_ids = false;  ///< "position_ids" int32 [B, seq_len]: position in its document, 0 after each EOS
  /// position_ids of a document begun in an earlier row count from 0 at the row's first
  /// token (Megatron's --reset-position-ids: every position < seq_len, as absolute
  /// position embeddings of seq_len entries need). false: its position in the document.
  bool position_ids_from_row_start = false;
  bool loss_mask = false;     ///< "loss_mask" uint8 [B, seq_len]: 0 where the target starts another document, else 1
  bool doc_ids = false;       ///< "doc_ids" int32 [B, seq_len]: the token's document within its row, from 0
  /// "cu_seqlens" int32 [D + 1], D varying per batch: 0, then the cumulative lengths of
  /// the rows' pieces of documents over the flattened [B * seq_len] inputs (a document
  /// cut by a row's end counts once per row); the last entry is B * seq_len
  /// (FlashAttention's varlen cu_seqlens). TensorKind::kRagged: the values are the whole
  /// array, and sample j's cumulative ends are entries [offsets[j], offsets[j + 1])
  /// (sample 0 also holds the leading 0). Kept on the host by the Stager.
  bool cu_seqlens = false;

  // --- packed samples (records whose `tokens` field is a variable-length array) ---
  /// > 0: samples of varying length (fine-tuning conversations) are packed into rows of
  /// seq_len tokens, and a batch is B such rows, with the token data's outputs: tokens,
  /// targets, index (the row), and on request position_ids, loss_mask, doc_ids and
  /// cu_seqlens, per sample instead of per document. The records need a 1-D integer
  /// var-array field "tokens"; a uint8/bool var-array "loss_mask" of the same length,
  /// when the records have one, marks which tokens are trained on (as targets: loss_mask
  /// output i is the stored mask of target i), and the sample's end always masks.
  /// Which samples share a row is fixed per seed when the Loader opens (best-fit
  /// decreasing within windows of pack_window samples of a seed-keyed shuffle of them,
  /// read from the shard indexes: nothing is read to plan); the rows' order is the epoch
  /// order (`order`), so determinism, world sizes, resume and drop_last work as for
  /// token rows. A row's unused end is padding: pad_id tokens and targets, loss_mask 0,
  /// position_ids from 0, doc_ids and cu_seqlens a piece of its own. stats() counts it
  /// (padding_tokens). A sample never straddles rows unless it is longer than one
  /// (long_samples). Samples with no tokens are left out and counted (empty_samples).
  /// 0: the field comes as stored, values + offsets.
  uint32_t seq_len = 0;
  /// > 0 (instead of seq_len): the same records go out unpacked, one sample per row, in
  /// batches of a varying number B of samples padded to the longest one's length L,
  /// with B x L <= max_tokens (the padded size, what attention costs). batch_size is not
  /// used. Outputs: tokens [B, L], "attention_mask" uint8 [B, L] (1 on the sample's
  /// tokens, 0 on padding), "index" int64 [B] (the samples' records), and as asked
  /// targets, loss_mask (as for packed rows) and position_ids (0.. along the sample, 0 on
  /// padding); padding is pad_id in tokens and targets, 0 in the masks, counted in
  /// stats().padding_tokens. doc_ids and cu_seqlens are kInvalidArgument (a row is one
  /// sample: attention_mask says where it ends). Which samples share a batch is fixed
  /// per seed when the Loader opens, from the shard indexes alone: a seed-keyed shuffle
  /// of the samples is cut into windows of pack_window samples (at least 128 batches'
  /// worth: 128 x max_tokens / the mean length), each window sorted longest first and
  /// cut into batches greedily (length grouping). The batches are then
  /// the epoch order's units: shuffled per (seed, epoch), the same global sequence for
  /// every world size, and rank r of W takes global batches r, r + W, r + 2W, ... Every
  /// rank gets the same batch count: a final step of fewer than W batches is dropped
  /// under drop_last, else completed with the epoch order's first batches (repeats).
  /// state() resumes exactly (on any world size). A sample longer than max_tokens is
  /// kInvalidArgument naming its record and `__key__` (LongSamples::kError), or cut to
  /// its first max_tokens tokens (kTruncate; kSplit is kInvalidArgument). Works with
  /// `tokenizer` too (documents as samples), and with mixtures (`sources`): each source
  /// plans its own batches, and the mixture draws whole ones, so its weights and
  /// samples_per_epoch count batches (of about max_tokens positions each); "source" is
  /// [B]. Not with OnError::kSkip.
  /// The Stager sizes its device slots for max_tokens (StagerOptions::max_batch_samples
  /// is then not used).
  uint64_t max_tokens = 0;
  uint64_t pack_window = 1024;  ///< samples per best-fit window (max_tokens: per sorting window, at least), >= 1
  LongSamples long_samples = LongSamples::kError;
  int64_t pad_id = 0;           ///< token and target value of padding positions
  // Text tokenised in the loader: with `tokenizer` (a file open_tokenizer reads:
  // tokenizer.h), each record's text field is tokenised on the decode threads (bos, the
  // text's ids, eos) and the documents are packed into rows of seq_len (required) as
  // packed samples are, with the same outputs: every row starts with a document's start
  // (its BOS) unless a document longer than a row continues there (LongSamples::kSplit,
  // what pretraining text needs; kError refuses it). Planning needs every document's
  // length, so opening the Loader tokenises the dataset once on `threads` threads (the
  // CPU budget under "auto"; kept for the Loader's life: epochs do not repeat it) and
  // keeps the counts in token_counts_dir, where the next open with the same dataset and
  // tokenizer (ranks of a node opening together too) reads them instead;
  // stats().plan_s and plan_tokenised say which happened. Special tokens' text in the data is
  // ordinary text. The verdict names the stage "tokenize". A URL dataset's shards come
  // into the cache (cache_dir) one at a time for that pass, then are read as any
  // dataset's records are. With max_tokens instead of seq_len, the documents are
  // batched as samples are (no kSplit).
  std::string tokenizer;
  TokenizerOptions tokenizer_options;  ///< a tiktoken file of no known encoding: its pattern and specials
  std::string text_field;            ///< "": the records' one text field besides `__key__`
  std::optional<uint32_t> bos, eos;  ///< ids put before / after each document
  /// Where document token counts are kept between runs (src/pipeline/token_counts.h: a
  /// file per dataset and tokenizer, checked before use, written atomically). Unset:
  /// $XDG_CACHE_HOME/stoker/token-counts, else ~/.cache/stoker/token-counts. "": none
  /// kept, every open tokenises. A directory that cannot be written is a warning.
  std::optional<std::string> token_counts_dir;

  // --- order ---
  OrderOptions order;         ///< kind (shuffled), seed, chunk params; token data uses kTokenWindow when shuffled
  /// Every rank gets the same number of batches either way (order.h RankSchedule).
  /// true: the final incomplete step is dropped. false: it is shared out — records are
  /// padded with the epoch order's first samples (fewer than world_size repeat; "index"
  /// shows them), token rows are trimmed to a multiple of world_size (fewer than
  /// world_size rows are left out); with one rank nothing repeats or is left out.
  bool drop_last = false;
  int rank = -1;              ///< -1: from RANK / WORLD_SIZE (0 of 1 when unset)
  int world_size = -1;

  // --- resources ---
  /// threads == kAutoThreads (the default): the loader tunes itself (threads="auto"). It
  /// starts with one decode thread and the slots below, and every few batches moves one
  /// knob by one step, the one of the stage the verdict (verdict.h) names as the bound:
  /// decode threads (decode bound; doubled while the consumer waits half the time or
  /// more, until a step up is undone); ring slots (storage bound: more reads ahead), or the
  /// IO queue depth when reads wait for room in the queue (storage or network bound); or
  /// a decode thread fewer once the consumer no longer waits. A move is kept only when the
  /// feed rate rose by more than its measured noise (a step back: unless it fell), else
  /// undone; the climb is bounded and settles (src/figures/autotune.h). It stays within
  /// a CPU budget (the CPU plan's count: affinity and cgroup quota, minus reserve_cores)
  /// and a memory budget (memory_limit) for the ring. Each change is logged (log.h, info)
  /// with its reason and listed in stats().tune. Slots are tuned only when `slots` is 0
  /// and the data is records (token data sizes its ring by shuffle windows); the IO
  /// queue depth likewise, when io.queue_depth is kAutoQueueDepth (see `io`). An explicit
  /// `threads` (0: the CPU plan's count, as before) or `slots` is never changed.
  static constexpr unsigned kAutoThreads = 0xffffffffu;
  unsigned threads = kAutoThreads;  ///< decode threads; 0: from the CPU plan (NUMA node, affinity, cgroup quota)
  /// Bytes the tuner may give the ring's slots (threads="auto"). 0: a quarter of the
  /// cgroup's memory limit, or of the RAM when there is none.
  uint64_t memory_limit = 0;
  /// Cores kept for the consumer (the trainer's thread): at the first next(), the decode
  /// and IO threads are pinned off the CPU the calling thread runs on (and the next
  /// ones of the plan, for more than 1), and the thread count of "auto" (its budget)
  /// and of 0 (the CPU plan) is smaller by as many. Unset: 1 when the CPU plan has at least 4 CPUs, else 0 (a 2-core machine
  /// keeps both for decode, as before). Ignored with explicit `cpus`, and never leaves
  /// fewer than one CPU for the loader.
  std::optional<unsigned> reserve_cores;
  std::vector<int> cpus;      ///< CPUs to pin to; empty: from the CPU plan
  std::optional<std::string> gpu_pci_bus_id;  ///< for NUMA-local pinning
  /// Batch slots in the ring. 0: as many as fit in 32 MiB, at least 4 and at most 64
  /// (images at 224 px: 4; token rows: up to 64, so the decoders keep working while a
  /// busy machine is slow to schedule the consumer), and for tokens up to the batches of
  /// one shuffle window per decode thread plus one (within the same 32 MiB), so each
  /// worker can fill its window's batches directly. options() reports the count used.
  unsigned slots = 0;
  /// When the next batch cannot get a slot, add one (with one warning) instead of
  /// deadlocking: the consumer holds every slot, or (OnError::kSkip) a run of bad samples
  /// spans more batches than the ring holds, all of them needed to fill the batch before
  /// it. Memory then grows with what the consumer keeps, or with the bad run. false:
  /// kResourceExhausted saying which.
  bool grow_when_held = true;
  /// The IO engine: which, queue depth, O_DIRECT. io.queue_depth == kAutoQueueDepth (the
  /// Loader's default): 64 reads in flight at most, and under threads="auto", for datasets
  /// of records, a knob of the tuner: it starts at kAutoQueueDepthStart (64 for records
  /// read by ranged GET, each a network round trip) and doubles when
  /// the verdict is storage (or network) bound while reads wait for room in the queue
  /// (IoStats::queue_full_s), up to 256. Token data keeps 64: how much it reads ahead is
  /// set by its shuffle windows. An explicit queue depth is never changed.
  static constexpr unsigned kAutoQueueDepth = 0, kAutoQueueDepthStart = 16, kAutoQueueDepthMax = 256;
  IoOptions io = IoOptions{.queue_depth = kAutoQueueDepth};
  /// Extension point: wraps the IO engine the loader makes, once, when its first run
  /// opens it (to count, delay, throttle or fail reads). The wrapper must keep
  /// IoEngine's contract (io.h), threading included.
  std::function<std::unique_ptr<IoEngine>(std::unique_ptr<IoEngine>)> wrap_io;
  std::shared_ptr<SlotAllocator> slot_allocator;  ///< null: page-aligned host memory
  OnError on_error = OnError::kError;
  /// OnError::kSkip's budget per epoch on this rank: past it next() throws kDataLoss
  /// naming how many were skipped and the first reasons (a flipped bit in a shard's
  /// header or index drops every record of the shard: an epoch of nothing is an error,
  /// not a quiet success). Under 1: a fraction of the rank's samples in the epoch (0.01:
  /// 1 %); 1 or more: a count (rounded down); infinity: no limit. Unset: the larger of
  /// 1 % and 100 samples. Token data counts rows. Negative or NaN: kInvalidArgument.
  std::optional<double> max_skipped;
  uint64_t max_record_bytes = 256ull << 20;  ///< larger records are errors (untrusted input)

  // --- reporting (diagnose.h) ---
  /// Every this many seconds next() reports the bottleneck verdict with its evidence,
  /// and once more at the end of each epoch. 0: off, unless the environment variable
  /// STOKER_REPORT is set ("10s", "10", "500ms").
  double report_interval_s = 0;
  /// Reports as JSON lines (one object each) instead of text; env STOKER_REPORT_JSON=1.
  bool report_json = false;
  /// Where reports go; default: stderr, prefixed "stoker: ".
  std::function<void(const std::string&)> report_sink;
  /// Where warnings go (the ring growing: grow_when_held), once each per Loader;
  /// default: stderr, prefixed "stoker: warning: ". Called on a loader thread with its
  /// locks held: store the text, do not call back into the Loader. The Python binding
  /// turns it into one HeldBatchesWarning instead of a second line on stderr.
  std::function<void(const std::string&)> warning_sink;
  /// Serve stats() in the Prometheus text format on this TCP port (stoker/metrics.h: the
  /// names, the labels, how counters stay monotonic over epochs), shared with the
  /// process's other loaders on the same port. 0: off, unless the environment variable
  /// STOKER_METRICS_PORT names a port. A port in use is kUnavailable naming it.
  unsigned metrics_port = 0;
};

class Loader {
 public:
  /// Opens the dataset and checks the options (kInvalidArgument naming the option).
  /// Threads start on the first next().
  explicit Loader(LoaderOptions options);
  ~Loader();  ///< stops every thread promptly (reads cancelled, queued work dropped)
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// The next batch of the current epoch, or nullopt at its end. Throws the error of a
  /// failed record (OnError::kError), naming shard, record and reason.
  std::optional<Batch> next();
  /// next() without waiting: when the next batch is not ready yet, sets *would_wait and
  /// returns nullopt with nothing consumed (a batch that needs skipped samples filled in
  /// from later ones counts as not ready). For a caller that hands only the waits to
  /// another thread, such as the Python binding.
  std::optional<Batch> try_next(bool* would_wait);

  /// Restarts at the beginning of epoch `e` (drops batches in flight). After
  /// load_state() and before the next batch, set_epoch() of the restored epoch keeps the
  /// restored position (so a loop that calls set_epoch at the top of every epoch resumes
  /// where it stopped, repeating nothing); another epoch is kInvalidArgument naming both,
  /// unless the restored position is the end of its epoch.
  void set_epoch(uint64_t e);
  uint64_t epoch() const noexcept;
  /// Batches this rank gets in the current epoch (from its start or resume point).
  uint64_t num_batches() const;
  /// Samples in the dataset's epoch (records, or token rows).
  uint64_t epoch_samples() const noexcept;

  /// Where the epoch stands: batches handed out so far, as a resumable state.
  OrderState state() const;
  /// Resumes from `s` (same or different world size); kInvalidArgument when `s` was
  /// made with other order options or another dataset size.
  void load_state(const OrderState& s);

  /// Stops the loader's threads now; callable from any thread, more than once. A
  /// next() waiting on a batch, and every later call of it, throws kCancelled: a loop
  /// stopped this way ends with an error, never as a quietly short epoch. Batches
  /// already handed out stay valid.
  void close();

  LoaderStats stats() const;
  const LoaderOptions& options() const noexcept;
  int rank() const noexcept;
  int world_size() const noexcept;
  /// Class names from the manifest (image datasets).
  const std::vector<std::string>& class_names() const noexcept;
  /// The dataset's fields, from the manifest the Loader opened (a mixture: its first
  /// source's), so a caller need not read the manifest again.
  const Schema& schema() const noexcept;
  /// The manifest generation (DatasetWriterOptions::append) of the dataset this Loader
  /// opened and keeps reading, whatever is appended later; 0 for a mixture.
  uint64_t generation() const noexcept;

 private:
  struct Impl;  // the feed (one dataset, or a mixture) and the consumer guard
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
