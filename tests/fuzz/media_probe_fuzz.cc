// libFuzzer target: arbitrary bytes through the pack-time container probe
// (stoker/media.h, probe_media: libavformat over the bytes in memory, then the decoder)
// and, when a file is accepted, a clip decode of its first and last frames through
// VideoDecoder (audio: a window and the whole track through AudioDecoder) over the
// index just made.
//
// Whatever the input, neither may crash, hang, leak (what stoker allocates: libav's own
// internals aside) or read out of bounds; a refusal is a stoker::Error. An accepted
// index must parse back from the value it makes.
//
// Build: CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSTOKER_BUILD_FUZZ=ON
//        -DSTOKER_SANITIZE=address,undefined && cmake --build build-fuzz --target media_probe_fuzz
// Run:   ./build-fuzz/media_probe_fuzz -max_len=65536 tests/fuzz/corpus/media_probe
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "decode/audio_decode.h"
#include "decode/clip_plan.h"
#include "decode/video_decode.h"
#include "stoker/error.h"
#include "stoker/media.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  for (stoker::MediaKind kind : {stoker::MediaKind::kVideo, stoker::MediaKind::kAudio}) {
    try {
      stoker::MediaProbeOptions o;
      o.max_frames = 4096;
      const stoker::MediaInfo info = stoker::probe_media(in, kind, o);
      stoker::MediaInfo back;
      stoker::parse_media_value(stoker::make_media_value(info, in), back);
      if (!(back == info)) std::abort();
      if (kind == stoker::MediaKind::kAudio) {
        if (info.seconds(info.duration) > 60) continue;
        stoker::internal::AudioDecoder audio;
        std::vector<float> window(2 * 800), all;
        audio.decode_window(in, info, 0.05, 8000, 2, 800, window.data());
        audio.decode_all(in, info, 8000, 1, all);
        continue;
      }
      if (info.width > 4096 || info.height > 4096) continue;
      stoker::internal::ClipPlan p;
      p.by_frame = true;
      p.at = {0, info.frames - 1};
      p.w = stoker::internal::upright_width(info), p.h = stoker::internal::upright_height(info);
      std::vector<uint8_t> out(2 * 16 * 16 * 3);
      double pts[2];
      stoker::internal::VideoDecoder dec;
      dec.decode(in, info, p, 16, 16, out.data(), pts);
    } catch (const stoker::Error&) {
    }
  }
  return 0;
}
