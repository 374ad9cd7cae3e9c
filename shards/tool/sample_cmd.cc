// `stoker sample imagefolder|tokens`: synthetic inputs for demos, tests and benchmarks.
#include <cstdio>

#include "cli.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

int sample_imagefolder_cmd(const Args& args) {
  ArgParser p(args);
  p.check_known({"images", "classes", "seed", "quality", "progressive-frac", "threads"});
  if (p.positional().size() != 1)
    throw_error(ErrorCode::kInvalidArgument, "usage: stoker sample imagefolder OUT --images N [--classes C] [--seed S]");
  SampleImageFolderOptions o;
  const int64_t images = p.get_int("images", 1000), classes = p.get_int("classes", 10);
  const int64_t quality = p.get_int("quality", 90), threads = p.get_int("threads", 0);
  if (images < 1) throw_error(ErrorCode::kInvalidArgument, "--images must be at least 1");
  if (classes < 1 || classes > 100000) throw_error(ErrorCode::kInvalidArgument, "--classes must be 1..100000");
  if (threads < 0 || threads > 1024) throw_error(ErrorCode::kInvalidArgument, "--threads must be 0..1024");
  o.images = static_cast<uint64_t>(images);
  o.classes = static_cast<uint32_t>(classes);
  o.seed = static_cast<uint64_t>(p.get_int("seed", 0));
  o.quality = static_cast<int>(quality);
  o.progressive_frac = p.get_double("progressive-frac", o.progressive_frac);
  if (o.progressive_frac < 0 || o.progressive_frac > 1)
    throw_error(ErrorCode::kInvalidArgument, "--progressive-frac must be in [0, 1]");
  o.threads = static_cast<int>(threads);
  o.progress = true;
  PackSummary s = make_sample_imagefolder(p.positional()[0], o);
  std::printf("wrote %llu JPEGs in %u classes to %s: %s, mean %s, %.2f s\n", static_cast<unsigned long long>(s.records),
              o.classes, p.positional()[0].c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              format_bytes(static_cast<double>(s.bytes) / static_cast<double>(s.records)).c_str(), s.seconds);
  return 0;
}

int sample_tokens_cmd(const Args& args) {
  ArgParser p(args);
  p.check_known({"tokens", "vocab", "dtype", "seed"});
  if (p.positional().size() != 1)
    throw_error(ErrorCode::kInvalidArgument, "usage: stoker sample tokens OUT.bin --tokens N --vocab V [--dtype uint16]");
  SampleTokensOptions o;
  const int64_t tokens = p.get_int("tokens", 1 << 20), vocab = p.get_int("vocab", 50257);
  if (tokens < 1) throw_error(ErrorCode::kInvalidArgument, "--tokens must be at least 1");
  if (vocab < 2 || vocab > 0xFFFFFFFFll) throw_error(ErrorCode::kInvalidArgument, "--vocab must be 2..4294967295");
  o.tokens = static_cast<uint64_t>(tokens);
  o.vocab = static_cast<uint32_t>(vocab);
  o.dtype = dtype_from_name(p.get_or("dtype", "uint16"));
  o.seed = static_cast<uint64_t>(p.get_int("seed", 0));
  PackSummary s = make_sample_tokens(p.positional()[0], o);
  std::printf("wrote %llu %s tokens (vocab %u) to %s: %s in %.2f s\n", static_cast<unsigned long long>(s.records),
              dtype_name(o.dtype), o.vocab, p.positional()[0].c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              s.seconds);
  return 0;
}

}  // namespace

STOKER_COMMAND("sample imagefolder",
               "OUT --images N [--classes C] [--seed S] [--quality 90] [--progressive-frac 0.004] [--threads N]",
               "Generate an ImageNet-like synthetic ImageFolder of JPEGs (~85 KiB mean).", sample_imagefolder_cmd);
STOKER_COMMAND("sample tokens", "OUT.bin --tokens N --vocab V [--dtype uint16|uint32] [--seed S]",
               "Generate a Zipf-like token stream (a flat nanoGPT-style token file).", sample_tokens_cmd);

}  // namespace stoker::cli
