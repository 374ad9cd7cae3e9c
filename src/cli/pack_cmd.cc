// `stoker pack imagefolder|videofolder|tokens|text|wds`: thin wrappers over stoker/pack.h.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli.h"
#include "interrupt.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

// Options every kind takes.
struct CommonArgs {
  std::string shard_size = "256MiB";
  int align = 1;
  int threads = 0;
  bool skip_bad = false, overwrite = false, no_check = false, append = false;
  std::string part;

  void declare(CLI::App* c, bool images = true) {
    c->add_option("--shard-size", shard_size, "start a new shard past this many bytes (>= 4KiB)")->check(byte_size())->capture_default_str();
    c->add_option("--align", align, "record alignment in the shards (4096: each record starts on a 4 KiB boundary)")
        ->check(CLI::IsMember({1, 4096}))->capture_default_str();
    c->add_option("--threads", threads, "threads (0: the CPUs allowed)")->check(CLI::Range(0, 1024))->capture_default_str();
    c->add_flag("--skip-bad", skip_bad, "skip inputs that cannot be packed (listed at the end) instead of stopping");
    c->add_flag("--overwrite", overwrite, "replace an existing dataset at OUT (kept whole until the new one is complete)");
    c->add_flag("--append", append,
                "add the records to the dataset at OUT as a new manifest generation (same schema, classes and "
                "options; readers that opened the old generation keep it)");
    c->add_option("--part", part,
                  "I/N: write only part I (from 0) of N into OUT, under part-unique names, with a part manifest and no "
                  "MANIFEST; the input is cut into N contiguous ranges. Run all N (anywhere), then `stoker commit OUT`");
    if (images)
      c->add_flag("--no-check", no_check,
                  "check image headers and probe videos and audio only, not that every file decodes (faster; a "
                  "corrupt file then fails in training instead)");
  }
  void apply(PackOptions& o) const {
    o.shard_size = parse_size(shard_size);
    o.align = static_cast<uint32_t>(align);
    o.threads = threads;
    o.skip_bad = skip_bad;
    o.overwrite = overwrite;
    o.check_decode = !no_check;
    o.progress = true;  // drawn only when stderr is a terminal
    if (!part.empty()) o.part = PartSpec::parse(part);
    o.append = append;
  }
};

int print_summary(const PackSummary& s, const std::string& out, bool fast_crop = false) {
  const double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
  std::printf("packed %llu records into %llu shard%s in %s (%s)\n", static_cast<unsigned long long>(s.records),
              static_cast<unsigned long long>(s.shards), s.shards == 1 ? "" : "s", out.c_str(),
              format_bytes(static_cast<double>(s.bytes)).c_str());
  std::printf("  raw %s, stored %s", format_bytes(static_cast<double>(s.raw_bytes)).c_str(),
              format_bytes(static_cast<double>(s.stored_bytes)).c_str());
  if (s.stored_bytes && s.raw_bytes != s.stored_bytes)
    std::printf(" (compression %.2fx)", static_cast<double>(s.raw_bytes) / static_cast<double>(s.stored_bytes));
  std::printf("\n  %.2f s, %.0f records/s, %.1f MB/s read\n", s.seconds, s.records / secs, s.input_bytes / secs / 1e6);
  if (s.rewritten && fast_crop)
    std::printf("  rewrote %llu JPEGs for fast crop (lossless: extract gives pixel-identical files)\n",
                static_cast<unsigned long long>(s.rewritten));
  else if (s.rewritten)
    std::printf("  rewrote %llu progressive JPEGs as baseline\n", static_cast<unsigned long long>(s.rewritten));
  for (const std::string& note : s.notes) std::printf("  %s\n", note.c_str());
  if (!s.skipped.empty()) {
    std::printf("  skipped %zu bad input%s:\n", s.skipped.size(), s.skipped.size() == 1 ? "" : "s");
    for (const std::string& line : s.skipped) std::printf("    %s\n", line.c_str());
  }
  std::fflush(stdout);
  return 0;
}

// The flags of the packers that store images (ImagePackOptions), declared once.
struct ImageArgs {
  bool fast_crop = false, exif_transpose = false;

  void declare(CLI::App* c) {
    c->add_flag("--fast-crop", fast_crop,
                "rewrite every JPEG losslessly with a restart-interval index, so training crops decode only what "
                "they cover (recommended for training sets; extract then gives pixel-identical, not byte-identical, "
                "files)");
    c->add_flag("--exif-transpose", exif_transpose,
                "turn JPEGs upright by their EXIF orientation, losslessly (as PIL's exif_transpose; without it the "
                "pixels train as the camera stored them)");
  }
  void apply(ImagePackOptions& o) const {
    o.fast_crop = fast_crop;
    o.exif_transpose = exif_transpose;
  }
};

