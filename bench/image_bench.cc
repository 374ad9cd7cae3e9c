// Microbenchmarks of the image path (include/stoker/image.h) and the other CPU kernels
// of the loader: CRC32C and zstd.
//
// Images: 16 ImageNet-like JPEGs, 500x375, baseline 4:2:0, quality 90, ~85 KiB (a smooth
// synthetic picture plus noise and a fine pattern, so they compress like photographs).
// Every benchmark reports items_processed = images, so "items_per_second" is img/s on one
// thread. The crop benchmarks use the same sequence of RandomResizedCrop draws
// (seed = iteration number), so fused and naive paths do the same work.
//
// PNG / WebP: the same 16 pictures as 8-bit RGB PNG (libspng encoder, ~500 KiB: the
// noise does not deflate) and as lossy WebP (q 90); BM_Png_VsPlainSpng reports the
// ImageDecoder / plain-libspng throughput ratio measured alternately in one run.
//
// Run: ./build/image_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <spng.h>
#include <turbojpeg.h>
#include <webp/decode.h>
#include <zstd.h>

#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "decode/crop.h"
#include "decode/resize.h"
#include "stoker/crc32c.h"
#include "util/crc32c_portable.h"
#include "stoker/image.h"
#include "benchlib/image_encode.h"

namespace {

constexpr int kW = 500, kH = 375, kImages = 16, kSize = 224;

// Smooth gradients and a disc (like tests/util make_rgb_image) + noise + fine pattern.
std::vector<uint8_t> textured_rgb(int w, int h, uint32_t seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  std::mt19937 rng(seed);
  const double fx = 1.0 + rng() % 7, fy = 1.0 + rng() % 5, ph = (rng() % 628) / 100.0;
  const int cx = static_cast<int>(rng() % w), cy = static_cast<int>(rng() % h);
  const int r = 1 + static_cast<int>(rng() % (std::min(w, h) / 2));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const double u = static_cast<double>(x) / w, v = static_cast<double>(y) / h;
      int p[3] = {static_cast<int>(127.5 + 127 * std::sin(fx * 6.283 * u + ph)),
                  static_cast<int>(255 * v),
                  static_cast<int>(127.5 + 127 * std::cos(fy * 6.283 * (u + v)))};
      if ((x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r) {
        p[0] = 255 - p[0];
        p[2] = (x * 7 + y * 3) & 0xFF;
      }
      const int n = static_cast<int>(rng() % 25) - 12;
      const int pattern = ((x / 3 + y / 5) % 2) ? 12 : -12;
      for (int c = 0; c < 3; ++c) {
        const int val = p[c] + n + pattern + static_cast<int>(rng() % 9) - 4;
        rgb[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(val, 0, 255));
      }
    }
  }
  return rgb;
}

std::vector<uint8_t> encode(const std::vector<uint8_t>& rgb, int w, int h, bool progressive) {
  tjhandle t = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  if (tjCompress2(t, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, 90,
                  progressive ? TJFLAG_PROGRESSIVE : 0) != 0) {
    throw std::runtime_error(tjGetErrorStr2(t));
  }
  std::vector<uint8_t> j(out, out + size);
  tjFree(out);
  tjDestroy(t);
  return j;
}

struct Corpus {
  std::vector<std::vector<uint8_t>> baseline, progressive;
  size_t bytes = 0;
  Corpus() {
    for (int i = 0; i < kImages; ++i) {
      const auto rgb = textured_rgb(kW, kH, 1000 + i);
      baseline.push_back(encode(rgb, kW, kH, false));
      progressive.push_back(encode(rgb, kW, kH, true));
      bytes += baseline.back().size();
    }
  }
};

const Corpus& corpus() {
  static const Corpus c;
  return c;
}

void label_corpus(benchmark::State& state, const std::vector<std::vector<uint8_t>>& files) {
  size_t bytes = 0;
  for (const auto& f : files) bytes += f.size();
  state.SetItemsProcessed(state.iterations());
  state.counters["KiB_per_img"] = static_cast<double>(bytes) / files.size() / 1024.0;
}

stoker::ImageTransform transform(stoker::ImageTransform::Kind kind) {
  stoker::ImageTransform t;
  t.kind = kind;
  t.size = kSize;
  return t;
}

stoker::ImageTransform train_transform() { return transform(stoker::ImageTransform::Kind::kTrain); }

