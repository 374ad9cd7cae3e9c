// _stoker.VideoClipSpec and AudioClipSpec (the clips' parameters), _stoker.probe_media (what the
// pack-time probe finds in a file: the media index, as a dict) and _stoker.reencode_video.
#include <pybind11/stl.h>

#include "bindings.h"
#include "stoker/error.h"
#include "stoker/media.h"

namespace stoker::python {

VideoReencodeSpec video_reencode_from(const py::object& spec) {
  VideoReencodeSpec s;
  if (spec.is_none()) return s;
  if (!py::isinstance<py::dict>(spec))
    throw py::type_error("video_reencode must be None or a dict {gop, max_side, fps, crf, encoder}");
  for (const auto& [k, v] : spec.cast<py::dict>()) {
    const std::string key = k.cast<std::string>();
    if (key == "gop") s.gop = v.cast<int>();
    else if (key == "max_side") s.max_side = v.is_none() ? 0 : v.cast<int>();
    else if (key == "fps") s.fps = v.is_none() ? 0 : v.cast<double>();
    else if (key == "crf") s.crf = v.cast<int>();
    else if (key == "encoder") s.encoder = v.cast<std::string>();
    else throw py::value_error("video_reencode: unknown key '" + key + "' (gop, max_side, fps, crf, encoder)");
  }
  if (s.gop < 1) throw py::value_error("video_reencode needs gop >= 1");
  s.check();
  return s;
}

void init_media(py::module_& m) {
  py::class_<VideoClipSpec> v(m, "VideoClipSpec", "A VideoClip's parameters (see include/stoker/media.h).");
  v.def(py::init<>())
      .def_readwrite("frames", &VideoClipSpec::frames)
      .def_readwrite("fps", &VideoClipSpec::fps)
      .def_readwrite("stride", &VideoClipSpec::stride)
      .def_readwrite("clips", &VideoClipSpec::clips)
      .def_readwrite("height", &VideoClipSpec::height)
      .def_readwrite("width", &VideoClipSpec::width)
      .def_readwrite("scale_min", &VideoClipSpec::scale_min)
      .def_readwrite("scale_max", &VideoClipSpec::scale_max)
      .def_readwrite("ratio_min", &VideoClipSpec::ratio_min)
      .def_readwrite("ratio_max", &VideoClipSpec::ratio_max)
      .def_readwrite("flip_prob", &VideoClipSpec::flip_prob)
      .def_readwrite("audio_rate", &VideoClipSpec::audio_rate)
      .def_readwrite("audio_mono", &VideoClipSpec::audio_mono)
      .def_property(
          "crop",
          [](const VideoClipSpec& s) {
            return std::string(s.crop == VideoClipSpec::Crop::kRandom ? "random"
                               : s.crop == VideoClipSpec::Crop::kCenter ? "center" : "none");
          },
          [](VideoClipSpec& s, const std::string& c) {
            if (c == "random") s.crop = VideoClipSpec::Crop::kRandom;
            else if (c == "center") s.crop = VideoClipSpec::Crop::kCenter;
            else if (c == "none") s.crop = VideoClipSpec::Crop::kNone;
            else throw_error(ErrorCode::kInvalidArgument, "crop must be 'random', 'center' or 'none', got '" + c + "'");
          });

  py::class_<AudioClipSpec>(m, "AudioClipSpec", "An AudioClip's parameters (see include/stoker/media.h).")
      .def(py::init<>())
      .def_readwrite("sample_rate", &AudioClipSpec::sample_rate)
      .def_readwrite("mono", &AudioClipSpec::mono)
      .def_readwrite("seconds", &AudioClipSpec::seconds);

  m.attr("media_available") = media_available();
  m.def(
      "probe_media",
      [](py::bytes data, const std::string& kind) {
        if (kind != "video" && kind != "audio")
          throw_error(ErrorCode::kInvalidArgument, "kind must be 'video' or 'audio', got '" + kind + "'");
        const std::string_view bytes = data;
        MediaInfo info;
        {
          py::gil_scoped_release nogil;
          info = probe_media({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                             kind == "video" ? MediaKind::kVideo : MediaKind::kAudio);
        }
        py::dict d;
        d["kind"] = kind;
        d["codec"] = info.codec;
        d["stream"] = info.stream;
        d["width"] = info.width;
        d["height"] = info.height;
        d["rotation"] = info.rotation;
        d["time_base"] = py::make_tuple(info.tb_num, info.tb_den);
        d["start_pts"] = info.start_pts;
        d["duration"] = info.duration;
        d["frames"] = info.frames;
        d["sample_rate"] = info.sample_rate;
        d["channels"] = info.channels;
        py::list keys;
        for (const MediaKeyframe& k : info.keyframes) keys.append(py::make_tuple(k.pts, k.pos, k.frame));
        d["keyframes"] = keys;
        return d;
      },
      py::arg("data"), py::arg("kind") = "video",
      "The media index pack would store for a video or audio file's bytes, as a dict (codec, size, rotation, "
      "time_base, start_pts, duration, frames, sample_rate, channels, keyframes [(pts, pos, frame)]). "
      "DataLossError naming the reason when the file cannot be demuxed or decoded.");

  m.def(
      "reencode_video",
      [](py::bytes data, int gop, int max_side, std::optional<double> fps, int crf, const std::string& encoder) {
        VideoReencodeSpec spec;
        spec.gop = gop, spec.max_side = max_side, spec.fps = fps.value_or(0), spec.crf = crf, spec.encoder = encoder;
        const std::string_view bytes = data;
        std::vector<uint8_t> out;
        {
          py::gil_scoped_release nogil;
          out = reencode_video({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, spec);
        }
        return py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
      },
      py::arg("data"), py::kw_only(), py::arg("gop"), py::arg("max_side") = 0, py::arg("fps") = py::none(),
      py::arg("crf") = 23, py::arg("encoder") = "libx264",
      "A video file's bytes re-encoded as pack's video_reencode stores them (include/stoker/media.h): a "
      "keyframe every `gop` frames, constant frame rate `fps` (None: the source's average), longer side <= "
      "max_side (0: kept), turned upright, audio copied; MP4 bytes. DataLossError naming the reason.");
}

}  // namespace stoker::python
