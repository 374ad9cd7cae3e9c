// `stoker sample imagefolder|wds|tokens`: synthetic inputs for demos, tests and benchmarks.
#include <cstdio>
#include <limits>
#include <memory>

#include "cli.h"
#include "stoker/error.h"
#include "stoker/pack.h"

namespace stoker::cli {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

struct ImageFolderArgs {
  std::string out;
  int64_t images = 1000, classes = 10, seed = 0, threads = 0;
  int quality = 90;
  double progressive_frac = SampleImageFolderOptions{}.progressive_frac;
};

int sample_imagefolder_cmd(const ImageFolderArgs& a) {
  SampleImageFolderOptions o;
  o.images = static_cast<uint64_t>(a.images);
  o.classes = static_cast<uint32_t>(a.classes);
  o.seed = static_cast<uint64_t>(a.seed);
  o.quality = a.quality;
  o.progressive_frac = a.progressive_frac;
  o.threads = static_cast<int>(a.threads);
  o.progress = true;
  PackSummary s = make_sample_imagefolder(a.out, o);
  std::printf("wrote %llu JPEGs in %u classes to %s: %s, mean %s, %.2f s\n", static_cast<unsigned long long>(s.records),
              o.classes, a.out.c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              format_bytes(static_cast<double>(s.bytes) / static_cast<double>(s.records)).c_str(), s.seconds);
  return 0;
}

struct WdsArgs {
  std::string out;
  int64_t samples = 1000, per_tar = 250, classes = 10, features = 16, seed = 0, threads = 0;
  int quality = 90;
};

int sample_wds_cmd(const WdsArgs& a) {
  SampleWdsOptions o;
  o.samples = static_cast<uint64_t>(a.samples);
  o.per_tar = static_cast<uint64_t>(a.per_tar);
  o.classes = static_cast<uint32_t>(a.classes);
  o.features = static_cast<uint32_t>(a.features);
  o.seed = static_cast<uint64_t>(a.seed);
  o.quality = a.quality;
  o.threads = static_cast<int>(a.threads);
  o.progress = true;
  PackSummary s = make_sample_wds(a.out, o);
  const uint64_t tars = (o.samples + o.per_tar - 1) / o.per_tar;
  std::printf("wrote %llu samples (jpg, png, cls, txt, npy) in %llu tars to %s: %s, %.2f s\n",
              static_cast<unsigned long long>(s.records), static_cast<unsigned long long>(tars), a.out.c_str(),
              format_bytes(static_cast<double>(s.bytes)).c_str(), s.seconds);
  return 0;
}

struct TokensArgs {
  std::string out, dtype = "uint16";
  int64_t tokens = 1 << 20, vocab = 50257, seed = 0;
};

int sample_tokens_cmd(const TokensArgs& a) {
  SampleTokensOptions o;
  o.tokens = static_cast<uint64_t>(a.tokens);
  o.vocab = static_cast<uint32_t>(a.vocab);
  o.dtype = dtype_from_name(a.dtype);
  o.seed = static_cast<uint64_t>(a.seed);
  PackSummary s = make_sample_tokens(a.out, o);
  std::printf("wrote %llu %s tokens (vocab %u) to %s: %s in %.2f s\n", static_cast<unsigned long long>(s.records),
              dtype_name(o.dtype), o.vocab, a.out.c_str(), format_bytes(static_cast<double>(s.bytes)).c_str(),
              s.seconds);
  return 0;
}

void setup(CLI::App& tool) {
  CLI::App* sample = group(tool, "sample", "Generate synthetic inputs (an ImageFolder of JPEGs, multi-field WebDataset tars, a token file).");

  auto im = std::make_shared<ImageFolderArgs>();
  CLI::App* c = sample->add_subcommand("imagefolder", "Generate an ImageNet-like synthetic ImageFolder of JPEGs (~85 KiB mean).");
  c->add_option("OUT", im->out, "directory to write")->required();
  c->add_option("--images", im->images, "images in all")->check(CLI::Range(int64_t{1}, kMax))->capture_default_str();
  c->add_option("--classes", im->classes, "class directories")->check(CLI::Range(1, 100000))->capture_default_str();
  c->add_option("--seed", im->seed, "same seed, byte-identical files")->check(non_negative())->capture_default_str();
  c->add_option("--quality", im->quality, "JPEG quality")->check(CLI::Range(1, 100))->capture_default_str();
  c->add_option("--progressive-frac", im->progressive_frac, "fraction written as progressive JPEGs")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  c->add_option("--threads", im->threads, "threads (0: every CPU)")->check(CLI::Range(0, 1024))->capture_default_str();
  on_run(c, [im] { return sample_imagefolder_cmd(*im); });

  auto wd = std::make_shared<WdsArgs>();
  c = sample->add_subcommand("wds",
                             "Generate WebDataset tars of multi-field samples: .jpg image, .png mask, .cls class, "
                             ".txt caption, .npy float32 features.");
  c->add_option("OUT", wd->out, "directory to write (shard-000000.tar, ...)")->required();
  c->add_option("--samples", wd->samples, "samples in all")->check(CLI::Range(int64_t{1}, kMax))->capture_default_str();
  c->add_option("--per-tar", wd->per_tar, "samples per tar")->check(CLI::Range(int64_t{1}, kMax))->capture_default_str();
  c->add_option("--classes", wd->classes, "class labels (mask values 1..classes)")->check(CLI::Range(1, 255))
      ->capture_default_str();
  c->add_option("--features", wd->features, "float32 features per sample (.npy)")->check(CLI::Range(1, 65536))
      ->capture_default_str();
  c->add_option("--seed", wd->seed, "same seed, byte-identical files")->check(non_negative())->capture_default_str();
  c->add_option("--quality", wd->quality, "JPEG quality")->check(CLI::Range(1, 100))->capture_default_str();
  c->add_option("--threads", wd->threads, "threads (0: every CPU)")->check(CLI::Range(0, 1024))->capture_default_str();
  on_run(c, [wd] { return sample_wds_cmd(*wd); });

  auto tk = std::make_shared<TokensArgs>();
  c = sample->add_subcommand("tokens", "Generate a Zipf-like token stream (a flat nanoGPT-style token file).");
  c->add_option("OUT", tk->out, "token file to write (OUT.bin)")->required();
  c->add_option("--tokens", tk->tokens, "stream length")->check(CLI::Range(int64_t{1}, kMax))->capture_default_str();
  c->add_option("--vocab", tk->vocab, "token values are < vocab")
      ->check(CLI::Range(int64_t{2}, int64_t{0xFFFFFFFF}))->capture_default_str();
  c->add_option("--dtype", tk->dtype, "token type")->check(CLI::IsMember({"uint16", "uint32"}))->capture_default_str();
  c->add_option("--seed", tk->seed, "same seed, same stream")->check(non_negative())->capture_default_str();
  on_run(c, [tk] { return sample_tokens_cmd(*tk); });
}

}  // namespace

STOKER_COMMAND("sample", setup);

}  // namespace stoker::cli
