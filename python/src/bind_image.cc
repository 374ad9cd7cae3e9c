// ImageTransform and a one-image decode (the same code the loader's decoders run), so
// Python can check a batch sample against a direct decode.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <span>

#include "bindings.h"
#include "stoker/image.h"
#include "stoker/order.h"

namespace stoker::python {

void init_image(py::module_& m) {
  py::class_<ImageTransform> t(m, "ImageTransform",
                               "What the decoder does to each image (see include/stoker/image.h).");
  py::enum_<ImageTransform::Kind>(t, "Kind")
      .value("TRAIN", ImageTransform::Kind::kTrain)
      .value("EVAL", ImageTransform::Kind::kEval)
      .value("NONE", ImageTransform::Kind::kNone);
  t.def(py::init<>())
      .def_readwrite("kind", &ImageTransform::kind)
      .def_readwrite("size", &ImageTransform::size)
      .def_readwrite("scale_min", &ImageTransform::scale_min)
      .def_readwrite("scale_max", &ImageTransform::scale_max)
      .def_readwrite("ratio_min", &ImageTransform::ratio_min)
      .def_readwrite("ratio_max", &ImageTransform::ratio_max)
      .def_readwrite("flip_prob", &ImageTransform::flip_prob)
      .def_readwrite("eval_crop_fraction", &ImageTransform::eval_crop_fraction)
      .def_readwrite("allow_dct_scaling", &ImageTransform::allow_dct_scaling)
      .def_readwrite("max_pixels", &ImageTransform::max_pixels)
      .def("__repr__", [](const ImageTransform& x) {
        const char* k = x.kind == ImageTransform::Kind::kTrain ? "TRAIN"
                        : x.kind == ImageTransform::Kind::kEval ? "EVAL"
                                                                : "NONE";
        return std::string("ImageTransform(kind=") + k + ", size=" + std::to_string(x.size) +
               ", scale=(" + std::to_string(x.scale_min) + ", " + std::to_string(x.scale_max) + "), ratio=(" +
               std::to_string(x.ratio_min) + ", " + std::to_string(x.ratio_max) +
               "), flip_prob=" + std::to_string(x.flip_prob) +
               ", eval_crop_fraction=" + std::to_string(x.eval_crop_fraction) +
               ", allow_dct_scaling=" + (x.allow_dct_scaling ? "True" : "False") + ")";
      });

  m.def(
      "decode_image",
      [](py::bytes jpeg, const ImageTransform& t, uint64_t sample_seed) {
        std::string_view v = jpeg;
        std::span<const uint8_t> in(reinterpret_cast<const uint8_t*>(v.data()), v.size());
        int h = t.size, w = t.size;
        if (t.kind == ImageTransform::Kind::kNone) {
          JpegInfo info = probe_jpeg(in);
          h = info.height;
          w = info.width;
        }
        py::array_t<uint8_t> out({h, w, 3});
        uint8_t* dst = out.mutable_data();
        {
          py::gil_scoped_release nogil;
          ImageDecoder dec;
          dec.decode(in, t, sample_seed, dst, static_cast<size_t>(h) * w * 3);
        }
        return out;
      },
      py::arg("jpeg"), py::arg("transform"), py::arg("sample_seed"),
      "Decodes one JPEG with `transform` and the per-sample seed, as the loader does: a "
      "uint8 HWC numpy array.");
  m.def(
      "probe_jpeg",
      [](py::bytes jpeg) {
        std::string_view v = jpeg;
        JpegInfo i = probe_jpeg({reinterpret_cast<const uint8_t*>(v.data()), v.size()});
        py::dict d;
        d["width"] = i.width;
        d["height"] = i.height;
        d["components"] = i.components;
        d["progressive"] = i.progressive;
        return d;
      },
      py::arg("jpeg"));
  m.def("sample_seed", &stoker::sample_seed, py::arg("seed"), py::arg("epoch"), py::arg("sample_index"),
        "The per-sample augmentation seed the loader uses for (seed, epoch, sample index).");
}

}  // namespace stoker::python
