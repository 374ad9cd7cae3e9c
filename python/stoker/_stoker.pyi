"""Types of stoker's native layer (python/src); written by
python/wheel_tools/make_stub.py from the built extension."""
import typing
import numpy
import numpy.typing

__version__: str
class AudioClipSpec:
    """
    An AudioClip's parameters (see include/stoker/media.h).
    """
    def __init__(self) -> None:
        ...
    @property
    def sample_rate(self) -> int:
        ...
    @sample_rate.setter
    def sample_rate(self, value: int) -> None: ...
    @property
    def mono(self) -> bool:
        ...
    @mono.setter
    def mono(self, value: bool) -> None: ...
    @property
    def seconds(self) -> float:
        ...
    @seconds.setter
    def seconds(self, value: float) -> None: ...

class CancelledError(Error):
    """
    Stopped by shutdown or interruption.
    """
    code: str

class DataLossError(Error):
    """
    Stored bytes are corrupt (checksum, truncated, bad JPEG).
    """
    code: str

class Error(RuntimeError):
    """
    Base class of stoker's errors; `code` names the kind ("data_loss", ...).
    """
    code: str

class FieldTransform:
    """
    How one field becomes part of a batch (see include/stoker/loader.h).
    """
    def __init__(self) -> None:
        ...
    class Kind:
        """
        Members:

        RANDOM_RESIZED_CROP

        CENTER_CROP

        FOLLOW

        AS_STORED

        VIDEO_CLIP

        AUDIO_CLIP
        """
        RANDOM_RESIZED_CROP: typing.ClassVar[Kind]
        CENTER_CROP: typing.ClassVar[Kind]
        FOLLOW: typing.ClassVar[Kind]
        AS_STORED: typing.ClassVar[Kind]
        VIDEO_CLIP: typing.ClassVar[Kind]
        AUDIO_CLIP: typing.ClassVar[Kind]
        def __int__(self) -> int: ...
        @property
        def name(self) -> str: ...
        @property
        def value(self) -> int: ...
    @property
    def kind(self) -> FieldTransform.Kind:
        ...
    @kind.setter
    def kind(self, value: FieldTransform.Kind) -> None: ...
    @property
    def size(self) -> int:
        ...
    @size.setter
    def size(self, value: int) -> None: ...
    @property
    def scale_min(self) -> float:
        ...
    @scale_min.setter
    def scale_min(self, value: float) -> None: ...
    @property
    def scale_max(self) -> float:
        ...
    @scale_max.setter
    def scale_max(self, value: float) -> None: ...
    @property
    def ratio_min(self) -> float:
        ...
    @ratio_min.setter
    def ratio_min(self, value: float) -> None: ...
    @property
    def ratio_max(self) -> float:
        ...
    @ratio_max.setter
    def ratio_max(self, value: float) -> None: ...
    @property
    def flip_prob(self) -> float:
        ...
    @flip_prob.setter
    def flip_prob(self, value: float) -> None: ...
    @property
    def resize(self) -> int:
        ...
    @resize.setter
    def resize(self, value: int) -> None: ...
    @property
    def follow(self) -> str:
        ...
    @follow.setter
    def follow(self, value: str) -> None: ...
    @property
    def interpolation(self) -> str:
        ...
    @interpolation.setter
    def interpolation(self, value: str) -> None: ...
    @property
    def channels(self) -> int:
        ...
    @channels.setter
    def channels(self, value: int) -> None: ...
    @property
    def video(self) -> VideoClipSpec:
        ...
    @video.setter
    def video(self, value: VideoClipSpec) -> None: ...
    @property
    def audio(self) -> AudioClipSpec:
        ...
    @audio.setter
    def audio(self, value: AudioClipSpec) -> None: ...

class HeldBatchesWarning(UserWarning):
    """
    The caller holds every batch slot of a Loader, so the ring grew (memory now grows with the batches kept).
    """