// The loop most decode benchmarks share: `dec` decodes `files` round-robin with `t` into
// an output of `out_bytes`, the seed being the iteration number, so every train benchmark
// makes the same sequence of RandomResizedCrop draws (eval and kNone ignore the seed).
void decode_loop(benchmark::State& state, const std::vector<std::vector<uint8_t>>& files,
                 stoker::ImageDecoder& dec, const stoker::ImageTransform& t, size_t out_bytes) {
  std::vector<uint8_t> out(out_bytes);
  uint64_t i = 0;
  for (auto _ : state) {
    dec.decode(files[i % files.size()], t, i, out.data(), out.size());
    ++i;
    benchmark::DoNotOptimize(out.data());
  }
  label_corpus(state, files);
}

constexpr size_t kFullBytes = size_t{kW} * kH * 3, kCropBytes = size_t{kSize} * kSize * 3;

// ---- decode -------------------------------------------------------------------------------

// Full-resolution RGB decode through the libjpeg API (ImageDecoder, kind kNone).
void BM_Image_FullDecode(benchmark::State& state) {
  const auto& files = state.range(0) ? corpus().progressive : corpus().baseline;
  stoker::ImageDecoder dec;
  decode_loop(state, files, dec, transform(stoker::ImageTransform::Kind::kNone), kFullBytes);
  state.SetLabel(state.range(0) ? "progressive" : "baseline");
}
BENCHMARK(BM_Image_FullDecode)->Arg(0)->Arg(1);

