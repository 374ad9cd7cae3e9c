#include <cstring>
#include <set>

#include "stoker/error.h"
#include "stoker/shard.h"
#include "util/bytes.h"
#include "util/enum_names.h"

namespace stoker {

namespace {

constexpr internal::EnumName<DType> kDTypeNames[] = {
    {DType::kUint16, "uint16"},   {DType::kUint32, "uint32"},   {DType::kInt32, "int32"}, {DType::kInt64, "int64"},
    {DType::kUint8, "uint8"},     {DType::kInt8, "int8"},       {DType::kInt16, "int16"}, {DType::kFloat16, "float16"},
    {DType::kFloat32, "float32"}, {DType::kFloat64, "float64"}, {DType::kBool, "bool"},
};

// "jpeg" is the v1 manifest's name of kImage; names print as the first listed.
constexpr internal::EnumName<FieldKind> kFieldKindNames[] = {
    {FieldKind::kBytes, "bytes"},       {FieldKind::kImage, "image"},     {FieldKind::kInt64, "int64"},
    {FieldKind::kTokens, "tokens"},     {FieldKind::kFloat32, "float32"}, {FieldKind::kFloat64, "float64"},
    {FieldKind::kNdarray, "ndarray"},   {FieldKind::kVarArray, "vararray"}, {FieldKind::kText, "text"},
    {FieldKind::kVideo, "video"},       {FieldKind::kAudio, "audio"},     {FieldKind::kImage, "jpeg"},
};

uint64_t product(const std::vector<uint32_t>& dims) {
  uint64_t n = 1;
  for (uint32_t d : dims) n *= d;  // callers bound dims (validate) before relying on it
  return n;
}

bool is_array(FieldKind k) { return k == FieldKind::kNdarray || k == FieldKind::kVarArray; }

}  // namespace

size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kUint8:
    case DType::kInt8:
    case DType::kBool: return 1;
    case DType::kUint16:
    case DType::kInt16:
    case DType::kFloat16: return 2;
    case DType::kUint32:
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kFloat64: return 8;
    case DType::kNone: break;
  }
  return 0;
}

const char* dtype_name(DType t) noexcept { return internal::enum_name(kDTypeNames, t, "none"); }
DType dtype_from_name(const std::string& s) { return internal::enum_from_name(kDTypeNames, s, "dtype"); }

const char* field_kind_name(FieldKind k) noexcept { return internal::enum_name(kFieldKindNames, k, "unknown"); }
FieldKind field_kind_from_name(const std::string& s) {
  return internal::enum_from_name(kFieldKindNames, s, "field kind");
}

// image_format_of and image_format_name read the format table (src/decode/formats.cc).


uint64_t Field::fixed_size() const noexcept {
  switch (kind) {
    case FieldKind::kInt64: return 8;
    case FieldKind::kFloat32: return 4;
    case FieldKind::kFloat64: return 8;
    case FieldKind::kNdarray: return product(shape) * dtype_size(dtype);
    default: return 0;
  }
}

uint64_t Field::unit_size() const noexcept {
  switch (kind) {
    case FieldKind::kTokens: return (static_cast<uint64_t>(seq_len) + 1) * dtype_size(dtype);
    case FieldKind::kVarArray: return product(shape) * dtype_size(dtype);
    case FieldKind::kInt64:
    case FieldKind::kFloat32:
    case FieldKind::kFloat64:
    case FieldKind::kNdarray: return fixed_size();
    default: return 1;
  }
}

std::string Field::check_size(uint64_t size) const {
  const std::string what = std::string(field_kind_name(kind)) + " field '" + name + "' ";
  if (const uint64_t fixed = fixed_size(); fixed != 0 || kind == FieldKind::kNdarray) {
    if (size != fixed) return what + "has " + std::to_string(size) + " bytes, not " + std::to_string(fixed);
    return {};
  }
  const uint64_t unit = unit_size();
  if (kind == FieldKind::kTokens && size == 0) return what + "is empty (needs at least one row)";
  if (unit > 1 && size % unit != 0)
    return what + "has " + std::to_string(size) + " bytes, not a whole number of rows of " + std::to_string(unit) +
           " bytes";
  return {};
}

int Schema::find(const std::string& name) const noexcept {
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].name == name) return static_cast<int>(i);
  return -1;
}