class ImageTransform:
    """
    What the decoder does to each image (see include/stoker/image.h).
    """
    def __init__(self) -> None:
        ...
    class Kind:
        """
        Members:

        TRAIN

        EVAL

        NONE
        """
        TRAIN: typing.ClassVar[Kind]
        EVAL: typing.ClassVar[Kind]
        NONE: typing.ClassVar[Kind]
        def __int__(self) -> int: ...
        @property
        def name(self) -> str: ...
        @property
        def value(self) -> int: ...
    @property
    def kind(self) -> ImageTransform.Kind:
        ...
    @kind.setter
    def kind(self, value: ImageTransform.Kind) -> None: ...
    @property
    def size(self) -> int:
        ...
    @size.setter
    def size(self, value: int) -> None: ...
    @property
    def scale_min(self) -> float:
        ...
    @scale_min.setter
    def scale_min(self, value: float) -> None: ...
    @property
    def scale_max(self) -> float:
        ...
    @scale_max.setter
    def scale_max(self, value: float) -> None: ...
    @property
    def ratio_min(self) -> float:
        ...
    @ratio_min.setter
    def ratio_min(self, value: float) -> None: ...
    @property
    def ratio_max(self) -> float:
        ...
    @ratio_max.setter
    def ratio_max(self, value: float) -> None: ...
    @property
    def flip_prob(self) -> float:
        ...
    @flip_prob.setter
    def flip_prob(self, value: float) -> None: ...
    @property
    def eval_crop_fraction(self) -> float:
        ...
    @eval_crop_fraction.setter
    def eval_crop_fraction(self, value: float) -> None: ...
    @property
    def allow_dct_scaling(self) -> bool:
        ...
    @allow_dct_scaling.setter
    def allow_dct_scaling(self, value: bool) -> None: ...
    @property
    def max_pixels(self) -> int:
        ...
    @max_pixels.setter
    def max_pixels(self, value: int) -> None: ...
    def __repr__(self) -> str:
        ...

class InvalidArgumentError(Error, ValueError):
    """
    A malformed request: bad option, path or state.
    """
    code: str

class IoError(Error, OSError):
    """
    The OS refused or failed an operation.
    """
    code: str

class Loader:
    """
    Native loader handle; use stoker.Loader.
    """
    def __init__(self, options: LoaderOptions, converter: object, stream: object = ...) -> None:
        ...
    def next(self) -> object:
        """
        The next batch as {name: tensor}, or None at the end of the epoch. Waits with the GIL released; Ctrl-C interrupts the wait (the batch is then returned by the following call).
        """
    def set_epoch(self, epoch: int) -> None:
        ...
    @property
    def epoch(self) -> int:
        ...
    def num_batches(self) -> int:
        ...
    @property
    def epoch_samples(self) -> int:
        ...
    def state(self) -> str:
        """
        The order state (one line) after the batches handed out so far.
        """
    def load_state(self, state: str) -> None:
        ...
    def stats(self) -> dict:
        """
        LoaderStats as a dict (plus 'stage': the Stager's figures when staged, and 'summary': LoaderStats::summary() of the same figures).
        """
    def class_names(self) -> List[str]:
        ...
    @property
    def schema(self) -> str:
        ...
    @property
    def generation(self) -> int:
        ...
    @property
    def rank(self) -> int:
        ...
    @property
    def world_size(self) -> int:
        ...
    @property
    def configured_slots(self) -> int:
        ...
    @property
    def closed(self) -> bool:
        ...
    def close(self) -> None:
        """
        Stops the loader's threads; further calls raise.
        """

