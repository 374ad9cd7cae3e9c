// Synthetic inputs: an ImageNet-like ImageFolder, WebDataset tars of multi-field samples
// (image, mask, class, caption, features) and a Zipf-like token stream.
//
// Everything is drawn from splitmix64/xoshiro256** seeded from (seed, item index), never
// from std:: distributions (whose output differs between standard libraries), so the
// same seed gives byte-identical files everywhere and for any thread count. Images are
// generated and encoded on worker threads.
#include <fcntl.h>
#include <archive.h>
#include <archive_entry.h>
#include <spng.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// Baseline (or progressive) 4:2:0 JPEG of `rgb`.
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int w, int h, int quality, bool progressive) {
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
  if (tjCompress2(tj.h, rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &size, TJSAMP_420, quality,
                  progressive ? TJFLAG_PROGRESSIVE : 0) != 0)
    throw_error(ErrorCode::kInvalidArgument, std::string("JPEG encode failed: ") + tjGetErrorStr2(tj.h));
  struct Free {
    unsigned char* p;
    ~Free() { tjFree(p); }
  } guard{jpeg};
  return std::vector<uint8_t>(jpeg, jpeg + size);
}

// An 8-bit gray PNG of `gray` (libspng's encoder).
std::vector<uint8_t> encode_png_gray(const std::vector<uint8_t>& gray, int w, int h) {
  struct Ctx {
    spng_ctx* c = spng_ctx_new(SPNG_CTX_ENCODER);
    ~Ctx() { spng_ctx_free(c); }
  } enc;
  if (!enc.c) throw_error(ErrorCode::kResourceExhausted, "cannot create a PNG encoder");
  spng_set_option(enc.c, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(w);
  ihdr.height = static_cast<uint32_t>(h);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_GRAYSCALE;
  int ret = spng_set_ihdr(enc.c, &ihdr);
  if (ret == 0) ret = spng_encode_image(enc.c, gray.data(), gray.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  size_t len = 0;
  void* buf = ret == 0 ? spng_get_png_buffer(enc.c, &len, &ret) : nullptr;
  if (!buf) throw_error(ErrorCode::kInvalidArgument, std::string("PNG encode failed: ") + spng_strerror(ret));
  std::vector<uint8_t> png(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + len);
  std::free(buf);
  return png;
}

// A segmentation-like mask: background 0 and a few filled ellipses of class values.
std::vector<uint8_t> synth_mask(int w, int h, uint32_t classes, Rng& rng) {
  std::vector<uint8_t> m(static_cast<size_t>(w) * h, 0);
  const int n = rng.range(1, 4);
  for (int k = 0; k < n; ++k) {
    const double cx = rng.uniform() * w, cy = rng.uniform() * h;
    const double rx = (0.1 + rng.uniform() * 0.35) * w, ry = (0.1 + rng.uniform() * 0.35) * h;
    const uint8_t v = static_cast<uint8_t>(1 + rng.next() % std::min<uint32_t>(classes, 255));
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const double dx = (x - cx) / rx, dy = (y - cy) / ry;
        if (dx * dx + dy * dy <= 1) m[static_cast<size_t>(y) * w + x] = v;
      }
  }
  return m;
}

// A caption of 6-16 words from a small vocabulary.
std::string synth_caption(Rng& rng) {
  static const char* const kWords[] = {"a", "the", "small", "large", "red", "green", "blue", "dog", "cat", "car",
                                       "tree", "house", "river", "road", "sits", "runs", "near", "under", "beside",
                                       "on", "with", "two", "bright", "dark", "old", "new", "field", "sky", "café"};
  constexpr int kN = sizeof kWords / sizeof kWords[0];
  std::string out;
  const int n = rng.range(6, 16);
  for (int i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[rng.next() % kN];
  }
  out += '.';
  return out;
}

// A .npy (format 1.0) of float32 `v`, shape (v.size(),).
std::vector<uint8_t> encode_npy_f32(const std::vector<float>& v) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(v.size()) + ",), }";
  // Magic (6), version (2), length (2), then the dict padded with spaces and a newline
  // so that the data starts on a 64-byte boundary.
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::vector<uint8_t> out(10 + dict.size() + 4 * v.size());
  const uint8_t magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  std::memcpy(out.data(), magic, 8);
  out[8] = static_cast<uint8_t>(dict.size() & 0xFF);
  out[9] = static_cast<uint8_t>(dict.size() >> 8);
  std::memcpy(out.data() + 10, dict.data(), dict.size());
  uint8_t* p = out.data() + 10 + dict.size();
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    put_u32(p, bits);
    p += 4;
  }
  return out;
}

