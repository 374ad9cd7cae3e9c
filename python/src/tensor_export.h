// Private to the _stoker extension: batches as Python objects. Dense tensors go out as
// DLPack capsules (for torch.utils.dlpack.from_dlpack) or numpy arrays, zero-copy: each
// owns a copy of its batch's lease (a SlotLease or a staged DeviceBatch), so the slot is
// reused only when the last tensor is freed, on any thread, after the Loader too. Text
// and bytes become lists of str / bytes; variable-length arrays their values plus
// `name.offsets`. No module objects of its own: bind_loader.cc calls these.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "stoker/batch.h"

namespace stoker::python {

namespace py = pybind11;

/// A "dltensor" capsule viewing `v`, owning a copy of `lease`.
py::capsule to_dlpack(const TensorView& v, std::shared_ptr<void> lease);
/// A numpy array viewing host tensor `v` (kInvalidArgument for device tensors or a type
/// numpy lacks), owning a copy of `lease` (a SlotLease, or any owner of v's memory).
py::array to_numpy(const TensorView& v, std::shared_ptr<void> lease);
/// Adds ragged view `v` of a batch of n samples to `out`: text and byte strings as lists
/// of str / bytes; a variable-length array as its values [sum of n_i, *inner] under its
/// name plus `name.offsets` [B + 1] (sample i: values[offsets[i]:offsets[i+1]]), each made
/// a tensor by `tensor`.
void export_ragged(py::dict& out, const TensorView& v, uint64_t n,
                   const std::function<py::object(const TensorView&)>& tensor);
/// A host batch as {name: tensor}: converter(capsule) for each (torch), or numpy arrays
/// when converter is None.
py::dict export_batch(const Batch& b, const py::object& converter);

}  // namespace stoker::python
