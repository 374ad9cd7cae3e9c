// The _stoker extension module: see python/stoker/__init__.py for the public API.
#include "bindings.h"
#include "stoker/order.h"

PYBIND11_MODULE(_stoker, m) {
  m.doc() = "stoker's native layer (use the `stoker` package, not this module directly)";
  m.attr("__version__") = STOKER_VERSION;
#ifdef STOKER_HAS_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  stoker::python::init_errors(m);
  stoker::python::init_log(m);
  stoker::python::init_image(m);
  stoker::python::init_dataset(m);
  stoker::python::init_media(m);
  stoker::python::init_loader_options(m);
  stoker::python::init_loader(m);
  stoker::python::init_pack(m);
  stoker::python::init_writer(m);
  stoker::python::init_text(m);
  m.def(
      "rank_from_env",
      [] {
        const stoker::RankInfo r = stoker::rank_from_env();
        return pybind11::make_tuple(r.rank, r.world_size);
      },
      "(rank, world_size) from RANK / WORLD_SIZE (torchrun), (0, 1) when neither is set; "
      "InvalidArgumentError naming the variable when only one is set or a value is malformed.");
}
