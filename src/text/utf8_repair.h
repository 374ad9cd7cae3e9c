// Making arbitrary bytes valid UTF-8 before tokenising, the way the reference
// tokenizers' callers get their text: each maximal invalid subsequence (Unicode's
// "substitution of maximal subparts", as Python's errors="replace", Rust's
// String::from_utf8_lossy and the WHATWG TextDecoder do it) becomes one U+FFFD.
#pragma once

#include <string>
#include <string_view>

namespace stoker::internal {

/// `text` itself when it is valid UTF-8; otherwise the repaired copy, written to
/// `scratch` (which the returned view then points into).
std::string_view repair_utf8(std::string_view text, std::string& scratch);

}  // namespace stoker::internal