void Schema::validate() const {
  auto bad = [](const std::string& why) { throw_error(ErrorCode::kInvalidArgument, why); };
  if (fields.empty()) bad("schema has no fields");
  if (fields.size() > kMaxFields)
    bad("schema has " + std::to_string(fields.size()) + " fields, more than " + std::to_string(kMaxFields));
  std::set<std::string> seen;
  for (const Field& f : fields) {
    if (f.name.empty() || f.name.size() > kMaxFieldName)
      bad("field name '" + f.name + "' must be 1.." + std::to_string(kMaxFieldName) + " bytes");
    for (char c : f.name) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                c == '-' || c == '.';
      if (!ok) bad("field name '" + f.name + "' has a character outside [A-Za-z0-9_.-]");
    }
    if (!seen.insert(f.name).second) bad("field name '" + f.name + "' is used twice");
    if (static_cast<uint8_t>(f.kind) > kMaxFieldKind) bad("field '" + f.name + "' has an unknown kind");
    const std::string what = std::string(field_kind_name(f.kind)) + " field '" + f.name + "'";
    if (f.kind == FieldKind::kTokens || is_array(f.kind)) {
      if (dtype_size(f.dtype) == 0) bad(what + " needs a dtype");
    } else if (f.dtype != DType::kNone) {
      bad(what + " has a dtype, which only tokens, ndarray and vararray fields take");
    }
    if (f.kind == FieldKind::kTokens) {
      if (f.seq_len == 0 || f.seq_len > (1u << 24)) bad(what + " needs a seq_len in 1..16777216");
      if (f.dtype != DType::kUint16 && f.dtype != DType::kUint32 && f.dtype != DType::kInt32 &&
          f.dtype != DType::kInt64)
        bad(what + " has dtype " + dtype_name(f.dtype) + "; tokens are uint16, uint32, int32 or int64");
    } else if (f.seq_len != 0) {
      bad(what + " has a seq_len, which only token fields take");
    }
    if (is_array(f.kind)) {
      const uint32_t max_dims = f.kind == FieldKind::kNdarray ? kMaxDims : kMaxDims - 1;
      if (f.shape.size() > max_dims)
        bad(what + " has " + std::to_string(f.shape.size()) + " dimensions, more than " + std::to_string(max_dims));
      uint64_t bytes = dtype_size(f.dtype);
      for (uint32_t d : f.shape) {
        if (d == 0) bad(what + " has a zero dimension");
        bytes *= d;
        if (bytes > 0xFFFFFFFFu) bad(what + " has a shape of more than 4 GiB");
      }
    } else if (!f.shape.empty()) {
      bad(what + " has a shape, which only ndarray and vararray fields take");
    }
    if (f.name == kKeyField && f.kind != FieldKind::kText) bad(std::string("field '") + kKeyField + "' must be text");
  }
}

uint32_t Schema::min_version() const noexcept {
  for (const Field& f : fields) {
    if (static_cast<uint8_t>(f.kind) > static_cast<uint8_t>(FieldKind::kTokens)) return 2;
    if (static_cast<uint8_t>(f.dtype) > static_cast<uint8_t>(DType::kInt64)) return 2;
    if (!f.shape.empty()) return 2;
  }
  return 1;
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
    } else if (is_array(f.kind)) {
      s += '/';
      s += dtype_name(f.dtype);
      s += '/';
      std::string dims = f.kind == FieldKind::kVarArray ? "*" : "";
      for (uint32_t d : f.shape) {
        if (!dims.empty()) dims += 'x';
        dims += std::to_string(d);
      }
      s += dims.empty() ? "scalar" : dims;
    }
  }
  return s;
}

std::string_view Record::text_field(size_t i) const {
  if (i >= fields.size()) throw_error(ErrorCode::kInvalidArgument, "field " + std::to_string(i) + " does not exist");
  return {reinterpret_cast<const char*>(fields[i].data()), fields[i].size()};
}

std::string_view record_key(const Schema& schema, std::span<const std::span<const uint8_t>> fields) noexcept {
  const int k = schema.key_field();
  if (k < 0 || static_cast<size_t>(k) >= fields.size()) return {};
  const auto& f = fields[static_cast<size_t>(k)];
  return {reinterpret_cast<const char*>(f.data()), f.size()};
}

}  // namespace stoker
