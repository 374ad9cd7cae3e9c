// The DLPack C ABI (https://github.com/dmlc/dlpack, v0.x "unversioned" form), declared
// here because Debian has no dlpack package. Layouts and enum values follow the spec
// exactly; torch.utils.dlpack.from_dlpack (torch 1.13) consumes a PyCapsule named
// "dltensor" holding a DLManagedTensor*, renames it "used_dltensor" and later calls the
// deleter. A capsule that is never consumed must call the deleter itself.
#pragma once

#include <cstdint>

extern "C" {

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLBfloat = 4U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  ///< in elements; may be null for compact row-major (we always set it)
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

}  // extern "C"
