// Private to the _stoker extension: one init_<area> per binding file, called in order
// by module.cc (errors first: the others' docstrings and translators use its types).
#pragma once

#include <pybind11/pybind11.h>

#include "stoker/media.h"

namespace stoker::python {

namespace py = pybind11;

void init_errors(py::module_& m);   // bind_errors.cc: stoker.Error hierarchy + translator
void init_image(py::module_& m);    // bind_image.cc: ImageTransform, decode_image
void init_dataset(py::module_& m);  // bind_dataset.cc: dataset/record helpers
void init_media(py::module_& m);    // bind_media.cc: VideoClipSpec, probe_media
void init_loader_options(py::module_& m);  // bind_loader_options.cc: LoaderOptions, FieldTransform
void init_loader(py::module_& m);   // bind_loader.cc: the Loader handle (batches out: tensor_export.h)
void init_pack(py::module_& m);     // bind_pack.cc: packers and sample generators
void init_log(py::module_& m);      // bind_log.cc: the library's log messages to Python's logging
void init_writer(py::module_& m);   // bind_writer.cc: the native half of stoker.Writer
void init_text(py::module_& m);     // bind_text.cc: tokenizers

/// The warning category for "the caller holds every batch slot" (a UserWarning).
PyObject* held_batches_warning();

/// A VideoReencodeSpec from None (off) or a dict {"gop", "max_side", "fps", "crf",
/// "encoder"} (bind_media.cc); unknown keys are ValueError.
VideoReencodeSpec video_reencode_from(const py::object& spec);

}  // namespace stoker::python