class LoaderOptions:
    """
    Options of a Loader (see include/stoker/loader.h).
    """
    def __init__(self) -> None:
        ...
    @property
    def cache_dir(self) -> str:
        ...
    @cache_dir.setter
    def cache_dir(self, value: str) -> None: ...
    @property
    def cache_limit(self) -> int:
        ...
    @cache_limit.setter
    def cache_limit(self, value: int) -> None: ...
    @property
    def cache_prefetch(self) -> int:
        ...
    @cache_prefetch.setter
    def cache_prefetch(self, value: int) -> None: ...
    @property
    def remote_reads(self) -> str:
        ...
    @remote_reads.setter
    def remote_reads(self, value: str) -> None: ...
    @property
    def remote_connections(self) -> int:
        ...
    @remote_connections.setter
    def remote_connections(self, value: int) -> None: ...
    @property
    def remote_part_bytes(self) -> int:
        ...
    @remote_part_bytes.setter
    def remote_part_bytes(self, value: int) -> None: ...
    @property
    def remote_timeout(self) -> float:
        ...
    @remote_timeout.setter
    def remote_timeout(self, value: float) -> None: ...
    @property
    def remote_profile(self) -> str:
        ...
    @remote_profile.setter
    def remote_profile(self, value: str) -> None: ...
    @property
    def sources(self) -> List[str]:
        ...
    @sources.setter
    def sources(self, value: List[str]) -> None: ...
    @property
    def source_fields(self) -> List[Dict[str, str]]:
        ...
    @source_fields.setter
    def source_fields(self, value: List[Dict[str, str]]) -> None: ...
    @property
    def weights(self) -> List[float]:
        ...
    @weights.setter
    def weights(self, value: List[float]) -> None: ...
    @property
    def samples_per_epoch(self) -> int:
        ...
    @samples_per_epoch.setter
    def samples_per_epoch(self, value: int) -> None: ...
    @property
    def position_ids(self) -> bool:
        ...
    @position_ids.setter
    def position_ids(self, value: bool) -> None: ...
    @property
    def position_ids_from_row_start(self) -> bool:
        ...
    @position_ids_from_row_start.setter
    def position_ids_from_row_start(self, value: bool) -> None: ...
    @property
    def loss_mask(self) -> bool:
        ...
    @loss_mask.setter
    def loss_mask(self, value: bool) -> None: ...
    @property
    def doc_ids(self) -> bool:
        ...
    @doc_ids.setter
    def doc_ids(self, value: bool) -> None: ...
    @property
    def cu_seqlens(self) -> bool:
        ...
    @cu_seqlens.setter
    def cu_seqlens(self, value: bool) -> None: ...
    @property
    def seq_len(self) -> int:
        ...
    @seq_len.setter
    def seq_len(self, value: int) -> None: ...
    @property
    def max_tokens(self) -> int:
        ...
    @max_tokens.setter
    def max_tokens(self, value: int) -> None: ...
    @property
    def pack_window(self) -> int:
        ...
    @pack_window.setter
    def pack_window(self, value: int) -> None: ...
    @property
    def long_samples(self) -> str:
        ...
    @long_samples.setter
    def long_samples(self, value: str) -> None: ...
    @property
    def tokenizer(self) -> str:
        ...
    @tokenizer.setter
    def tokenizer(self, value: str) -> None: ...
    @property
    def tokenizer_pattern(self) -> str:
        ...
    @tokenizer_pattern.setter
    def tokenizer_pattern(self, value: str) -> None: ...
    @property
    def tokenizer_special_tokens(self) -> Dict[str, int]:
        ...
    @tokenizer_special_tokens.setter
    def tokenizer_special_tokens(self, value: Dict[str, int]) -> None: ...
    @property
    def text_field(self) -> str:
        ...
    @text_field.setter
    def text_field(self, value: str) -> None: ...
    @property
    def bos(self) -> Optional[int]:
        ...
    @bos.setter
    def bos(self, value: Optional[int]) -> None: ...
    @property
    def eos(self) -> Optional[int]:
        ...
    @eos.setter
    def eos(self, value: Optional[int]) -> None: ...
    @property
    def token_counts_dir(self) -> Optional[str]:
        ...
    @token_counts_dir.setter
    def token_counts_dir(self, value: Optional[str]) -> None: ...
    @property
    def pad_id(self) -> int:
        ...
    @pad_id.setter
    def pad_id(self, value: int) -> None: ...
    @property
    def fields(self) -> Dict[str, FieldTransform]:
        ...
    @fields.setter
    def fields(self, value: Dict[str, FieldTransform]) -> None: ...
    @property
    def path(self) -> str:
        ...
    @path.setter
    def path(self, value: str) -> None: ...
    @property
    def batch_size(self) -> int:
        ...
    @batch_size.setter
    def batch_size(self, value: int) -> None: ...
    @property
    def transform(self) -> ImageTransform:
        ...
    @transform.setter
    def transform(self, value: ImageTransform) -> None: ...
    @property
    def untransformed_image_as_stored(self) -> bool:
        ...
    @untransformed_image_as_stored.setter
    def untransformed_image_as_stored(self, value: bool) -> None: ...
    @property
    def pixel_format(self) -> str:
        ...
    @pixel_format.setter
    def pixel_format(self, value: str) -> None: ...
    @property
    def mean(self) -> List[float]:
        ...
    @mean.setter
    def mean(self, value: List[float]) -> None: ...
    @property
    def std(self) -> List[float]:
        ...
    @std.setter
    def std(self, value: List[float]) -> None: ...
    @property
    def targets(self) -> bool:
        ...
    @targets.setter
    def targets(self, value: bool) -> None: ...
    @property
    def token_dtype(self) -> str:
        ...
    @token_dtype.setter
    def token_dtype(self, value: str) -> None: ...
    @property
    def order(self) -> str:
        ...
    @order.setter
    def order(self, value: str) -> None: ...
    @property
    def seed(self) -> int:
        ...
    @seed.setter
    def seed(self, value: int) -> None: ...
    @property
    def chunk_size(self) -> int:
        ...
    @chunk_size.setter
    def chunk_size(self, value: int) -> None: ...
    @property
    def window_chunks(self) -> int:
        ...
    @window_chunks.setter
    def window_chunks(self, value: int) -> None: ...
    @property
    def buckets(self) -> List[Tuple[int, int]]:
        ...
    @buckets.setter
    def buckets(self, value: List[Tuple[int, int]]) -> None: ...
    @property
    def bucket_pixels(self) -> int:
        ...
    @bucket_pixels.setter
    def bucket_pixels(self, value: int) -> None: ...
    @property
    def bucket_step(self) -> int:
        ...
    @bucket_step.setter
    def bucket_step(self, value: int) -> None: ...
    @property
    def bucket_max_ratio(self) -> float:
        ...
    @bucket_max_ratio.setter
    def bucket_max_ratio(self, value: float) -> None: ...
    @property
    def drop_last(self) -> bool:
        ...
    @drop_last.setter
    def drop_last(self, value: bool) -> None: ...
    @property
    def rank(self) -> int:
        ...
    @rank.setter
    def rank(self, value: int) -> None: ...
    @property
    def world_size(self) -> int:
        ...
    @world_size.setter
    def world_size(self, value: int) -> None: ...
    @property
    def threads(self) -> int:
        ...
    @threads.setter
    def threads(self, value: int) -> None: ...
    @property
    def memory_limit(self) -> int:
        ...
    @memory_limit.setter
    def memory_limit(self, value: int) -> None: ...
    @property
    def reserve_cores(self) -> int:
        ...
    @reserve_cores.setter
    def reserve_cores(self, value: int) -> None: ...
    @property
    def slots(self) -> int:
        ...
    @slots.setter
    def slots(self, value: int) -> None: ...
    @property
    def metrics_port(self) -> int:
        ...
    @metrics_port.setter
    def metrics_port(self, value: int) -> None: ...
    @property
    def grow_when_held(self) -> bool:
        ...
    @grow_when_held.setter
    def grow_when_held(self, value: bool) -> None: ...
    @property
    def on_error(self) -> str:
        ...
    @on_error.setter
    def on_error(self, value: str) -> None: ...
    @property
    def io_engine(self) -> str:
        ...
    @io_engine.setter
    def io_engine(self, value: str) -> None: ...
    @property
    def io_direct(self) -> bool:
        ...
    @io_direct.setter
    def io_direct(self, value: bool) -> None: ...
    @property
    def io_map_cached(self) -> bool:
        ...
    @io_map_cached.setter
    def io_map_cached(self, value: bool) -> None: ...
    @property
    def io_queue_depth(self) -> int:
        ...
    @io_queue_depth.setter
    def io_queue_depth(self, value: int) -> None: ...
    @property
    def io_limit_bytes_per_s(self) -> float:
        ...
    @io_limit_bytes_per_s.setter
    def io_limit_bytes_per_s(self, value: float) -> None: ...
    @property
    def io_read_latency_s(self) -> float:
        ...
    @io_read_latency_s.setter
    def io_read_latency_s(self, value: float) -> None: ...
    @property
    def stage(self) -> str:
        ...
    @stage.setter
    def stage(self, value: str) -> None: ...
    @property
    def device(self) -> int:
        ...
    @device.setter
    def device(self, value: int) -> None: ...
    @property
    def device_slots(self) -> int:
        ...
    @device_slots.setter
    def device_slots(self, value: int) -> None: ...
    @property
    def pin_memory(self) -> bool:
        ...
    @pin_memory.setter
    def pin_memory(self, value: bool) -> None: ...
    @property
    def max_skipped(self) -> Optional[float]:
        ...
    @max_skipped.setter
    def max_skipped(self, value: Optional[float]) -> None: ...
    @property
    def max_record_bytes(self) -> int:
        ...
    @max_record_bytes.setter
    def max_record_bytes(self, value: int) -> None: ...
    @property
    def gpu_pci_bus_id(self) -> Optional[str]:
        ...
    @gpu_pci_bus_id.setter
    def gpu_pci_bus_id(self, value: Optional[str]) -> None: ...

