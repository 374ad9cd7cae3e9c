// Test videos made with Debian's ffmpeg CLI, shared by the video tests: flat grey
// frames whose level tells their index, and an mp4 given a rotation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/test_util.h"

namespace stoker::testing {

/// Whether the ffmpeg CLI runs (the tests that need it skip, saying so, without it).
bool have_ffmpeg();

/// `ffmpeg ARGS OUT` into dir (OUT = dir/name); the file's bytes. A failing command is
/// a test failure naming it.
std::vector<uint8_t> make_video(const TempDir& dir, const std::string& name, const std::string& args);

/// ffmpeg input args: 50 frames (2 s at 25 fps) of grey 16 + 4N, 64x48; `then`: more
/// filters after it.
std::string grey(const std::string& then = "");

/// The frame index a decoded grey RGB frame shows (BT.601 limited range: Y = 16 + R * 219 / 255).
int grey_index(const uint8_t* rgb, size_t pixels);

/// An mp4 with its first track's matrix set to a clockwise quarter turn (a, b, c, d =
/// 0, 1, -1, 0 in 16.16, as ffmpeg writes rotate=90).
std::vector<uint8_t> rotate_mp4(std::vector<uint8_t> f);

}  // namespace stoker::testing
