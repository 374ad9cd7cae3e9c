// `stoker pack imagefolder|tokens|wds`: thin wrappers over stoker/pack.h.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

void common_options(const ArgParser& p, PackOptions& o) {
  o.shard_size = parse_size(p.get_or("shard-size", "256MiB"));
  const int64_t align = p.get_int("align", 1);
  if (align != 1 && align != 4096) throw_error(ErrorCode::kInvalidArgument, "--align must be 1 or 4096");
  o.align = static_cast<uint32_t>(align);
  const int64_t threads = p.get_int("threads", 0);
  if (threads < 0 || threads > 1024) throw_error(ErrorCode::kInvalidArgument, "--threads must be 0..1024");
  o.threads = static_cast<int>(threads);
  o.skip_bad = p.flag("skip-bad");
  o.overwrite = p.flag("overwrite");
  o.progress = true;  // drawn only when stderr is a terminal
}

const std::vector<std::string> kCommon = {"shard-size", "align", "threads", "skip-bad", "overwrite"};
std::vector<std::string> with_common(std::vector<std::string> v) {
  v.insert(v.end(), kCommon.begin(), kCommon.end());
  return v;
}

int print_summary(const PackSummary& s, const std::string& out) {
  const double secs = s.seconds > 1e-9 ? s.seconds : 1e-9;
  std::printf("packed %llu records into %llu shard%s in %s (%s)\n", static_cast<unsigned long long>(s.records),
              static_cast<unsigned long long>(s.shards), s.shards == 1 ? "" : "s", out.c_str(),
              format_bytes(static_cast<double>(s.bytes)).c_str());
  std::printf("  raw %s, stored %s", format_bytes(static_cast<double>(s.raw_bytes)).c_str(),
              format_bytes(static_cast<double>(s.stored_bytes)).c_str());
  if (s.stored_bytes && s.raw_bytes != s.stored_bytes)
    std::printf(" (compression %.2fx)", static_cast<double>(s.raw_bytes) / static_cast<double>(s.stored_bytes));
  std::printf("\n  %.2f s, %.0f records/s, %.1f MB/s read\n", s.seconds, s.records / secs, s.input_bytes / secs / 1e6);
  if (s.rewritten) std::printf("  rewrote %llu progressive JPEGs as baseline\n", static_cast<unsigned long long>(s.rewritten));
  if (!s.skipped.empty()) {
    std::printf("  skipped %zu bad input%s:\n", s.skipped.size(), s.skipped.size() == 1 ? "" : "s");
    for (const std::string& line : s.skipped) std::printf("    %s\n", line.c_str());
  }
  std::fflush(stdout);
  return 0;
}

void need_positional(const ArgParser& p, size_t n, const std::string& usage) {
  if (p.positional().size() != n) throw_error(ErrorCode::kInvalidArgument, "usage: stoker " + usage);
}

int pack_imagefolder_cmd(const Args& args) {
  ArgParser p(args, {"skip-bad", "baseline", "overwrite"});
  p.check_known(with_common({"baseline"}));
  need_positional(p, 2, "pack imagefolder SRC OUT [options]");
  ImageFolderPackOptions o;
  common_options(p, o);
  o.baseline = p.flag("baseline");
  return print_summary(pack_imagefolder(p.positional()[0], p.positional()[1], o), p.positional()[1]);
}

int pack_tokens_cmd(const Args& args) {
  ArgParser p(args, {"skip-bad", "overwrite"});
  p.check_known(with_common({"dtype", "seq-len", "zstd", "rows-per-record", "eos"}));
  need_positional(p, 2, "pack tokens FILE OUT --dtype uint16|uint32 --seq-len N [options]");
  TokensPackOptions o;
  common_options(p, o);
  auto dt = p.get("dtype");
  o.dtype = dt ? dtype_from_name(*dt) : DType::kNone;  // kNone: a Megatron index says
  auto seq = p.get("seq-len");
  if (!seq) throw_error(ErrorCode::kInvalidArgument, "pack tokens needs --seq-len N");
  const int64_t n = p.get_int("seq-len", 0);
  if (n < 1 || n > (1 << 24)) throw_error(ErrorCode::kInvalidArgument, "--seq-len must be 1..16777216");
  o.seq_len = static_cast<uint32_t>(n);
  const int64_t level = p.get_int("zstd", 0);
  if (level < 0 || level > 19) throw_error(ErrorCode::kInvalidArgument, "--zstd LEVEL must be 1..19");
  o.zstd_level = static_cast<int>(level);
  const int64_t rpr = p.get_int("rows-per-record", 0);
  if (rpr < 0 || rpr > (1 << 24)) throw_error(ErrorCode::kInvalidArgument, "--rows-per-record out of range");
  o.rows_per_record = static_cast<uint32_t>(rpr);
  if (p.get("eos")) o.eos = p.get_int("eos", 0);
  return print_summary(pack_tokens(p.positional()[0], p.positional()[1], o), p.positional()[1]);
}

int pack_wds_cmd(const Args& args) {
  ArgParser p(args, {"skip-bad", "overwrite"});
  p.check_known(with_common({"classes"}));
  if (p.positional().size() < 2) throw_error(ErrorCode::kInvalidArgument, "usage: stoker pack wds TAR... OUT [options]");
  WdsPackOptions o;
  common_options(p, o);
  if (auto classes = p.get("classes")) {
    std::ifstream in(*classes);
    if (!in) throw errno_error("open " + *classes, errno);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) o.class_names.push_back(line);
    }
    if (o.class_names.empty()) throw_error(ErrorCode::kInvalidArgument, *classes + " lists no class names");
  }
  std::vector<std::string> tars(p.positional().begin(), p.positional().end() - 1);
  const std::string out = p.positional().back();
  return print_summary(pack_wds(tars, out, o), out);
}

}  // namespace

STOKER_COMMAND("pack imagefolder",
               "SRC OUT [--shard-size 256MiB] [--skip-bad] [--baseline] [--align 1|4096] [--threads N] [--overwrite]",
               "Pack an ImageFolder tree (SRC/<class>/<image>.jpg) into a dataset of shards.",
               pack_imagefolder_cmd);
STOKER_COMMAND("pack tokens",
               "FILE OUT --dtype uint16|uint32 --seq-len N [--eos ID] [--zstd LEVEL] [--rows-per-record R] [--shard-size S] "
               "[--threads N] [--overwrite]",
               "Pack a flat token file (nanoGPT train.bin) or a Megatron .bin/.idx pair into fixed-length rows; "
               "--eos ID (or a Megatron index) also stores document boundaries.",
               pack_tokens_cmd);
STOKER_COMMAND("pack wds", "TAR... OUT [--skip-bad] [--classes FILE] [--shard-size S] [--threads N] [--overwrite]",
               "Pack WebDataset tars (key.jpg + key.cls samples) into a dataset of shards.", pack_wds_cmd);

}  // namespace stoker::cli