class NotFoundError(Error, FileNotFoundError):
    """
    A named file, shard or record does not exist.
    """
    code: str

class ResourceExhaustedError(Error):
    """
    Memory, file descriptors or a size limit.
    """
    code: str

class Tokenizer:
    """
    A tokenizer opened from a file: a tiktoken ranks file
    (.tiktoken; cl100k_base, o200k_base, r50k_base and p50k_base files get their own split
    pattern and special tokens, any other takes `pattern` and `special_tokens`), a byte-level
    BPE tokenizer.json, or a SentencePiece .model. Ids equal the reference libraries'
    (tiktoken, Hugging Face tokenizers, SentencePiece). Invalid UTF-8 in bytes is replaced
    (U+FFFD per maximal invalid subsequence, as bytes.decode(errors="replace")).
    """
    def __init__(self, path: str, *, pattern: str = ..., special_tokens: Dict[str, int] = {}) -> None:
        ...
    def encode(self, text: object, allowed_special: object = ...) -> List[int]:
        """
        The ids of `text` (str, or bytes taken as UTF-8).
        allowed_special: None (special-token text is ordinary text), "all", or a list of the
        special tokens to recognise. Adds no BOS/EOS. The GIL is released while it runs.
        """
    def decode(self, ids: List[int]) -> bytes:
        """
        The bytes `ids` stand for (special tokens as their text).
        """
    def special_token(self, text: str) -> Optional[int]:
        """
        The id of the special token written `text`, or None.
        """
    def token_id(self, text: str) -> Optional[int]:
        """
        The id of `text` as one token (special or ordinary), or None.
        """
    @property
    def vocab_size(self) -> int:
        ...
    @property
    def format(self) -> str:
        ...

