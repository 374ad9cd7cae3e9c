// Synthetic inputs: an ImageNet-like ImageFolder and a Zipf-like token stream.
//
// Everything is drawn from splitmix64/xoshiro256** seeded from (seed, item index), never
// from std:: distributions (whose output differs between standard libraries), so the
// same seed gives byte-identical files everywhere and for any thread count. Images are
// generated and encoded on worker threads.
#include <fcntl.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "decode/crop.h"
#include "pack/ordered_pool.h"
#include "pack/pack_common.h"
#include "pack/progress.h"
#include "stoker/error.h"
#include "stoker/pack.h"
#include "util/bytes.h"

namespace stoker {

using namespace internal;

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The decoder's xoshiro256** (decode/crop.h), with the inclusive integer range the sample
// generator draws sizes with.
class Rng : public SampleRng {
 public:
  using SampleRng::SampleRng;
  int range(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
};

struct TjCompressor {
  tjhandle h = tjInitCompress();
  ~TjCompressor() {
    if (h) tjDestroy(h);
  }
};

// Value noise: random values on a grid of `cell` pixels, bilinearly interpolated.
class ValueNoise {
 public:
  ValueNoise(int w, int h, int cell, Rng& rng) : cell_(cell), gw_(w / cell + 2), gh_(h / cell + 2) {
    grid_.resize(static_cast<size_t>(gw_) * gh_);
    for (float& v : grid_) v = static_cast<float>(rng.uniform() * 2 - 1);
  }
  // Adds amp * noise for row y into out[0..w).
  void add_row(int y, int w, float amp, float* out) const {
    const int gy = y / cell_;
    const float fy = static_cast<float>(y % cell_) / cell_;
    const float* r0 = &grid_[static_cast<size_t>(gy) * gw_];
    const float* r1 = r0 + gw_;
    for (int x = 0; x < w; ++x) {
      const int gx = x / cell_;
      const float fx = static_cast<float>(x % cell_) / cell_;
      const float a = r0[gx] + (r0[gx + 1] - r0[gx]) * fx;
      const float b = r1[gx] + (r1[gx + 1] - r1[gx]) * fx;
      out[x] += amp * (a + (b - a) * fy);
    }
  }

