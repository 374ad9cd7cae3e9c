// Batches: what the loader hands to the trainer.
//
// A Batch is a lease on one slot of the loader's ring: named tensors (pointer, shape,
// element type) pointing into that slot's memory, plus the epoch/step it belongs to.
// The slot returns to the loader when every lease on it is gone: Batch::release(), the
// Batch's destructor, or — for bindings that hand tensors to another runtime — the
// last copy of share_lease(). Memory under a live lease is never reused.
//
// Threading: a Batch is used by one thread at a time; releasing on any thread is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace stoker {

enum class ElemType : uint8_t {
  kUint8, kUint16, kUint32, kInt32, kInt64, kFloat16, kBFloat16, kFloat32,
  kInt8, kInt16, kFloat64, kBool,  ///< array fields' element types (shard.h DType)
};
size_t elem_size(ElemType t) noexcept;
const char* elem_type_name(ElemType t) noexcept;  ///< "uint8", "float16", ...

/// What a TensorView holds.
enum class TensorKind : uint8_t {
  kDense,   ///< [B, *sample_shape]
  kRagged,  ///< a variable-length array field: values [sum of n_i, *inner] + offsets
  kText,    ///< UTF-8 strings: values uint8 [total bytes] + offsets (text fields, __key__)
  kBytes,   ///< byte strings: values uint8 [total bytes] + offsets (bytes fields, images as stored)
};

/// A row-major view into slot memory.
struct TensorView {
  std::string name;              ///< the field's name; "image", "label", "index", "tokens", "targets"
  void* data = nullptr;
  std::vector<int64_t> shape;    ///< e.g. {B, H, W, 3}; ragged kinds: {total rows, *inner}
  ElemType dtype = ElemType::kUint8;
  int device = -1;               ///< -1: host memory; >= 0: CUDA device ordinal
  TensorKind kind = TensorKind::kDense;
  /// Ragged kinds: sample i is rows [offsets[i], offsets[i + 1]) of `data`'s first
  /// dimension; B + 1 entries in host memory, offsets[0] == 0. Null for kDense.
  const int64_t* offsets = nullptr;
  size_t bytes() const noexcept;
  int64_t numel() const noexcept;
};

/// Returns a slot to its ring when destroyed (shared by everything using the slot).
class SlotLease {
 public:
  virtual ~SlotLease() = default;
};

class Batch {
 public:
  Batch() = default;
  Batch(std::vector<TensorView> tensors, std::shared_ptr<SlotLease> lease, uint64_t epoch, uint64_t step,
        uint64_t size)
      : tensors_(std::move(tensors)), lease_(std::move(lease)), epoch_(epoch), step_(step), size_(size) {}
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&&) noexcept = default;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch() = default;

  /// The tensor called `name`; throws kInvalidArgument (listing the names) when absent.
  const TensorView& operator[](const std::string& name) const;
  const TensorView* find(const std::string& name) const noexcept;
  const std::vector<TensorView>& tensors() const noexcept { return tensors_; }
  uint64_t epoch() const noexcept { return epoch_; }
  uint64_t step() const noexcept { return step_; }  ///< this rank's batch number in the epoch
  uint64_t size() const noexcept { return size_; }  ///< samples (B, less for a final partial batch)
  bool valid() const noexcept { return lease_ != nullptr; }

  /// Gives the slot back (if no share_lease() copy is alive). Using the tensors
  /// afterwards is a bug; releasing twice throws kInvalidArgument.
  void release();
  /// Another owner of the slot (for zero-copy tensors handed to Python/DLPack).
  std::shared_ptr<SlotLease> share_lease() const { return lease_; }

 private:
  std::vector<TensorView> tensors_;
  std::shared_ptr<SlotLease> lease_;
  uint64_t epoch_ = 0, step_ = 0, size_ = 0;
  bool released_ = false;
};

/// Where slot memory comes from. The default is page-aligned host memory; the staging
/// layer supplies pinned (cudaHostAlloc) memory through the same interface.
class SlotAllocator {
 public:
  virtual ~SlotAllocator() = default;
  /// `bytes` of memory aligned to at least 4096. Throws kResourceExhausted.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  virtual const char* name() const noexcept = 0;  ///< "host", "pinned", ...
};

/// Page-aligned host memory, the CPU-only default: slots of 2 MiB and more are mapped on
/// transparent huge pages where the kernel has them.
std::shared_ptr<SlotAllocator> host_slot_allocator();

}  // namespace stoker