class UnavailableError(Error):
    """
    A facility is missing (io_uring, GPU, CUDA).
    """
    code: str

class VideoClipSpec:
    """
    A VideoClip's parameters (see include/stoker/media.h).
    """
    def __init__(self) -> None:
        ...
    @property
    def frames(self) -> int:
        ...
    @frames.setter
    def frames(self, value: int) -> None: ...
    @property
    def fps(self) -> float:
        ...
    @fps.setter
    def fps(self, value: float) -> None: ...
    @property
    def stride(self) -> int:
        ...
    @stride.setter
    def stride(self, value: int) -> None: ...
    @property
    def clips(self) -> int:
        ...
    @clips.setter
    def clips(self, value: int) -> None: ...
    @property
    def height(self) -> int:
        ...
    @height.setter
    def height(self, value: int) -> None: ...
    @property
    def width(self) -> int:
        ...
    @width.setter
    def width(self, value: int) -> None: ...
    @property
    def scale_min(self) -> float:
        ...
    @scale_min.setter
    def scale_min(self, value: float) -> None: ...
    @property
    def scale_max(self) -> float:
        ...
    @scale_max.setter
    def scale_max(self, value: float) -> None: ...
    @property
    def ratio_min(self) -> float:
        ...
    @ratio_min.setter
    def ratio_min(self, value: float) -> None: ...
    @property
    def ratio_max(self) -> float:
        ...
    @ratio_max.setter
    def ratio_max(self, value: float) -> None: ...
    @property
    def flip_prob(self) -> float:
        ...
    @flip_prob.setter
    def flip_prob(self, value: float) -> None: ...
    @property
    def audio_rate(self) -> int:
        ...
    @audio_rate.setter
    def audio_rate(self, value: int) -> None: ...
    @property
    def audio_mono(self) -> bool:
        ...
    @audio_mono.setter
    def audio_mono(self, value: bool) -> None: ...
    @property
    def crop(self) -> str:
        ...
    @crop.setter
    def crop(self, value: str) -> None: ...