 private:
  int cell_, gw_, gh_;
  std::vector<float> grid_;
};

// Tuned so that quality-90 4:2:0 files average ~85 KiB at ImageNet-like sizes.
constexpr float kGrain = 28.0f;

std::vector<uint8_t> synth_image(int w, int h, Rng& rng) {
  // Smooth base: per-channel linear gradient plus a few soft blobs.
  float base[3], gx[3], gy[3];
  for (int c = 0; c < 3; ++c) {
    base[c] = static_cast<float>(40 + rng.uniform() * 170);
    gx[c] = static_cast<float>((rng.uniform() - 0.5) * 120 / w);
    gy[c] = static_cast<float>((rng.uniform() - 0.5) * 120 / h);
  }
  struct Blob {
    float cx, cy, r2, col[3];
  };
  Blob blobs[5];
  for (Blob& b : blobs) {
    b.cx = static_cast<float>(rng.uniform() * w);
    b.cy = static_cast<float>(rng.uniform() * h);
    const float r = static_cast<float>((0.1 + rng.uniform() * 0.3) * std::min(w, h));
    b.r2 = r * r;
    for (float& c : b.col) c = static_cast<float>((rng.uniform() - 0.5) * 160);
  }
  // Texture: three octaves of value noise shared by the channels (luma-like detail)
  // plus per-channel fine grain; the detail level varies per image like real photos.
  const float detail = static_cast<float>(0.55 + rng.uniform() * 0.9);
  ValueNoise coarse(w, h, 48, rng), mid(w, h, 12, rng), fine(w, h, 3, rng);
  const float a_coarse = 30 * detail, a_mid = 22 * detail, a_fine = 24 * detail, grain = kGrain * detail;

  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  std::vector<float> tex(static_cast<size_t>(w));
  uint64_t noise_state = rng.next();
  for (int y = 0; y < h; ++y) {
    std::fill(tex.begin(), tex.end(), 0.0f);
    coarse.add_row(y, w, a_coarse, tex.data());
    mid.add_row(y, w, a_mid, tex.data());
    fine.add_row(y, w, a_fine, tex.data());
    uint8_t* row = &rgb[static_cast<size_t>(y) * w * 3];
    for (int x = 0; x < w; ++x) {
      float blob[3] = {0, 0, 0};
      for (const Blob& b : blobs) {
        const float dx = x - b.cx, dy = y - b.cy, d2 = dx * dx + dy * dy;
        if (d2 < b.r2) {
          const float k = 1 - d2 / b.r2;
          for (int c = 0; c < 3; ++c) blob[c] += k * b.col[c];
        }
      }
      const uint64_t n = splitmix64(noise_state);
      for (int c = 0; c < 3; ++c) {
        const float g = (static_cast<float>((n >> (16 * c)) & 0xFFFF) / 65535.0f - 0.5f) * 2 * grain;
        const float v = base[c] + gx[c] * x + gy[c] * y + blob[c] + tex[x] + g;
        row[3 * x + c] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return rgb;
}

// ImageNet-like sizes: mostly 500 px long side and ~375 short, some portrait, a few
// smaller and a few larger.
void pick_size(Rng& rng, int& w, int& h) {
  const double u = rng.uniform();
  int longer = 500, shorter = rng.range(333, 375);
  if (u < 0.08) {  // smaller
    shorter = rng.range(120, 300);
    longer = shorter * rng.range(100, 150) / 100;
  } else if (u < 0.12) {  // larger
    shorter = rng.range(450, 900);
    longer = shorter * rng.range(100, 150) / 100;
  } else if (u < 0.15) {  // square
    longer = shorter = rng.range(300, 500);
  }
  if (rng.uniform() < 0.22) std::swap(longer, shorter);  // portrait
  w = longer;
  h = shorter;
}

}  // namespace

PackSummary make_sample_imagefolder(const std::string& out, const SampleImageFolderOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.images == 0) throw_error(ErrorCode::kInvalidArgument, "--images must be at least 1");
  if (options.classes == 0 || options.classes > 100000)
    throw_error(ErrorCode::kInvalidArgument, "--classes must be 1..100000");
  if (options.quality < 1 || options.quality > 100) throw_error(ErrorCode::kInvalidArgument, "quality must be 1..100");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw_error(ErrorCode::kIoError, "create directory " + out + ": " + ec.message());
  std::vector<std::string> dirs(options.classes);
  for (uint32_t c = 0; c < options.classes; ++c) {
    char name[32];
    std::snprintf(name, sizeof name, "class_%04u", c);
    dirs[c] = out + "/" + name;
    std::filesystem::create_directories(dirs[c], ec);
    if (ec) throw_error(ErrorCode::kIoError, "create directory " + dirs[c] + ": " + ec.message());
  }

  auto produce = [&](size_t i) -> uint64_t {
    uint64_t s = options.seed * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xD1B54A32D192ED03ull;
    Rng rng(splitmix64(s));
    int w = 0, h = 0;
    pick_size(rng, w, h);
    const bool progressive = rng.uniform() < options.progressive_frac;
    std::vector<uint8_t> rgb = synth_image(w, h, rng);
    // TurboJPEG 2.1 leaves Huffman optimisation switched on in a handle that has
    // written a progressive JPEG, so progressive files get a handle of their own:
    // otherwise later baseline files would depend on which thread wrote what.
    thread_local TjCompressor tj_baseline;
    std::optional<TjCompressor> tj_progressive;
    if (progressive) tj_progressive.emplace();
    TjCompressor& tj = progressive ? *tj_progressive : tj_baseline;
    if (!tj.h) throw_error(ErrorCode::kResourceExhausted, "cannot create a TurboJPEG compressor");
    unsigned char* jpeg = nullptr;
    unsigned long size = 0;
    if (tjCompress2(tj.h, rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &size, TJSAMP_420, options.quality,
                    progressive ? TJFLAG_PROGRESSIVE : 0) != 0)
      throw_error(ErrorCode::kInvalidArgument, std::string("JPEG encode failed: ") + tjGetErrorStr2(tj.h));
    struct Free {
      unsigned char* p;
      ~Free() { tjFree(p); }
    } guard{jpeg};
    char name[48];
    std::snprintf(name, sizeof name, "/img_%08llu.jpg", static_cast<unsigned long long>(i));
    write_whole_file(dirs[i % options.classes] + name, std::span<const uint8_t>(jpeg, size));
    return size;
  };
  PackSummary summary;
  ProgressReporter progress("sample imagefolder", options.images, 0, options.progress);
  const int threads = resolve_threads(options.threads);
  ordered_parallel_for<uint64_t>(options.images, threads, static_cast<size_t>(threads) * 4, produce,
                                 [&](size_t i, uint64_t&& bytes) {
                                   summary.input_bytes += bytes;
                                   progress.update(i + 1, summary.input_bytes);
                                 });
  progress.finish();
  summary.records = options.images;
  summary.bytes = summary.input_bytes;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

PackSummary make_sample_tokens(const std::string& path, const SampleTokensOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.dtype != DType::kUint16 && options.dtype != DType::kUint32)
    throw_error(ErrorCode::kInvalidArgument, "sample tokens: --dtype must be uint16 or uint32");
  if (options.vocab < 2) throw_error(ErrorCode::kInvalidArgument, "--vocab must be at least 2");
  if (options.dtype == DType::kUint16 && options.vocab > 65536)
    throw_error(ErrorCode::kInvalidArgument, "--vocab " + std::to_string(options.vocab) + " does not fit uint16");
  const size_t elem = dtype_size(options.dtype);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) throw errno_error("create " + path, errno);

  // Zipf (exponent ~1) ranks by inverse transform of a log-uniform draw, plus copies
  // of recent phrases: repetition is what makes text compress.
  uint64_t s = options.seed ^ 0x5EED0F70C3E45ull;
  Rng rng(splitmix64(s));
  const double log_v = std::log(static_cast<double>(options.vocab) + 1.0);
  constexpr size_t kHistory = 1 << 16;
  std::vector<uint32_t> history(kHistory);
  uint64_t produced = 0;
  std::vector<uint8_t> buf;
  buf.reserve(1 << 20);
  auto emit = [&](uint32_t t) {
    history[produced % kHistory] = t;
    ++produced;
    uint8_t b[4];
    put_u32(b, t);
    buf.insert(buf.end(), b, b + elem);
    if (buf.size() >= (1 << 20)) {
      write_full(fd.get(), buf.data(), buf.size(), path);
      buf.clear();
    }
  };
  while (produced < options.tokens) {
    if (produced > 64 && rng.uniform() < 0.12) {
      const uint64_t back = std::min<uint64_t>(produced, kHistory) - 1;
      const uint64_t len = static_cast<uint64_t>(rng.range(3, 24));
      uint64_t from = produced - 1 - rng.next() % back;
      for (uint64_t k = 0; k < len && produced < options.tokens; ++k)
        emit(history[(from + k) % kHistory]);
    } else {
      uint64_t rank = static_cast<uint64_t>(std::exp(rng.uniform() * log_v)) - 1;
      emit(static_cast<uint32_t>(std::min<uint64_t>(rank, options.vocab - 1)));
    }
  }
  if (!buf.empty()) write_full(fd.get(), buf.data(), buf.size(), path);
  if (::fsync(fd.get()) != 0) throw errno_error("fsync " + path, errno);
  PackSummary summary;
  summary.records = options.tokens;
  summary.bytes = summary.input_bytes = options.tokens * elem;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return summary;
}

}  // namespace stoker
