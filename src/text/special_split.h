// Cutting text at the special tokens a caller allows, so that each run of text between
// them is tokenised on its own and each special becomes its id: the outer loop of every
// tokenizer's encode.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/tokenizer.h"

namespace stoker::internal {

/// Calls `ordinary(run)` for each run of `text` between allowed specials (the empty run
/// too) and appends each special's id to `out`, in text order. Where two allowed
/// specials start at one place the longer wins. `specials` is the tokenizer's (text ->
/// id); a name in `allowed` that is not one is kInvalidArgument naming `source`.
void split_at_specials(std::string_view text, const std::map<std::string, uint32_t>& specials,
                       const SpecialTokens& allowed, const std::string& source,
                       const std::function<void(std::string_view)>& ordinary, std::vector<uint32_t>& out);

}  // namespace stoker::internal
