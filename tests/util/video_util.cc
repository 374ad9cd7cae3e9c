#include "util/video_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace stoker::testing {

bool have_ffmpeg() { return std::system("ffmpeg -hide_banner -version > /dev/null 2>&1") == 0; }

std::vector<uint8_t> make_video(const TempDir& dir, const std::string& name, const std::string& args) {
  const std::string out = dir.str(name);
  const std::string cmd = "ffmpeg -hide_banner -loglevel error -y " + args + " " + out + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return read_file(out);
}

std::string grey(const std::string& then) {
  return "-f lavfi -i \"nullsrc=s=64x48:r=25:d=2,geq=lum='16+4*N':cb=128:cr=128" + then + "\"";
}

int grey_index(const uint8_t* rgb, size_t pixels) {
  double sum = 0;
  for (size_t i = 0; i < pixels * 3; ++i) sum += rgb[i];
  const double y = 16 + sum / (pixels * 3) * 219.0 / 255.0;
  return static_cast<int>(std::lround((y - 16) / 4));
}

std::vector<uint8_t> rotate_mp4(std::vector<uint8_t> f) {
  const uint8_t tag[] = {'t', 'k', 'h', 'd'};
  const auto it = std::search(f.begin(), f.end(), std::begin(tag), std::end(tag));
  EXPECT_NE(it, f.end());
  if (it == f.end()) return f;
  const size_t t = static_cast<size_t>(it - f.begin());
  const size_t m = t + (f[t + 4] == 1 ? 56 : 44);
  const uint32_t vals[4] = {0, 0x10000, 0, 0xFFFF0000u};  // a, b, u, c
  for (int i = 0; i < 4; ++i)
    for (int b = 0; b < 4; ++b) f[m + i * 4 + b] = static_cast<uint8_t>(vals[i] >> (24 - 8 * b));
  for (int b = 0; b < 4; ++b) f[m + 16 + b] = 0;  // d
  return f;
}

}  // namespace stoker::testing
