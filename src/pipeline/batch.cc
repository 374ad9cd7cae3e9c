#include "stoker/batch.h"

#include <cstdlib>

#include "stoker/error.h"
#include "util/huge_pages.h"

namespace stoker {

size_t elem_size(ElemType t) noexcept {
  switch (t) {
    case ElemType::kUint8: case ElemType::kInt8: case ElemType::kBool: return 1;
    case ElemType::kUint16: case ElemType::kInt16: case ElemType::kFloat16: case ElemType::kBFloat16: return 2;
    case ElemType::kUint32: case ElemType::kInt32: case ElemType::kFloat32: return 4;
    case ElemType::kInt64: case ElemType::kFloat64: return 8;
  }
  return 1;
}

const char* elem_type_name(ElemType t) noexcept {
  switch (t) {
    case ElemType::kUint8: return "uint8";
    case ElemType::kUint16: return "uint16";
    case ElemType::kUint32: return "uint32";
    case ElemType::kInt32: return "int32";
    case ElemType::kInt64: return "int64";
    case ElemType::kFloat16: return "float16";
    case ElemType::kBFloat16: return "bfloat16";
    case ElemType::kFloat32: return "float32";
    case ElemType::kInt8: return "int8";
    case ElemType::kInt16: return "int16";
    case ElemType::kFloat64: return "float64";
    case ElemType::kBool: return "bool";
  }
  return "?";
}

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t TensorView::bytes() const noexcept { return static_cast<size_t>(numel()) * elem_size(dtype); }

const TensorView* Batch::find(const std::string& name) const noexcept {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& Batch::operator[](const std::string& name) const {
  if (released_) throw_error(ErrorCode::kInvalidArgument, "batch used after release()");
  if (const TensorView* t = find(name)) return *t;
  std::string names;
  for (const auto& t : tensors_) names += (names.empty() ? "" : ", ") + t.name;
  throw_error(ErrorCode::kInvalidArgument, "batch has no field '" + name + "' (it has: " + names + ")");
}

void Batch::release() {
  if (released_) throw_error(ErrorCode::kInvalidArgument, "batch released twice");
  released_ = true;
  lease_.reset();
}

namespace {
class HostSlotAllocator final : public SlotAllocator {
 public:
  // Slots of 2 MiB and more (image batches) are mapped on huge pages where the kernel
  // has them: decoders write whole batches through them, and fewer TLB misses and page
  // faults show in the feed rate. Smaller ones come from the heap.
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (bytes >= internal::kHugePage) {
      p = internal::map_pages(bytes);
    } else if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
      p = nullptr;
    }
    if (p == nullptr)
      throw_error(ErrorCode::kResourceExhausted, "cannot allocate a batch slot of " + std::to_string(bytes) + " bytes");
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    if (bytes >= internal::kHugePage) {
      internal::unmap_pages(p, bytes);
    } else {
      std::free(p);
    }
  }
  const char* name() const noexcept override { return "host"; }
};
}  // namespace

std::shared_ptr<SlotAllocator> host_slot_allocator() {
  static auto a = std::make_shared<HostSlotAllocator>();
  return a;
}

}  // namespace stoker