// The video re-encode flags (PackOptions::video_reencode) of videofolder and wds.
struct VideoArgs {
  VideoReencodeSpec spec;

  void declare(CLI::App* c) {
    CLI::Option* gop = c->add_option("--video-gop", spec.gop,
                                     "re-encode every video to a keyframe every N frames at a constant frame rate, so a "
                                     "random clip decodes at most one GOP it does not use (lossy; libx264, tune "
                                     "fastdecode; audio copied, rotation applied)")
                           ->check(CLI::Range(1, 1000));
    c->add_option("--max-side", spec.max_side, "with --video-gop: scale videos so the longer side is at most S pixels")
        ->check(CLI::Range(2, 16384))->needs(gop);
    c->add_option("--fps", spec.fps, "with --video-gop: output frame rate (default: each source's average rate)")
        ->check(CLI::Range(0.1, 1000.0))->needs(gop);
    c->add_option("--video-crf", spec.crf, "with --video-gop: libx264 quality (constant rate factor; lower is larger)")
        ->check(CLI::Range(0, 51))->needs(gop)->capture_default_str();
    c->add_option("--video-encoder", spec.encoder,
                  "with --video-gop: libx264 (GPL; fastest decode) or mpeg4 (libavcodec's own, LGPL; larger files)")
        ->check(CLI::IsMember({"libx264", "mpeg4"}))->needs(gop)->capture_default_str();
  }
  void apply(PackOptions& o) const { o.video_reencode = spec; }
};

struct ImageFolderArgs {
  std::string src, out;
  CommonArgs common;
  ImageArgs image;
  bool baseline = false;
};

int pack_imagefolder_cmd(const ImageFolderArgs& a) {
  ImageFolderPackOptions o;
  a.common.apply(o);
  a.image.apply(o);
  o.baseline = a.baseline;
  return run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    return print_summary(pack_imagefolder(a.src, a.out, o), a.out, o.fast_crop);
  });
}

struct VideoFolderArgs {
  std::string src, out;
  CommonArgs common;
  VideoArgs video;
};

int pack_videofolder_cmd(const VideoFolderArgs& a) {
  PackOptions o;
  a.common.apply(o);
  a.video.apply(o);
  return run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    return print_summary(pack_videofolder(a.src, a.out, o), a.out);
  });
}

struct TokensArgs {
  std::string file, out, dtype;
  CommonArgs common;
  int64_t seq_len = 0, zstd = 0, rows_per_record = 0;
  std::optional<int64_t> eos;
};

int pack_tokens_cmd(const TokensArgs& a) {
  TokensPackOptions o;
  a.common.apply(o);
  o.dtype = a.dtype.empty() ? DType::kNone : dtype_from_name(a.dtype);  // kNone: a Megatron index says
  o.seq_len = static_cast<uint32_t>(a.seq_len);
  o.zstd_level = static_cast<int>(a.zstd);
  o.rows_per_record = static_cast<uint32_t>(a.rows_per_record);
  o.eos = a.eos;
  return run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    return print_summary(pack_tokens(a.file, a.out, o), a.out);
  });
}

struct TextArgs {
  std::vector<std::string> paths;  // SRC... OUT
  std::string tokenizer, pattern, jsonl_key = "text", text_field;
  std::vector<std::string> specials;  // TEXT=ID
  std::optional<std::string> bos, eos;
  CommonArgs common;
  int64_t seq_len = 0, zstd = 0, rows_per_record = 0;
  bool allow_special = false;
};

int pack_text_cmd(const TextArgs& a) {
  TextPackOptions o;
  a.common.apply(o);
  o.tokenizer = a.tokenizer;
  o.tokenizer_options.pattern = a.pattern;
  for (const std::string& s : a.specials) {
    const size_t eq = s.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size() ||
        s.find_first_not_of("0123456789", eq + 1) != std::string::npos)
      throw UsageError("--special " + s + ": expected TEXT=ID");
    o.tokenizer_options.special_tokens[s.substr(0, eq)] = static_cast<uint32_t>(std::stoul(s.substr(eq + 1)));
  }
  o.bos = a.bos;
  o.eos = a.eos;
  o.jsonl_key = a.jsonl_key;
  o.text_field = a.text_field;
  o.allowed_special = a.allow_special ? SpecialTokens::every() : SpecialTokens::none();
  o.seq_len = static_cast<uint32_t>(a.seq_len);
  o.zstd_level = static_cast<int>(a.zstd);
  o.rows_per_record = static_cast<uint32_t>(a.rows_per_record);
  std::vector<std::string> inputs(a.paths.begin(), a.paths.end() - 1);
  const std::string& out = a.paths.back();
  return run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    return print_summary(pack_text(inputs, out, o), out);
  });
}

