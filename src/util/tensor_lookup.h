// Looking up a batch's tensor by name: one implementation behind Batch::operator[] and
// DeviceBatch::operator[], so both fail the same way (listing the names there are).
#pragma once

#include <string>
#include <vector>

#include "stoker/batch.h"

namespace stoker::internal {

/// The tensor called `name`, or nullptr.
const TensorView* find_tensor(const std::vector<TensorView>& tensors, const std::string& name) noexcept;
/// The tensor called `name`; throws kInvalidArgument "<owner> has no field '<name>' (it
/// has: a, b)" when absent.
const TensorView& tensor_named(const std::vector<TensorView>& tensors, const std::string& name,
                               const std::string& owner);

}  // namespace stoker::internal