def commit(dir: str, *, clean: bool = ...) -> dict:
    """
    Publishes the MANIFEST of a dataset packed in parts (part="I/N" of the packers or
    stoker.Writer) once all N parts are complete (stoker/commit.h): returns a dict with
    "outcome" ("committed", "already committed" or "lost race": another commit published
    first), parts, shards, records, bytes and "strays" (files no manifest names; removed
    with clean=True). Raises naming every missing or incomplete part.
    """

def decode_image(jpeg: bytes, transform: ImageTransform, sample_seed: int) -> numpy.typing.NDArray[numpy.uint8]:
    """
    Decodes one JPEG with `transform` and the per-sample seed, as the loader does: a uint8 HWC numpy array.
    """

def extract(dataset: str, out: str, *, threads: int = ..., skip_bad: bool = ...) -> dict:
    """
    Writes a dataset's records back out as files, under their __key__ names, into `out` (absent or empty;
    it appears only when complete). skip_bad=True skips records whose checksum fails (listed in
    "skipped") instead of raising.
    """

has_cuda: bool
def make_sample_imagefolder(out: str, *, images: int = ..., classes: int = ..., seed: int = ..., quality: int = ..., progressive_frac: float = ..., threads: int = ...) -> dict:
    ...

def make_sample_tokens(path: str, *, tokens: int = ..., vocab: int = ..., dtype: str = ..., seed: int = ...) -> dict:
    ...

media_available: bool
def pack_imagefolder(src: str, out: str, *, shard_size: int = ..., align: int = ..., threads: int = ..., skip_bad: bool = ..., overwrite: bool = ..., progress: bool = ..., baseline: bool = ..., fast_crop: bool = ..., max_file_bytes: int = ..., check: bool = ..., exif_transpose: bool = ..., part: str = ...) -> dict:
    """
    Packs an ImageFolder tree into a dataset; returns the summary as a dict.

    src: root with one sub-directory per class (SRC/<class>/<...>/<image>); labels are the
        class indices in byte-wise order of the names, class names go to the manifest.
    out: dataset directory to write. A dataset already there is refused unless
        overwrite=True; it then stays whole until the new one is complete.
    Files are taken by extension, as torchvision's ImageFolder does (jpg jpeg png webp;
    others such as .DS_Store are ignored and counted in "notes"); each image's format is
    sniffed from its bytes. check=True (default) decodes every image's data once, so an
    image the loader would fail on is refused now (or skipped and listed in "skipped"
    with skip_bad=True); check=False checks headers only.
    baseline: rewrite progressive JPEGs as baseline (lossless).
    fast_crop: rewrite every JPEG losslessly with a restart-interval index, so training
        crops decode only the part they cover.
    exif_transpose: turn JPEGs upright by their EXIF orientation, losslessly (as PIL's
        ImageOps.exif_transpose); without it pixels train as the camera stored them.
    shard_size (bytes), align (1 or 4096), threads (0: every CPU allowed), progress,
    max_file_bytes: as the CLI's options of the same names.
    Ctrl-C stops the pack, removes what it wrote and raises KeyboardInterrupt. Errors
    raise stoker.Error subclasses naming the file and the reason.
    """

