// Private to the _stoker extension: the options a Python Loader is made with. The
// C++ LoaderOptions plus what only the binding acts on (staging, pinned host memory).
#pragma once

#include <string>

#include "stoker/loader.h"

namespace stoker::python {

struct PyLoaderOptions {
  LoaderOptions o;
  // Staging (stage.h): "none" (host tensors straight from the loader's slots), "cuda"
  // (device tensors from a Stager's device ring) or "host" (the Stager's host backend:
  // the same ring/event machinery with memcpy; for tests on machines without a GPU).
  std::string stage = "none";
  int device = -1;            // CUDA ordinal for "cuda"; -1: LOCAL_RANK, else 0
  unsigned device_slots = 3;  // the Stager's ring
  // Host tensors (stage "none") in pinned memory, so tensor.cuda(non_blocking=True) is a
  // real async copy; kUnavailable without a CUDA device (pinning would be a no-op).
  bool pin_memory = false;
};

}  // namespace stoker::python