struct ArchiveWriter {
  struct archive* a = archive_write_new();
  ~ArchiveWriter() {
    if (a) archive_write_free(a);
  }
};

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
    const std::vector<uint8_t> jpeg = encode_jpeg(rgb, w, h, options.quality, progressive);
    char name[48];
    std::snprintf(name, sizeof name, "/img_%08llu.jpg", static_cast<unsigned long long>(i));
    write_whole_file(dirs[i % options.classes] + name, jpeg);
    return jpeg.size();
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

PackSummary make_sample_wds(const std::string& out, const SampleWdsOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.samples == 0) throw_error(ErrorCode::kInvalidArgument, "--samples must be at least 1");
  if (options.per_tar == 0) throw_error(ErrorCode::kInvalidArgument, "--per-tar must be at least 1");
  if (options.classes == 0 || options.classes > 255) throw_error(ErrorCode::kInvalidArgument, "--classes must be 1..255");
  if (options.features == 0 || options.features > 65536)
    throw_error(ErrorCode::kInvalidArgument, "--features must be 1..65536");
  if (options.quality < 1 || options.quality > 100) throw_error(ErrorCode::kInvalidArgument, "quality must be 1..100");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw_error(ErrorCode::kIoError, "create directory " + out + ": " + ec.message());

  struct Member {
    std::string ext;
    std::vector<uint8_t> bytes;
  };
  auto produce = [&](size_t i) -> std::vector<Member> {
    uint64_t s = options.seed * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xD1B54A32D192ED03ull;
    Rng rng(splitmix64(s));
    int w = 0, h = 0;
    pick_size(rng, w, h);
    const uint32_t cls = static_cast<uint32_t>(rng.next() % options.classes);
    std::vector<Member> m;
    m.push_back({"jpg", encode_jpeg(synth_image(w, h, rng), w, h, options.quality, false)});
    m.push_back({"png", encode_png_gray(synth_mask(w, h, options.classes, rng), w, h)});
    const std::string c = std::to_string(cls);
    m.push_back({"cls", std::vector<uint8_t>(c.begin(), c.end())});
    const std::string t = synth_caption(rng);
    m.push_back({"txt", std::vector<uint8_t>(t.begin(), t.end())});
    std::vector<float> f(options.features);
    for (float& x : f) x = static_cast<float>(rng.uniform() * 2 - 1);
    m.push_back({"npy", encode_npy_f32(f)});
    return m;
  };

  PackSummary summary;
  std::optional<ArchiveWriter> tar;
  std::string tar_path;
  auto close_tar = [&] {
    if (tar && archive_write_close(tar->a) != ARCHIVE_OK)
      throw_error(ErrorCode::kIoError, tar_path + ": " + archive_error_string(tar->a));
    tar.reset();
  };
  ProgressReporter progress("sample wds", options.samples, 0, options.progress);
  const int threads = resolve_threads(options.threads);
  ordered_parallel_for<std::vector<Member>>(
      options.samples, threads, static_cast<size_t>(threads) * 4, produce, [&](size_t i, std::vector<Member>&& m) {
        if (i % options.per_tar == 0) {
          close_tar();
          char name[48];
          std::snprintf(name, sizeof name, "/shard-%06llu.tar", static_cast<unsigned long long>(i / options.per_tar));
          tar_path = out + name;
          tar.emplace();
          if (!tar->a || archive_write_set_format_ustar(tar->a) != ARCHIVE_OK ||
              archive_write_open_filename(tar->a, tar_path.c_str()) != ARCHIVE_OK)
            throw_error(ErrorCode::kIoError, "create " + tar_path + ": " +
                                                 (tar->a ? archive_error_string(tar->a) : "no archive writer"));
        }
        char key[48];
        std::snprintf(key, sizeof key, "sample_%08llu", static_cast<unsigned long long>(i));
        for (const Member& x : m) {
          const std::string path = std::string(key) + "." + x.ext;
          struct Entry {
            archive_entry* e = archive_entry_new();
            ~Entry() { archive_entry_free(e); }
          } e;
          archive_entry_set_pathname(e.e, path.c_str());
          archive_entry_set_filetype(e.e, AE_IFREG);
          archive_entry_set_perm(e.e, 0644);
          archive_entry_set_size(e.e, static_cast<la_int64_t>(x.bytes.size()));
          if (archive_write_header(tar->a, e.e) != ARCHIVE_OK ||
              archive_write_data(tar->a, x.bytes.data(), x.bytes.size()) != static_cast<la_ssize_t>(x.bytes.size()))
            throw_error(ErrorCode::kIoError, tar_path + ": " + path + ": " + archive_error_string(tar->a));
          summary.input_bytes += x.bytes.size();
        }
        progress.update(i + 1, summary.input_bytes);
      });
  close_tar();
  progress.finish();
  summary.records = options.samples;
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
