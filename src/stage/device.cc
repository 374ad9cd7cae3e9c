// Device selection, and the device queries of a build without CUDA (cuda_backend.cu
// defines them when CUDA is built).
#include <cerrno>
#include <cstdlib>
#include <string>

#include "stoker/error.h"
#include "stoker/stage.h"
#include "util/enum_names.h"
#include "util/parse.h"

namespace stoker {

namespace {
constexpr internal::EnumName<StageBackend> kStageBackendNames[] = {
    {StageBackend::kAuto, "auto"}, {StageBackend::kCuda, "cuda"}, {StageBackend::kHost, "host"}};
}  // namespace

const char* stage_backend_name(StageBackend b) noexcept { return internal::enum_name(kStageBackendNames, b, "?"); }
StageBackend stage_backend_from_name(const std::string& s) {
  return internal::enum_from_name(kStageBackendNames, s, "stage backend");
}

int select_device(int requested, int device_count) {
  int d = requested;
  bool from_env = false;
  if (d < 0) {
    const char* env = std::getenv("LOCAL_RANK");
    if (env && *env) {
      const auto v = internal::parse_decimal<int>(env);
      if (!v || *v < 0 || *v > 1 << 20)
        throw_error(ErrorCode::kInvalidArgument, std::string("LOCAL_RANK='") + env + "' is not a device number");
      d = *v;
      from_env = true;
    } else {
      d = 0;
    }
  }
  if (device_count > 0 && d >= device_count) {
    // One visible device per process (CUDA_VISIBLE_DEVICES set per rank): it is ours.
    if (from_env && device_count == 1) return 0;
    throw_error(ErrorCode::kInvalidArgument,
                std::string("CUDA device ") + std::to_string(d) + (from_env ? " (from LOCAL_RANK)" : "") +
                    " does not exist: " + std::to_string(device_count) + " visible");
  }
  return d;
}

#if !STOKER_HAS_CUDA
int cuda_device_count() noexcept { return 0; }
std::string cuda_unavailable_reason() { return "stoker was built without CUDA"; }
std::optional<std::string> cuda_pci_bus_id(int) { return std::nullopt; }
std::shared_ptr<SlotAllocator> pinned_slot_allocator(int) { return host_slot_allocator(); }
#endif

}  // namespace stoker
