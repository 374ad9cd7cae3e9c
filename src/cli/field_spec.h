// The --field option of the bench commands: one record field's transform per value,
// the command-line form of LoaderOptions::fields (stoker/loader.h FieldTransform).
//
//   NAME                      as stored (scalars, arrays, text; an image as its bytes)
//   NAME=stored               the same, said outright
//   NAME=train[:SIZE]         RandomResizedCrop(SIZE) with the default scale, ratio, flip
//   NAME=eval[:SIZE[:RESIZE]] resize the shorter side to RESIZE, center crop SIZE
//   NAME=follow:LEADER[:nearest|antialiased][:1|3]
//                             the crop, resize and flip drawn for image field LEADER
//                             (a mask: nearest, 1 channel, by default)
//   NAME=clip:FRAMES[:STRIDE|:FPSfps][:SIZE]
//                             VideoClip: FRAMES frames every STRIDE-th (or played at
//                             FPS), random crop to SIZE x SIZE
//
// SIZE defaults to the command's --size. A value that does not parse is a usage error
// naming --field and the value; what needs the dataset (a field it lacks, Follow of a
// field that is not a transformed image) the loader checks, and the commands name
// --field in that error too.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "stoker/loader.h"

namespace stoker::cli {

/// One --field value, parsed. Throws UsageError naming --field and `text`.
std::pair<std::string, FieldTransform> parse_field_spec(const std::string& text, int default_size);

/// Every --field value; a field named twice is a UsageError.
std::map<std::string, FieldTransform> parse_field_specs(const std::vector<std::string>& texts, int default_size);

/// Checks a --field value at parse time (the size is checked against 1..8192 either way).
CLI::Validator field_spec();

}  // namespace stoker::cli