struct SamplesArgs {
  std::vector<std::string> paths;  // SRC... OUT
  std::string tokens_key = "tokens", mask_key, dtype = "int32";
  CommonArgs common;
  int64_t zstd = 0;
};

int pack_samples_cmd(const SamplesArgs& a) {
  SamplesPackOptions o;
  a.common.apply(o);
  o.tokens_key = a.tokens_key;
  o.mask_key = a.mask_key;
  o.dtype = dtype_from_name(a.dtype);
  o.zstd_level = static_cast<int>(a.zstd);
  std::vector<std::string> inputs(a.paths.begin(), a.paths.end() - 1);
  const std::string& out = a.paths.back();
  return run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    return print_summary(pack_samples(inputs, out, o), out);
  });
}

struct WdsArgs {
  std::vector<std::string> paths;  // TAR... OUT
  std::string classes;
  CommonArgs common;
  ImageArgs image;
  VideoArgs video;
  bool skip_incomplete = false;
};

int pack_wds_cmd(const WdsArgs& a) {
  WdsPackOptions o;
  a.common.apply(o);
  a.image.apply(o);
  a.video.apply(o);
  o.skip_incomplete = a.skip_incomplete;
  if (!a.classes.empty()) {
    std::ifstream in(a.classes);
    if (!in) throw errno_error("open " + a.classes, errno);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) o.class_names.push_back(line);
    }
    if (o.class_names.empty()) throw_error(ErrorCode::kInvalidArgument, a.classes + " lists no class names");
  }
  std::vector<std::string> tars(a.paths.begin(), a.paths.end() - 1);
  const std::string& out = a.paths.back();
  return run_interruptible([&](const std::atomic<bool>* cancel) {
    o.cancel = cancel;
    return print_summary(pack_wds(tars, out, o), out, o.fast_crop);
  });
}

