#include "stoker/batch.h"

#include <cstdlib>

#include "stoker/error.h"
#include "util/huge_pages.h"
#include "util/enum_names.h"
#include "util/tensor_lookup.h"

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

namespace {
constexpr internal::EnumName<ElemType> kElemTypeNames[] = {
    {ElemType::kUint8, "uint8"},     {ElemType::kUint16, "uint16"},     {ElemType::kUint32, "uint32"},
    {ElemType::kInt32, "int32"},     {ElemType::kInt64, "int64"},       {ElemType::kFloat16, "float16"},
    {ElemType::kBFloat16, "bfloat16"}, {ElemType::kFloat32, "float32"}, {ElemType::kInt8, "int8"},
    {ElemType::kInt16, "int16"},     {ElemType::kFloat64, "float64"},   {ElemType::kBool, "bool"}};
}  // namespace

const char* elem_type_name(ElemType t) noexcept { return internal::enum_name(kElemTypeNames, t, "?"); }

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t TensorView::bytes() const noexcept { return static_cast<size_t>(numel()) * elem_size(dtype); }

namespace internal {

const TensorView* find_tensor(const std::vector<TensorView>& tensors, const std::string& name) noexcept {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorView& tensor_named(const std::vector<TensorView>& tensors, const std::string& name,
                               const std::string& owner) {
  if (const TensorView* t = find_tensor(tensors, name)) return *t;
  std::string names;
  for (const auto& t : tensors) names += (names.empty() ? "" : ", ") + t.name;
  throw_error(ErrorCode::kInvalidArgument, owner + " has no field '" + name + "' (it has: " + names + ")");
}

}  // namespace internal

const TensorView* Batch::find(const std::string& name) const noexcept {
  return internal::find_tensor(tensors_, name);
}

const TensorView& Batch::operator[](const std::string& name) const {
  if (released_) throw_error(ErrorCode::kInvalidArgument, "batch used after release()");
  return internal::tensor_named(tensors_, name, "batch");
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
