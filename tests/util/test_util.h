// Helpers shared by the test suite: scratch directories, synthetic JPEGs and files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "stoker/error.h"

namespace stoker::testing {

/// A fresh directory removed on destruction. Lives under $STOKER_TEST_TMP (set by
/// ctest to build/test-tmp) or the system temp dir.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& child = "") const {
    return child.empty() ? path_.string() : (path_ / child).string();
  }

 private:
  std::filesystem::path path_;
};

/// Sets (or, with nullopt, unsets) an environment variable for one scope; the old
/// value comes back at its end.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// The code of the stoker::Error `f` throws (its message into `message`). A test failure,
/// and kCancelled, when it throws none.
template <typename F>
ErrorCode error_code_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no stoker::Error thrown";
  return ErrorCode::kCancelled;
}

/// A smooth, deterministic RGB test picture (gradients + shapes, so JPEG keeps detail).
std::vector<uint8_t> make_rgb_image(int width, int height, uint32_t seed);

/// Encodes an RGB image with TurboJPEG. subsamp: 0=4:4:4, 1=4:2:2, 2=4:2:0, 3=gray.
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int width, int height,
                                 int quality = 85, int subsamp = 2, bool progressive = false);

/// make_rgb_image + encode_jpeg.
std::vector<uint8_t> make_jpeg(int width, int height, uint32_t seed, int quality = 85,
                               int subsamp = 2, bool progressive = false);

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_file(const std::string& path);
/// The whole file as text, "" when it cannot be read (/proc and /sys files too).
std::string read_file_text(const std::string& path);

/// The `stoker` command a test runs: STOKER_TEST_TOOL when set (another build, or the
/// tool through an emulator: tests/portability.sh), else `built` (the test's own build).
std::string test_tool(const std::string& built);

/// Writes `text` at `root` + `path` (an absolute path such as "/sys/..."), creating the
/// directories: builds the fixture sysfs/procfs trees the platform readers are fed.
void put(const TempDir& root, const std::string& path, const std::string& text);

/// Whether transparent huge pages are on (`enabled` is always or madvise).
bool thp_available();
/// THPeligible of the mapping holding `p`, from /proc/self/smaps; -1 when not found.
int thp_eligible(const void* p);

}  // namespace stoker::testing
