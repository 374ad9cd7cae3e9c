#include <set>

#include "stoker/error.h"
#include "stoker/shard.h"
#include "util/enum_names.h"

namespace stoker {

size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kUint16: return 2;
    case DType::kUint32: return 4;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kNone: return 0;
  }
  return 0;
}

namespace {
constexpr internal::EnumName<DType> kDTypeNames[] = {
    {DType::kUint16, "uint16"}, {DType::kUint32, "uint32"}, {DType::kInt32, "int32"}, {DType::kInt64, "int64"}};
constexpr internal::EnumName<FieldKind> kFieldKindNames[] = {
    {FieldKind::kBytes, "bytes"}, {FieldKind::kJpeg, "jpeg"}, {FieldKind::kInt64, "int64"},
    {FieldKind::kTokens, "tokens"}};
}  // namespace

const char* dtype_name(DType t) noexcept { return internal::enum_name(kDTypeNames, t, "none"); }
DType dtype_from_name(const std::string& s) { return internal::enum_from_name(kDTypeNames, s, "dtype"); }

const char* field_kind_name(FieldKind k) noexcept { return internal::enum_name(kFieldKindNames, k, "unknown"); }
FieldKind field_kind_from_name(const std::string& s) {
  return internal::enum_from_name(kFieldKindNames, s, "field kind");
}

int Schema::find(const std::string& name) const noexcept {
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].name == name) return static_cast<int>(i);
  return -1;
}

void Schema::validate() const {
  if (fields.empty()) throw_error(ErrorCode::kInvalidArgument, "schema has no fields");
  if (fields.size() > kMaxFields)
    throw_error(ErrorCode::kInvalidArgument,
                "schema has " + std::to_string(fields.size()) + " fields, more than " +
                    std::to_string(kMaxFields));
  std::set<std::string> seen;
  for (const Field& f : fields) {
    if (f.name.empty() || f.name.size() > kMaxFieldName)
      throw_error(ErrorCode::kInvalidArgument, "field name '" + f.name + "' must be 1.." +
                                                   std::to_string(kMaxFieldName) + " bytes");
    for (char c : f.name) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.';
      if (!ok) throw_error(ErrorCode::kInvalidArgument, "field name '" + f.name + "' has a character outside [A-Za-z0-9_.-]");
    }
    if (!seen.insert(f.name).second)
      throw_error(ErrorCode::kInvalidArgument, "field name '" + f.name + "' is used twice");
    if (static_cast<uint8_t>(f.kind) > static_cast<uint8_t>(FieldKind::kTokens))
      throw_error(ErrorCode::kInvalidArgument, "field '" + f.name + "' has an unknown kind");
    if (f.kind == FieldKind::kTokens) {
      if (dtype_size(f.dtype) == 0)
        throw_error(ErrorCode::kInvalidArgument, "token field '" + f.name + "' needs a dtype");
      if (f.seq_len == 0 || f.seq_len > (1u << 24))
        throw_error(ErrorCode::kInvalidArgument, "token field '" + f.name + "' needs a seq_len in 1..16777216");
    } else if (f.dtype != DType::kNone || f.seq_len != 0) {
      throw_error(ErrorCode::kInvalidArgument, "field '" + f.name + "' is not a token field but has a dtype or seq_len");
    }
  }
}

std::string Schema::to_string() const {
  std::string s;
  for (const Field& f : fields) {
    if (!s.empty()) s += ' ';
    s += f.name;
    s += ':';
    s += field_kind_name(f.kind);
    if (f.kind == FieldKind::kTokens) {
      s += '/';
      s += dtype_name(f.dtype);
      s += '/';
      s += std::to_string(f.seq_len);
    }
  }
  return s;
}

}  // namespace stoker
