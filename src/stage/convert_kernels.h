// Launchers of the on-device conversion kernels (convert_kernels.cu), CUDA builds only.
//
// Both run on `stream` (a cudaStream_t; nullptr: the legacy default stream) of device
// `device`, asynchronously: nothing waits on the host. Launch errors are thrown as
// kUnavailable/kInvalidArgument with the CUDA error's name. Thread-safe.
#pragma once

#include <cstdint>

#include "stoker/batch.h"

namespace stoker::internal {

#if STOKER_HAS_CUDA
/// uint8 NHWC (3 channels) -> NCHW kFloat32/kFloat16/kBFloat16, (x / 255 - mean) / std.
void launch_convert_image(int device, const uint8_t* src, int64_t n, int64_t h, int64_t w, ElemType dst_type,
                          const float mean[3], const float std[3], void* dst, void* stream);
/// kUint16/kUint32/kInt32/kInt64 -> int64.
void launch_widen_tokens(int device, const void* src, ElemType src_type, int64_t count, int64_t* dst,
                         void* stream);
/// A kernel that spins for `us` microseconds (1 thread; globaltimer): the bench's consumer.
void launch_spin(int device, double us, void* stream);
#endif

}  // namespace stoker::internal