// TurboJPEG decode at DCT scale num/8 (1/8 .. 8/8): power-of-two factors have SIMD IDCTs,
// the others plain C ones in libjpeg-turbo 2.1.
void BM_Image_DecodeScaled(benchmark::State& state) {
  const int num = static_cast<int>(state.range(0)), denom = static_cast<int>(state.range(1));
  const auto& files = corpus().baseline;
  tjhandle h = tjInitDecompress();
  const tjscalingfactor sf{num, denom};
  const int w = TJSCALED(kW, sf), ht = TJSCALED(kH, sf);
  std::vector<uint8_t> out(static_cast<size_t>(w) * ht * 3);
  size_t i = 0;
  for (auto _ : state) {
    const auto& f = files[i++ % files.size()];
    if (tjDecompress2(h, f.data(), f.size(), out.data(), w, 0, ht, TJPF_RGB, 0) != 0) {
      state.SkipWithError(tjGetErrorStr2(h));
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  tjDestroy(h);
  label_corpus(state, files);
  state.SetLabel(std::to_string(w) + "x" + std::to_string(ht));
}
BENCHMARK(BM_Image_DecodeScaled)
    ->Args({1, 1})->Args({1, 2})->Args({1, 4})->Args({1, 8})
    ->Args({3, 8})->Args({5, 8})->Args({6, 8})->Args({7, 8});

// The fused train path: crop chosen from the header, ROI decode of its rows/columns,
// AVX2 resize to 224 with the flip folded in.
// Arg 0: baseline, 1: progressive, 2: baseline with the scalar resize.
void BM_Image_CropDecode(benchmark::State& state) {
  const auto& files = state.range(0) == 1 ? corpus().progressive : corpus().baseline;
  stoker::ImageDecoder dec(stoker::ImageDecoderOptions{.allow_simd = state.range(0) != 2});
  decode_loop(state, files, dec, train_transform(), kCropBytes);
  state.SetLabel(state.range(0) == 1 ? "progressive" : state.range(0) == 2 ? "baseline,scalar" : "baseline");
}
BENCHMARK(BM_Image_CropDecode)->Arg(0)->Arg(1)->Arg(2);

// The eval transform (Resize(256) + CenterCrop(224)) with ROI decode of the center.
void BM_Image_EvalDecode(benchmark::State& state) {
  stoker::ImageDecoder dec;
  decode_loop(state, corpus().baseline, dec, transform(stoker::ImageTransform::Kind::kEval), kCropBytes);
}
BENCHMARK(BM_Image_EvalDecode);

// Only the ROI decode of the same draws (no resize): the decode share of the fused path.
void BM_Image_RegionDecode(benchmark::State& state) {
  const auto& files = corpus().baseline;
  stoker::ImageDecoder dec;
  const auto t = train_transform();
  std::vector<uint8_t> out(kFullBytes);
  uint64_t seed = 0;
  for (auto _ : state) {
    const auto p = stoker::internal::plan_train_crop(kW, kH, t, seed);
    dec.decode_region(files[seed % files.size()], static_cast<int>(p.x0), static_cast<int>(p.y0),
                      static_cast<int>(p.w), static_cast<int>(p.h), out.data(), out.size());
    ++seed;
    benchmark::DoNotOptimize(out.data());
  }
  label_corpus(state, files);
}
BENCHMARK(BM_Image_RegionDecode);

// The naive path on the same draws: TurboJPEG full decode, then crop + resize (the
// resize reads the crop in place, so no copy is charged to it).
void BM_Image_FullDecodeCropResize(benchmark::State& state) {
  const auto& files = corpus().baseline;
  tjhandle h = tjInitDecompress();
  stoker::internal::Resizer resizer;
  const auto kernel = stoker::internal::best_resize_kernel();
  const auto t = train_transform();
  std::vector<uint8_t> full(kFullBytes), out(kCropBytes);
  uint64_t seed = 0;
  for (auto _ : state) {
    const auto& f = files[seed % files.size()];
    tjDecompress2(h, f.data(), f.size(), full.data(), kW, 0, kH, TJPF_RGB, 0);
    const auto p = stoker::internal::plan_train_crop(kW, kH, t, seed);
    stoker::internal::ResizeAxis ax{p.x0, p.w, p.clip_x0, p.clip_x1};
    stoker::internal::ResizeAxis ay{p.y0, p.h, p.clip_y0, p.clip_y1};
    resizer.resize(full.data(), kW * 3, kW, kH, ax, ay, p.flip, out.data(), kSize, kSize, kernel);
    ++seed;
    benchmark::DoNotOptimize(out.data());
  }
  tjDestroy(h);
  label_corpus(state, files);
}
BENCHMARK(BM_Image_FullDecodeCropResize);

// ---- fast crop ----------------------------------------------------------------------------

// The corpus rewritten by jpeg_for_fast_crop with target interval k (0: as it is).
const std::vector<std::vector<uint8_t>>& fast_crop_corpus(int k) {
  static std::vector<std::vector<uint8_t>> by_k[9];
  if (k == 0) return corpus().baseline;
  auto& files = by_k[k];
  if (files.empty()) {
    stoker::FastCropOptions o;
    o.target_interval = k;
    for (const auto& f : corpus().baseline) files.push_back(stoker::jpeg_for_fast_crop(f, o));
  }
  return files;
}

std::string fast_crop_label(int k) { return k == 0 ? "plain" : "fast-crop k=" + std::to_string(k); }

// The train path (as BM_Image_CropDecode, same draws) on the plain files (Arg 0) and on
// their fast-crop rewrites with target interval Arg. Compare items_per_second of one
// run with --benchmark_enable_random_interleaving=true.
void BM_Image_FastCropTrain(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  stoker::ImageDecoder dec;
  decode_loop(state, fast_crop_corpus(k), dec, train_transform(), kCropBytes);
  state.SetLabel(fast_crop_label(k));
}
BENCHMARK(BM_Image_FastCropTrain)->Arg(0)->Arg(1)->Arg(2)->Arg(4);

// The eval path (Resize(256) + CenterCrop(224)), plain vs fast crop.
void BM_Image_FastCropEval(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  stoker::ImageDecoder dec;
  decode_loop(state, fast_crop_corpus(k), dec, transform(stoker::ImageTransform::Kind::kEval), kCropBytes);
  state.SetLabel(fast_crop_label(k));
}
BENCHMARK(BM_Image_FastCropEval)->Arg(0)->Arg(1)->Arg(2)->Arg(4);

// Pack-time cost of one image: the lossless rewrite (jpeg_for_fast_crop, target 2).
void BM_Image_FastCropTranscode(benchmark::State& state) {
  const auto& files = corpus().baseline;
  size_t i = 0;
  for (auto _ : state) {
    auto out = stoker::jpeg_for_fast_crop(files[i++ % files.size()]);
    benchmark::DoNotOptimize(out.data());
  }
  label_corpus(state, files);
}
BENCHMARK(BM_Image_FastCropTranscode);

// ---- resize -------------------------------------------------------------------------------

// Resize of the train crops (same draws) from a decoded image to 224x224, flip included.
// Arg 1: the platform's SIMD kernel (AVX2 on x86-64, NEON on aarch64); 0: scalar.
void BM_Image_Resize(benchmark::State& state) {
  const bool simd = state.range(0) != 0;
  const auto kernel = simd ? stoker::internal::best_resize_kernel() : stoker::internal::ResizeKernel::kScalar;
  if (simd && kernel == stoker::internal::ResizeKernel::kScalar) {
    state.SkipWithError("no SIMD resize kernel on this CPU");
    return;
  }
  stoker::ImageDecoder dec;
  stoker::ImageTransform none;
  none.kind = stoker::ImageTransform::Kind::kNone;
  std::vector<uint8_t> full(kFullBytes), out(kCropBytes);
  dec.decode(corpus().baseline[0], none, 0, full.data(), full.size());
  stoker::internal::Resizer resizer;
  const auto t = train_transform();
  uint64_t seed = 0;
  for (auto _ : state) {
    const auto p = stoker::internal::plan_train_crop(kW, kH, t, seed++);
    stoker::internal::ResizeAxis ax{p.x0, p.w, p.clip_x0, p.clip_x1};
    stoker::internal::ResizeAxis ay{p.y0, p.h, p.clip_y0, p.clip_y1};
    resizer.resize(full.data(), kW * 3, kW, kH, ax, ay, p.flip, out.data(), kSize, kSize, kernel);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(kernel == stoker::internal::ResizeKernel::kAvx2   ? "avx2"
                 : kernel == stoker::internal::ResizeKernel::kNeon ? "neon"
                                                                   : "scalar");
}
BENCHMARK(BM_Image_Resize)->Arg(1)->Arg(0);

// ---- CRC32C and zstd ----------------------------------------------------------------------

// The hardware path where the CPU has one (SSE4.2, ARMv8 CRC32), against the portable
// slicing-by-8 table loop on the same bytes.
template <bool kPortable>
void crc32c_loop(benchmark::State& state) {
  std::vector<uint8_t> buf(static_cast<size_t>(state.range(0)));
  std::mt19937 rng(1);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = kPortable ? stoker::internal::crc32c_extend_portable(crc, buf.data(), buf.size())
                    : stoker::crc32c_extend(crc, buf.data(), buf.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(buf.size()));
#if defined(__aarch64__)
  const char* hw = "armv8 crc32";
#else
  const char* hw = "sse4.2";
#endif
  state.SetLabel(kPortable || !stoker::crc32c_is_hardware() ? "portable" : hw);
}
void BM_Crc32c(benchmark::State& state) { crc32c_loop<false>(state); }
void BM_Crc32c_Portable(benchmark::State& state) { crc32c_loop<true>(state); }
BENCHMARK(BM_Crc32c)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_Crc32c_Portable)->Arg(4096)->Arg(1 << 20);

// 1 MiB of uint16 "tokens" with a Zipf-like distribution over a 50k vocabulary, in
// runs of repeated phrases, compressed at level 3; decompression into a fixed buffer.
void BM_Zstd_Decompress(benchmark::State& state) {
  constexpr size_t kTokens = (1 << 20) / 2;
  std::vector<uint16_t> tokens(kTokens);
  std::mt19937 rng(7);
  std::vector<uint16_t> phrase;
  for (size_t i = 0; i < kTokens;) {
    if (!phrase.empty() && rng() % 4 == 0) {  // repeat an earlier phrase
      for (uint16_t tk : phrase) {
        if (i < kTokens) tokens[i++] = tk;
      }
      continue;
    }
    phrase.clear();
    const int len = 2 + static_cast<int>(rng() % 12);
    for (int k = 0; k < len && i < kTokens; ++k) {
      const double u = (rng() + 1.0) / 4294967297.0;
      const auto tk = static_cast<uint16_t>(std::min(49999.0, std::pow(u, -1.1) - 1.0));
      tokens[i++] = tk;
      phrase.push_back(tk);
    }
  }
  const size_t raw = tokens.size() * 2;
  std::vector<uint8_t> comp(ZSTD_compressBound(raw));
  const size_t csize = ZSTD_compress(comp.data(), comp.size(), tokens.data(), raw, 3);
  if (ZSTD_isError(csize)) {
    state.SkipWithError(ZSTD_getErrorName(csize));
    return;
  }
  std::vector<uint8_t> out(raw);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  for (auto _ : state) {
    const size_t n = ZSTD_decompressDCtx(dctx, out.data(), out.size(), comp.data(), csize);
    if (n != raw) {
      state.SkipWithError("zstd decompressed a different size");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  ZSTD_freeDCtx(dctx);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(raw));
  state.counters["ratio"] = static_cast<double>(raw) / csize;
}
BENCHMARK(BM_Zstd_Decompress);

// ---- PNG and WebP ----------------------------------------------------------------------

struct RasterCorpus {
  std::vector<std::vector<uint8_t>> png, webp;
  RasterCorpus() {
    for (int i = 0; i < kImages; ++i) {
      const auto rgb = textured_rgb(kW, kH, 1000 + i);
      png.push_back(stoker::testing::encode_png_rgb(rgb, kW, kH));
      webp.push_back(stoker::testing::encode_webp_rgb(rgb, kW, kH, false, 90));
    }
  }
};

const RasterCorpus& raster_corpus() {
  static const RasterCorpus c;
  return c;
}

// The plain loop ImageDecoder is measured against: what a user writes with libspng
// alone (one context per image, RGB8 into a reused buffer).
void plain_spng_decode(const std::vector<uint8_t>& png, std::vector<uint8_t>& out) {
  spng_ctx* ctx = spng_ctx_new(0);
  spng_set_png_buffer(ctx, png.data(), png.size());
  size_t len = 0;
  spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &len);
  out.resize(len);
  if (spng_decode_image(ctx, out.data(), len, SPNG_FMT_RGB8, 0) != 0) {
    spng_ctx_free(ctx);
    throw std::runtime_error("spng_decode_image failed");
  }
  spng_ctx_free(ctx);
}

void BM_Png_PlainSpng(benchmark::State& state) {
  const auto& files = raster_corpus().png;
  std::vector<uint8_t> out;
  size_t i = 0;
  for (auto _ : state) {
    plain_spng_decode(files[i++ % files.size()], out);
    benchmark::DoNotOptimize(out.data());
  }
  label_corpus(state, files);
}
BENCHMARK(BM_Png_PlainSpng);

// ImageDecoder kNone on a PNG: sniffing, limits, the IEND check, full RGB decode.
void BM_Png_FullDecode(benchmark::State& state) {
  stoker::ImageDecoder dec;
  decode_loop(state, raster_corpus().png, dec, transform(stoker::ImageTransform::Kind::kNone), kFullBytes);
}
BENCHMARK(BM_Png_FullDecode);

// The two above alternated image by image, each timed in thread CPU time: "ratio" is
// ImageDecoder throughput over plain libspng throughput, both under the same load.
void BM_Png_VsPlainSpng(benchmark::State& state) {
  const auto& files = raster_corpus().png;
  stoker::ImageDecoder dec;
  stoker::ImageTransform t;
  t.kind = stoker::ImageTransform::Kind::kNone;
  std::vector<uint8_t> a(kFullBytes), b;
  double ta = 0, tb = 0;
  size_t i = 0;
  // Thread CPU time: on a shared machine wall time also counts other processes' turns.
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  };
  for (auto _ : state) {
    const auto& f = files[i++ % files.size()];
    const bool a_first = i % 2 == 0;  // alternate the order too (cache warmth)
    for (int k = 0; k < 2; ++k) {
      const double t0 = cpu_now();
      if ((k == 0) == a_first) {
        dec.decode(f, t, 0, a.data(), a.size());
        ta += cpu_now() - t0;
      } else {
        plain_spng_decode(f, b);
        tb += cpu_now() - t0;
      }
    }
    benchmark::DoNotOptimize(a.data());
    benchmark::DoNotOptimize(b.data());
  }
  label_corpus(state, files);
  state.counters["ratio"] = ta > 0 ? tb / ta : 0;
}
BENCHMARK(BM_Png_VsPlainSpng);

// RandomResizedCrop to 224 from a PNG (full decode, then crop + resize).
void BM_Png_CropDecode(benchmark::State& state) {
  stoker::ImageDecoder dec;
  decode_loop(state, raster_corpus().png, dec, train_transform(), kCropBytes);
}
BENCHMARK(BM_Png_CropDecode);

// WebP: plain WebPDecodeRGBInto, ImageDecoder full decode, and RandomResizedCrop (which
// decodes only the crop, widened, through libwebp's cropping).
void BM_Webp_PlainLibwebp(benchmark::State& state) {
  const auto& files = raster_corpus().webp;
  std::vector<uint8_t> out(kFullBytes);
  size_t i = 0;
  for (auto _ : state) {
    const auto& f = files[i++ % files.size()];
    if (WebPDecodeRGBInto(f.data(), f.size(), out.data(), out.size(), kW * 3) == nullptr) {
      state.SkipWithError("WebPDecodeRGBInto failed");
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  label_corpus(state, files);
}
BENCHMARK(BM_Webp_PlainLibwebp);

void BM_Webp_Decode(benchmark::State& state) {
  stoker::ImageDecoder dec;
  const auto t = transform(state.range(0) ? stoker::ImageTransform::Kind::kTrain : stoker::ImageTransform::Kind::kNone);
  decode_loop(state, raster_corpus().webp, dec, t, kFullBytes);
  state.SetLabel(state.range(0) ? "train crop 224" : "full");
}
BENCHMARK(BM_Webp_Decode)->Arg(0)->Arg(1);

}  // namespace
