// The dispatch that sends device tensors to the CUDA kernels (convert_kernels.cu) and
// host tensors to the CPU reference (util/convert.h).
#include <string>

#include "stage/convert_kernels.h"
#include "stage/host_stream.h"
#include "stoker/error.h"
#include "stoker/stage.h"
#include "util/convert.h"

namespace stoker {

namespace {

void check_image_view(const TensorView& src) {
  if (src.dtype != ElemType::kUint8 || src.shape.size() != 4 || src.shape[3] != 3)
    throw_error(ErrorCode::kInvalidArgument,
                "convert_image: '" + src.name + "' must be uint8 {N, H, W, 3}, is " + elem_type_name(src.dtype) +
                    " of rank " + std::to_string(src.shape.size()));
}

}  // namespace

void convert_image(const TensorView& src, ElemType dst_type, const float mean[3], const float std[3], void* dst,
                   void* stream) {
  check_image_view(src);
  internal::check_image_output_type(dst_type);
  const int64_t n = src.shape[0], h = src.shape[1], w = src.shape[2];
  if (src.device >= 0) {
#if STOKER_HAS_CUDA
    internal::launch_convert_image(src.device, static_cast<const uint8_t*>(src.data), n, h, w, dst_type, mean, std,
                                   dst, stream);
    return;
#else
    throw_error(ErrorCode::kUnavailable, "convert_image: device tensor, but stoker was built without CUDA");
#endif
  }
  const float m[3] = {mean[0], mean[1], mean[2]}, s[3] = {std[0], std[1], std[2]};
  const uint8_t* p = static_cast<const uint8_t*>(src.data);
  auto run = [=] { internal::convert_image_cpu(p, n, h, w, dst_type, m, s, dst); };
  if (stream) static_cast<HostStream*>(stream)->enqueue(run);
  else run();
}

void widen_tokens(const TensorView& src, int64_t* dst, void* stream) {
  internal::check_token_type(src.dtype);
  const int64_t count = src.numel();
  if (src.device >= 0) {
#if STOKER_HAS_CUDA
    internal::launch_widen_tokens(src.device, src.data, src.dtype, count, dst, stream);
    return;
#else
    throw_error(ErrorCode::kUnavailable, "widen_tokens: device tensor, but stoker was built without CUDA");
#endif
  }
  const void* p = src.data;
  const ElemType t = src.dtype;
  auto run = [=] { internal::widen_tokens_cpu(p, t, count, dst); };
  if (stream) static_cast<HostStream*>(stream)->enqueue(run);
  else run();
}

}  // namespace stoker
