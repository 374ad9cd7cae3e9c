// stoker::Error -> Python exceptions, in one place.
//
//   stoker.Error(RuntimeError)                       every stoker failure; .code = "data_loss" ...
//     InvalidArgumentError(Error, ValueError)        kInvalidArgument
//     IoError(Error, OSError)                        kIoError
//     DataLossError                                  kDataLoss (checksum, corrupt JPEG, ...)
//     ResourceExhaustedError                         kResourceExhausted
//     UnavailableError                               kUnavailable
//     CancelledError                                 kCancelled
//     NotFoundError(Error, FileNotFoundError)        kNotFound
// (the OSError bases let `except FileNotFoundError` / `except OSError` catch them, as the
// same failure of open() would be caught)
// The message is the C++ message unchanged (it names the shard, record and reason).
#include <string>

#include "bindings.h"
#include "stoker/error.h"

namespace stoker::python {
namespace {

struct Classes {
  PyObject* base = nullptr;
  PyObject* by_code[7] = {};
  PyObject* held_warning = nullptr;
};
Classes g_classes;  // owned by the module (added as attributes); never freed

PyObject* make_class(py::module_& m, const char* name, PyObject* bases, const char* code,
                     const char* doc) {
  std::string qual = std::string("stoker.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  if (!cls) throw py::error_already_set();
  if (code && PyObject_SetAttrString(cls, "code", py::str(code).ptr()) != 0) throw py::error_already_set();
  m.add_object(name, py::reinterpret_borrow<py::object>(cls));
  return cls;
}

}  // namespace

PyObject* held_batches_warning() { return g_classes.held_warning; }

void init_errors(py::module_& m) {
  g_classes.base = make_class(m, "Error", PyExc_RuntimeError, nullptr,
                              "Base class of stoker's errors; `code` names the kind (\"data_loss\", ...).");
  if (PyObject_SetAttrString(g_classes.base, "code", py::str("unknown").ptr()) != 0) throw py::error_already_set();
  struct Spec {
    ErrorCode code;
    const char* name;
    PyObject* builtin;  // the built-in exception a caller would catch for this kind, or null
    const char* doc;
  };
  const Spec specs[] = {
      {ErrorCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError, "A malformed request: bad option, path or state."},
      {ErrorCode::kIoError, "IoError", PyExc_OSError, "The OS refused or failed an operation."},
      {ErrorCode::kDataLoss, "DataLossError", nullptr, "Stored bytes are corrupt (checksum, truncated, bad JPEG)."},
      {ErrorCode::kResourceExhausted, "ResourceExhaustedError", nullptr, "Memory, file descriptors or a size limit."},
      {ErrorCode::kUnavailable, "UnavailableError", nullptr, "A facility is missing (io_uring, GPU, CUDA)."},
      {ErrorCode::kCancelled, "CancelledError", nullptr, "Stopped by shutdown or interruption."},
      {ErrorCode::kNotFound, "NotFoundError", PyExc_FileNotFoundError, "A named file, shard or record does not exist."},
  };
  for (const Spec& s : specs) {
    py::tuple bases = s.builtin ? py::make_tuple(py::handle(g_classes.base), py::handle(s.builtin))
                                    : py::make_tuple(py::handle(g_classes.base));
    g_classes.by_code[static_cast<int>(s.code)] = make_class(m, s.name, bases.ptr(), error_code_name(s.code), s.doc);
  }
  g_classes.held_warning = PyErr_NewExceptionWithDoc(
      "stoker.HeldBatchesWarning",
      "The caller holds every batch slot of a Loader, so the ring grew (memory now grows with the batches kept).",
      PyExc_UserWarning, nullptr);
  if (!g_classes.held_warning) throw py::error_already_set();
  m.add_object("HeldBatchesWarning", py::reinterpret_borrow<py::object>(g_classes.held_warning));

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const int c = static_cast<int>(e.code());
      PyObject* cls = (c >= 0 && c < 7 && g_classes.by_code[c]) ? g_classes.by_code[c] : g_classes.base;
      PyErr_SetString(cls, e.what());
    }
  });
}

}  // namespace stoker::python
