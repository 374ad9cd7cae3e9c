#include "util/test_util.h"

#include <turbojpeg.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace stoker::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  const char* root = std::getenv("STOKER_TEST_TMP");
  fs::path base = root ? fs::path(root) : fs::temp_directory_path();
  fs::create_directories(base);
  path_ = base / ("t" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<uint8_t> make_rgb_image(int width, int height, uint32_t seed) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  std::mt19937 rng(seed);
  const double fx = 1.0 + rng() % 7, fy = 1.0 + rng() % 5, ph = (rng() % 628) / 100.0;
  const int cx = rng() % std::max(1, width), cy = rng() % std::max(1, height);
  const int r = 1 + static_cast<int>(rng() % std::max(1, std::min(width, height) / 2));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
      const double u = static_cast<double>(x) / width, v = static_cast<double>(y) / height;
      p[0] = static_cast<uint8_t>(127.5 + 127 * std::sin(fx * 6.283 * u + ph));
      p[1] = static_cast<uint8_t>(255 * v);
      p[2] = static_cast<uint8_t>(127.5 + 127 * std::cos(fy * 6.283 * (u + v)));
      const int dx = x - cx, dy = y - cy;
      if (dx * dx + dy * dy < r * r) {
        p[0] = 255 - p[0];
        p[2] = static_cast<uint8_t>((x * 7 + y * 3) & 0xFF);
      }
    }
  }
  return rgb;
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int width, int height,
                                 int quality, int subsamp, bool progressive) {
  tjhandle h = tjInitCompress();
  if (!h) throw std::runtime_error("tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  int ss = subsamp == 0 ? TJSAMP_444 : subsamp == 1 ? TJSAMP_422 : subsamp == 2 ? TJSAMP_420 : TJSAMP_GRAY;
  int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  if (tjCompress2(h, rgb.data(), width, 0, height, TJPF_RGB, &out, &size, ss, quality, flags) != 0) {
    std::string err = tjGetErrorStr2(h);
    tjDestroy(h);
    throw std::runtime_error("tjCompress2: " + err);
  }
  std::vector<uint8_t> jpeg(out, out + size);
  tjFree(out);
  tjDestroy(h);
  return jpeg;
}

std::vector<uint8_t> make_jpeg(int width, int height, uint32_t seed, int quality, int subsamp,
                               bool progressive) {
  return encode_jpeg(make_rgb_image(width, height, seed), width, height, quality, subsamp,
                     progressive);
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string read_file_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string test_tool(const std::string& built) {
  const char* e = std::getenv("STOKER_TEST_TOOL");
  return e && *e ? e : built;
}

void put(const TempDir& root, const std::string& path, const std::string& text) {
  const std::filesystem::path p = root.path() / path.substr(path.rfind('/', 0) == 0 ? 1 : 0);
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

bool thp_available() {
  const std::string thp = read_file_text("/sys/kernel/mm/transparent_hugepage/enabled");
  return !thp.empty() && thp.find("[never]") == std::string::npos;
}

int thp_eligible(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::istringstream smaps(read_file_text("/proc/self/smaps"));
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    // A mapping's header: "lo-hi perms offset dev inode [path]"; its fields follow.
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::atoi(line.c_str() + 12);
    }
  }
  return -1;
}

ScopedEnv::ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
  if (const char* old = std::getenv(name_.c_str())) old_ = old;
  if (value)
    ::setenv(name_.c_str(), value->c_str(), 1);
  else
    ::unsetenv(name_.c_str());
}

ScopedEnv::~ScopedEnv() {
  if (old_)
    ::setenv(name_.c_str(), old_->c_str(), 1);
  else
    ::unsetenv(name_.c_str());
}

}  // namespace stoker::testing
