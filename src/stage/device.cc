// Device selection, and the device queries of a build without CUDA (cuda_backend.cu
// defines them when CUDA is built).
#include <cerrno>
#include <cstdlib>
#include <string>

#include "stoker/error.h"
#include "stoker/stage.h"

namespace stoker {

const char* stage_backend_name(StageBackend b) noexcept {
  switch (b) {
    case StageBackend::kAuto: return "auto";
    case StageBackend::kCuda: return "cuda";
    case StageBackend::kHost: return "host";
  }
  return "?";
}

StageBackend stage_backend_from_name(const std::string& s) {
  if (s == "auto") return StageBackend::kAuto;
  if (s == "cuda") return StageBackend::kCuda;
  if (s == "host") return StageBackend::kHost;
  throw_error(ErrorCode::kInvalidArgument, "stage backend must be auto, cuda or host, got '" + s + "'");
}

int select_device(int requested, int device_count) {
  int d = requested;
  bool from_env = false;
  if (d < 0) {
    const char* env = std::getenv("LOCAL_RANK");
    if (env && *env) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(env, &end, 10);
      if (errno || *end || v < 0 || v > 1 << 20)
        throw_error(ErrorCode::kInvalidArgument, std::string("LOCAL_RANK='") + env + "' is not a device number");
      d = static_cast<int>(v);
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