def pack_samples(inputs: List[str], out: str, *, tokens_key: str = ..., mask_key: Optional[str] = ..., dtype: str = ..., zstd: int = ..., shard_size: int = ..., align: int = ..., threads: int = ..., overwrite: bool = ..., progress: bool = ..., part: str = ...) -> dict:
    """
    Packs fine-tuning samples given as token lists into a dataset, one record each; returns the summary.

    inputs: JSON Lines files (one sample per line: an object holding the keys) or
        directories of them, in order; out: dataset directory.
    tokens_key: the key of each sample's token ids; mask_key: the key of its 0/1 loss mask
        (one per token), or None. dtype: uint16, uint32, int32 (default) or int64.
    Read it with stoker.Loader(out, seq_len=N, ...) to pack the samples into rows. part:
    "I/N" packs part I of N (whole lines; then stoker.commit). Errors name the file and line.
    """

def pack_text(inputs: List[str], out: str, *, tokenizer: str, seq_len: int = ..., pattern: str = ..., special_tokens: Dict[str, int] = {}, bos: Optional[str] = ..., eos: Optional[str] = ..., jsonl_key: str = ..., text_field: str = ..., rows_per_record: int = ..., zstd: int = ..., shard_size: int = ..., align: int = ..., threads: int = ..., overwrite: bool = ..., progress: bool = ..., part: str = ...) -> dict:
    """
    Tokenises text into a token dataset of rows with document boundaries; returns the summary.

    inputs: .txt files (one document each), .jsonl/.ndjson files (one document per line, the
        string under jsonl_key), WebDataset tars (each .txt member), stoker datasets (each
        record's text field: text_field, or its one text field), or directories of files, in
        order; out: dataset directory.
    tokenizer: a .tiktoken ranks file, a tokenizer.json or a SentencePiece .model;
        pattern / special_tokens for a .tiktoken file not named after a known encoding.
    bos, eos: put around every document: an id or a token's text ("<|endoftext|>").
    seq_len, rows_per_record, zstd: as pack_tokens. part: "I/N" packs part I of N (whole
    documents; then stoker.commit). Errors name the file and line.
    """

def pack_tokens(file: str, out: str, *, dtype: Optional[str] = ..., seq_len: int = ..., rows_per_record: int = ..., zstd: int = ..., shard_size: int = ..., align: int = ..., threads: int = ..., overwrite: bool = ..., progress: bool = ..., eos: Optional[int] = ..., part: str = ...) -> dict:
    """
    Packs a token stream into a dataset of rows; returns the summary as a dict.

    file: a flat little-endian token file (nanoGPT's train.bin) of `dtype`, or a
        Megatron-LM .bin/.idx pair (the index names its own dtype).
    out: dataset directory to write (overwrite=True replaces a dataset there, which stays
        whole until the new one is complete).
    seq_len: training sequence length N; each row holds N+1 tokens, rows overlap by one.
    rows_per_record: rows per record (0: as many as fit in ~256 KiB). zstd: 0 stores raw,
        1..19 compresses each record.
    eos: end-of-document token id of a flat file: stores document boundaries (for
        position_ids, loss_mask, doc_ids, cu_seqlens). An id that never occurs is an error.
    The trailing tokens that make no full row are dropped and counted ("tokens_dropped").
    """

def pack_videofolder(src: str, out: str, *, shard_size: int = ..., align: int = ..., threads: int = ..., skip_bad: bool = ..., overwrite: bool = ..., progress: bool = ..., check: bool = ..., part: str = ..., video_reencode: object = ...) -> dict:
    """
    Packs a tree of videos by class into a dataset; returns the summary as a dict.

    src: root with one sub-directory per class (SRC/<class>/<...>/<video>: mp4, mkv, webm,
        mov, avi; other files are ignored and counted in "notes"); labels are the class
        indices in byte-wise order of the names. Records: __key__:text video:video label:int64.
    out: dataset directory to write (overwrite=True replaces a dataset there, which stays
        whole until the new one is complete).
    Each video is probed with libavformat and stored behind its keyframe index; check=True
    (default) also decodes every frame, so a file the loader would fail on (a codec without
    a decoder included) is refused now, naming it, or skipped with skip_bad=True.
    video_reencode: None, or {"gop": N, "max_side": S, "fps": F, "crf": Q, "encoder": "libx264"|"mpeg4"}:
        re-encode every video to a keyframe every N frames at a constant frame rate, as the
        CLI's --video-gop, --max-side, --fps, --video-crf and --video-encoder.
    shard_size (bytes), align (1 or 4096), threads (0: every CPU allowed), progress, part
    ("I/N": write part I of N, then stoker.commit): as the CLI's options of the same names.
    Ctrl-C stops the pack, removes what it wrote and raises KeyboardInterrupt. A build
    without libav raises stoker.UnavailableError.
    """

