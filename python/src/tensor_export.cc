// Batches as Python objects: see tensor_export.h.
#include "tensor_export.h"

#include <algorithm>
#include <string>
#include <vector>

#include "dlpack.h"
#include "stoker/error.h"

namespace stoker::python {
namespace {

struct ManagedCtx {
  DLManagedTensor managed{};
  std::shared_ptr<void> lease;  // a SlotLease, or a staged DeviceBatch
  std::vector<int64_t> shape, strides;
};

void dl_deleter(DLManagedTensor* self) { delete static_cast<ManagedCtx*>(self->manager_ctx); }

void dl_capsule_destructor(PyObject* cap) {
  // Consumed capsules were renamed "used_dltensor": the consumer owns (and deletes) it.
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m && m->deleter) m->deleter(m);
  PyErr_Restore(t, v, tb);
}

DLDataType dl_type(ElemType t) {
  switch (t) {
    case ElemType::kUint8: return {kDLUInt, 8, 1};
    case ElemType::kUint16: return {kDLUInt, 16, 1};
    case ElemType::kUint32: return {kDLUInt, 32, 1};
    case ElemType::kInt32: return {kDLInt, 32, 1};
    case ElemType::kInt64: return {kDLInt, 64, 1};
    case ElemType::kFloat16: return {kDLFloat, 16, 1};
    case ElemType::kBFloat16: return {kDLBfloat, 16, 1};
    case ElemType::kFloat32: return {kDLFloat, 32, 1};
    case ElemType::kInt8: return {kDLInt, 8, 1};
    case ElemType::kInt16: return {kDLInt, 16, 1};
    case ElemType::kFloat64: return {kDLFloat, 64, 1};
    case ElemType::kBool: return {kDLBool, 8, 1};
  }
  return {kDLUInt, 8, 1};
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

py::dtype numpy_dtype(ElemType t) {
  switch (t) {
    case ElemType::kUint8: return py::dtype("uint8");
    case ElemType::kUint16: return py::dtype("uint16");
    case ElemType::kUint32: return py::dtype("uint32");
    case ElemType::kInt32: return py::dtype("int32");
    case ElemType::kInt64: return py::dtype("int64");
    case ElemType::kFloat16: return py::dtype("float16");
    case ElemType::kFloat32: return py::dtype("float32");
    case ElemType::kInt8: return py::dtype("int8");
    case ElemType::kInt16: return py::dtype("int16");
    case ElemType::kFloat64: return py::dtype("float64");
    case ElemType::kBool: return py::dtype("bool");
    case ElemType::kBFloat16: break;
  }
  throw_error(ErrorCode::kInvalidArgument,
              std::string("numpy has no ") + elem_type_name(t) + " type; use torch output for this format");
}

}  // namespace

py::capsule to_dlpack(const TensorView& v, std::shared_ptr<void> lease) {
  auto* ctx = new ManagedCtx;
  ctx->lease = std::move(lease);
  ctx->shape = v.shape;
  ctx->strides = row_major_strides(v.shape);
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = v.data;
  t.device = v.device < 0 ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, v.device};
  t.ndim = static_cast<int32_t>(v.shape.size());
  t.dtype = dl_type(v.dtype);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = dl_deleter;
  PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", dl_capsule_destructor);
  if (!cap) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

py::array to_numpy(const TensorView& v, std::shared_ptr<void> lease) {
  if (v.device >= 0) throw_error(ErrorCode::kInvalidArgument, "numpy output needs host tensors (device='cpu')");
  py::dtype dt = numpy_dtype(v.dtype);
  std::vector<py::ssize_t> shape(v.shape.begin(), v.shape.end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : row_major_strides(v.shape)) strides.push_back(static_cast<py::ssize_t>(s * elem_size(v.dtype)));
  py::capsule base(new std::shared_ptr<void>(std::move(lease)),
                   [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  return py::array(dt, shape, strides, v.data, base);
}

// Text and byte strings as lists of str / bytes; a variable-length array as its values
// [sum of n_i, *inner] plus `name.offsets` [B + 1] (sample i: values[offsets[i]:offsets[i+1]]).
void export_ragged(py::dict& out, const TensorView& v, uint64_t n,
                   const std::function<py::object(const TensorView&)>& tensor) {
  if (v.kind == TensorKind::kRagged) {
    out[py::str(v.name)] = tensor(v);
    TensorView offs;
    offs.name = v.name + ".offsets";
    offs.data = const_cast<int64_t*>(v.offsets);
    offs.shape = {static_cast<int64_t>(n + 1)};
    offs.dtype = ElemType::kInt64;
    out[py::str(offs.name)] = tensor(offs);
    return;
  }
  const auto* bytes = static_cast<const char*>(v.data);
  py::list items;
  for (uint64_t i = 0; i < n; ++i) {
    const char* p = bytes + v.offsets[i];
    const auto len = static_cast<py::ssize_t>(v.offsets[i + 1] - v.offsets[i]);
    if (v.kind == TensorKind::kText)
      items.append(py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(p, len, "replace")));
    else
      items.append(py::bytes(p, static_cast<size_t>(len)));
  }
  out[py::str(v.name)] = items;
}

py::dict export_batch(const Batch& b, const py::object& converter) {
  py::dict out;
  auto lease = b.share_lease();
  std::function<py::object(const TensorView&)> tensor = [&](const TensorView& v) -> py::object {
    if (converter.is_none()) return to_numpy(v, lease);
    return converter(to_dlpack(v, lease));
  };
  for (const TensorView& v : b.tensors()) {
    if (v.kind == TensorKind::kDense && v.shape.size() == 1 && v.device < 0) {
      // One value per sample (index, label, source): a copy of a few hundred bytes, so
      // keeping them across batches (a list of every b["index"]) pins no batch slot.
      const size_t bytes = v.bytes();
      auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(v.data),
                                                          static_cast<const uint8_t*>(v.data) + bytes);
      TensorView c = v;
      c.data = copy->data();
      out[py::str(v.name)] = converter.is_none() ? py::object(to_numpy(c, copy)) : converter(to_dlpack(c, copy));
      continue;
    }
    if (v.kind == TensorKind::kDense) {
      out[py::str(v.name)] = tensor(v);
      continue;
    }
    export_ragged(out, v, b.size(), tensor);
  }
  return out;
}

}  // namespace stoker::python
