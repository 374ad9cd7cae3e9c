// What a path that is not a stoker dataset looks like, and the command that packs it.
//
// Dataset::open (through read_manifest) uses this so that pointing stoker at an
// ImageFolder, a token .bin file, WebDataset tars or a half-packed directory says what
// the path is and how to pack it, instead of "no MANIFEST" or "Not a directory".
// Reads only directory listings and a few bytes of a few files.
#pragma once

#include <string>

namespace stoker::internal {

/// A sentence about `path` that is not a dataset: "does not exist", "looks like an
/// ImageFolder (3 class dirs with images); pack it with: stoker pack imagefolder P OUT",
/// "is a file (4096 bytes), which looks like a token file; pack it with: ...".
std::string describe_non_dataset(const std::string& path);

}  // namespace stoker::internal