void setup(CLI::App& tool) {
  CLI::App* pack = group(tool, "pack", "Pack inputs (an ImageFolder, a token file, text, token lists, WebDataset tars) into a dataset of shards.");

  auto im = std::make_shared<ImageFolderArgs>();
  CLI::App* c = pack->add_subcommand(
      "imagefolder", "Pack an ImageFolder tree (SRC/<class>/<image>: JPEG, PNG or WebP) into a dataset of shards.");
  c->add_option("SRC", im->src, "ImageFolder root")->required();
  c->add_option("OUT", im->out, "dataset directory to write")->required();
  im->common.declare(c);
  c->add_flag("--baseline", im->baseline, "rewrite progressive JPEGs as baseline (lossless) so crops decode fast");
  im->image.declare(c);
  on_run(c, [im] { return pack_imagefolder_cmd(*im); });

  auto vf = std::make_shared<VideoFolderArgs>();
  c = pack->add_subcommand("videofolder",
                           "Pack a tree of videos by class (SRC/<class>/<video>: mp4, mkv, webm, mov, avi) into a dataset "
                           "of shards, each video probed (and decoded, unless --no-check) and stored with its keyframe index.");
  c->add_option("SRC", vf->src, "root of the class folders")->required();
  c->add_option("OUT", vf->out, "dataset directory to write")->required();
  vf->common.declare(c);
  vf->video.declare(c);
  on_run(c, [vf] { return pack_videofolder_cmd(*vf); });

  auto tk = std::make_shared<TokensArgs>();
  c = pack->add_subcommand("tokens",
                           "Pack a flat token file (nanoGPT train.bin) or a Megatron .bin/.idx pair into fixed-length rows.");
  c->add_option("FILE", tk->file, "token file (.bin; a Megatron .idx beside it is read)")->required();
  c->add_option("OUT", tk->out, "dataset directory to write")->required();
  c->add_option("--dtype", tk->dtype, "token type of a flat file (a Megatron index names its own)")
      ->check(named_by(dtype_from_name, "uint16|uint32|int32|int64"));
  c->add_option("--seq-len", tk->seq_len, "training sequence length N (rows hold N+1 tokens)")->required()->check(CLI::Range(1, 1 << 24));
  c->add_option("--zstd", tk->zstd, "zstd level of the records (0: stored raw)")->check(CLI::Range(0, 19))->capture_default_str();
  c->add_option("--rows-per-record", tk->rows_per_record, "rows in a record (0: chosen from the shard size)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  c->add_option("--eos", tk->eos,
                 "end-of-document token id: store document boundaries (a document ends with its EOS token) for "
                 "position_ids, loss_mask, doc_ids and cu_seqlens (a Megatron index gives them itself)");
  tk->common.declare(c, false);
  on_run(c, [tk] { return pack_tokens_cmd(*tk); });

  auto tx = std::make_shared<TextArgs>();
  c = pack->add_subcommand("text",
                           "Tokenise text (.txt: one document per file; .jsonl: one per line; tars: each .txt member; a "
                           "dataset: each record's text field) into fixed-length rows "
                           "with document boundaries, as pack tokens writes them.");
  c->add_option("PATH", tx->paths, "SRC... OUT: text files, tars, datasets or directories of files, then the dataset directory to write")
      ->required()->expected(2, -1);
  c->add_option("--tokenizer", tx->tokenizer, "tokenizer file: tiktoken ranks (.tiktoken), tokenizer.json, SentencePiece .model")
      ->required();
  c->add_option("--pattern", tx->pattern, "split pattern of a .tiktoken file not named after a known encoding");
  c->add_option("--special", tx->specials, "TEXT=ID: a special token of a .tiktoken file not named after a known encoding");
  c->add_option("--bos", tx->bos, "token put before every document: an id or a token's text (e.g. '<|endoftext|>')");
  c->add_option("--eos", tx->eos, "token put after every document: an id or a token's text");
  c->add_option("--jsonl-key", tx->jsonl_key, "JSON Lines: the key holding each document's text")->capture_default_str();
  c->add_option("--text-field", tx->text_field, "a dataset input: the text field to tokenise (default: its one text field)");
  c->add_flag("--allow-special", tx->allow_special,
              "recognise special tokens written in the text (default: such text is tokenised as the text it is)");
  c->add_option("--seq-len", tx->seq_len, "training sequence length N (rows hold N+1 tokens)")->required()->check(CLI::Range(1, 1 << 24));
  c->add_option("--zstd", tx->zstd, "zstd level of the records (0: stored raw)")->check(CLI::Range(0, 19))->capture_default_str();
  c->add_option("--rows-per-record", tx->rows_per_record, "rows in a record (0: chosen from the shard size)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  tx->common.declare(c, false);
  on_run(c, [tx] { return pack_text_cmd(*tx); });

  auto sm = std::make_shared<SamplesArgs>();
  c = pack->add_subcommand("samples",
                           "Fine-tuning samples given as token lists (JSON Lines), one record each, for the loader to "
                           "pack into rows (seq_len): tokens and an optional per-token loss mask.");
  c->add_option("PATH", sm->paths, "SRC... OUT: JSON Lines files or directories of them, then the dataset directory")
      ->required()->expected(2, -1);
  c->add_option("--tokens-key", sm->tokens_key, "the key holding each sample's token ids")->capture_default_str();
  c->add_option("--mask-key", sm->mask_key, "the key holding each sample's 0/1 loss mask, one per token");
  c->add_option("--dtype", sm->dtype, "token element type: uint16, uint32, int32, int64")->capture_default_str();
  c->add_option("--zstd", sm->zstd, "zstd level of the records (0: stored raw)")->check(CLI::Range(0, 19))->capture_default_str();
  sm->common.declare(c, false);
  on_run(c, [sm] { return pack_samples_cmd(*sm); });

  auto wd = std::make_shared<WdsArgs>();
  c = pack->add_subcommand("wds",
                           "Pack WebDataset tars (.tar, .tar.gz, .tar.zst, .tar.xz) into a dataset of shards, one field "
                           "per member extension (jpg/png/webp: image, cls: int64, txt/json: text, npy: array, mp4/mkv/webm/mov/avi: video, "
                           "wav/flac/mp3/ogg/opus/m4a: audio, else bytes).");
  c->add_option("PATH", wd->paths, "TAR... OUT: the WebDataset tars, then the dataset directory to write")->required()->expected(2, -1);
  c->add_option("--classes", wd->classes, "file of class names, one a line (the labels' names)");
  wd->image.declare(c);
  wd->video.declare(c);
  c->add_flag("--skip-incomplete", wd->skip_incomplete,
              "skip samples lacking a member other samples have (listed at the end) instead of stopping");
  wd->common.declare(c);
  on_run(c, [wd] { return pack_wds_cmd(*wd); });
}

}  // namespace

STOKER_COMMAND("pack", setup);

}  // namespace stoker::cli
