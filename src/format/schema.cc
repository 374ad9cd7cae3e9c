#include <set>

#include "stoker/error.h"
#include "stoker/shard.h"

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

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kUint16: return "uint16";
    case DType::kUint32: return "uint32";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kNone: return "none";
  }
  return "none";
}

DType dtype_from_name(const std::string& s) {
  if (s == "uint16") return DType::kUint16;
  if (s == "uint32") return DType::kUint32;
  if (s == "int32") return DType::kInt32;
  if (s == "int64") return DType::kInt64;
  throw_error(ErrorCode::kInvalidArgument,
              "unknown dtype '" + s + "' (expected uint16, uint32, int32 or int64)");
}

const char* field_kind_name(FieldKind k) noexcept {
  switch (k) {
    case FieldKind::kBytes: return "bytes";
    case FieldKind::kJpeg: return "jpeg";
    case FieldKind::kInt64: return "int64";
    case FieldKind::kTokens: return "tokens";
  }
  return "unknown";
}

FieldKind field_kind_from_name(const std::string& s) {
  if (s == "bytes") return FieldKind::kBytes;
  if (s == "jpeg") return FieldKind::kJpeg;
  if (s == "int64") return FieldKind::kInt64;
  if (s == "tokens") return FieldKind::kTokens;
  throw_error(ErrorCode::kInvalidArgument, "unknown field kind '" + s + "'");
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