def pack_wds(tars: List[str], out: str, *, shard_size: int = ..., align: int = ..., threads: int = ..., skip_bad: bool = ..., skip_incomplete: bool = ..., overwrite: bool = ..., progress: bool = ..., class_names: List[str] = ..., fast_crop: bool = ..., check: bool = ..., exif_transpose: bool = ..., part: str = ..., video_reencode: object = ...) -> dict:
    """
    Packs WebDataset tars (plain or compressed) into a dataset; returns the summary.

    tars: the tar files, in order; out: dataset directory to write.
    One field per member extension, plus __key__: jpg/jpeg (one field, "jpg"), png, webp:
    image; cls: int64; txt/json: text; npy: array; anything else: bytes.
    check=True (default) decodes every image once so that one the loader would fail on is
    refused now; skip_bad=True skips (and lists in "skipped") bad samples and the rest of a
    truncated tar instead; skip_incomplete=True skips samples lacking a member others have.
    A pack that would write 0 records raises.
    fast_crop: rewrite JPEGs losslessly for fast training crops (as pack_imagefolder).
    exif_transpose: turn JPEGs upright by their EXIF orientation (as pack_imagefolder).
    class_names: names stored in the manifest; labels must be below their count.
    video_reencode: None, or {"gop": N, "max_side": S, "fps": F, "crf": Q, "encoder": "libx264"|"mpeg4"}:
    re-encode video members to a keyframe every N frames at a constant frame rate (as `stoker pack wds
    --video-gop N`; see stoker.reencode_video).
    overwrite=True replaces a dataset at out, kept whole until the new one is complete.
    """

def probe_jpeg(jpeg: bytes) -> dict:
    ...

def probe_media(data: bytes, kind: str = ...) -> dict:
    """
    The media index pack would store for a video or audio file's bytes, as a dict (codec, size, rotation, time_base, start_pts, duration, frames, sample_rate, channels, keyframes [(pts, pos, frame)]). DataLossError naming the reason when the file cannot be demuxed or decoded.
    """

def rank_from_env() -> tuple:
    """
    (rank, world_size) from RANK / WORLD_SIZE (torchrun), (0, 1) when neither is set; InvalidArgumentError naming the variable when only one is set or a value is malformed.
    """

def read_manifest(dir: str, profile: str = ...) -> dict:
    """
    The dataset's MANIFEST as a dict (schema, class_names, meta, records, shards); `dir` may be an http(s):// or s3:// URL (`profile`: the S3 credentials profile).
    """

def read_record(dir: str, index: int) -> dict:
    """
    Reads and checks record `index` (global): {field: value}: int for int64, float for float32/64, str for
    text (and __key__), a NumPy array (a copy) for ndarray/vararray fields, bytes for the rest.
    """

def record_location(dir: str, index: int) -> dict:
    """
    Where record `index` (global) is stored: shard path, record in shard, byte offset, sizes.
    """

def reencode_video(data: bytes, *, gop: int, max_side: int = ..., fps: Optional[float] = ..., crf: int = ..., encoder: str = ...) -> bytes:
    """
    A video file's bytes re-encoded as pack's video_reencode stores them (include/stoker/media.h): a keyframe every `gop` frames, constant frame rate `fps` (None: the source's average), longer side <= max_side (0: kept), turned upright, audio copied; MP4 bytes. DataLossError naming the reason.
    """

def resolve_buckets(sizes: List[Tuple[int, int]], pixels: int, step: int, max_ratio: float) -> List[Tuple[int, int]]:
    """
    The bucket list (h, w) of LoaderOptions::buckets, sorted tallest first (stoker/buckets.h).
    """

def sample_seed(seed: int, epoch: int, sample_index: int) -> int:
    """
    The per-sample augmentation seed the loader uses for (seed, epoch, sample index).
    """

