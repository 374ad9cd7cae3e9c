// plan_image_fields: which tensor or variable-size output each record field becomes.
//
// Defaults: the first image field is decoded with LoaderOptions::transform (version-1
// datasets call its tensor "image" and their first int64 field "label"); every other
// field comes as stored. LoaderOptions::fields overrides per field. Leaders come before
// the fields that follow them, so a worker decodes an image before its mask.
#include <algorithm>
#include <numeric>

#include "pipeline/producer.h"

namespace stoker::internal {
namespace {

ElemType pixel_elem_type(PixelFormat f) {
  switch (f) {
    case PixelFormat::kU8HWC: case PixelFormat::kU8CHW: return ElemType::kUint8;
    case PixelFormat::kF32CHW: case PixelFormat::kF32HWC: return ElemType::kFloat32;
    case PixelFormat::kF16CHW: case PixelFormat::kF16HWC: return ElemType::kFloat16;
  }
  return ElemType::kUint8;
}
bool pixel_is_chw(PixelFormat f) {
  return f == PixelFormat::kU8CHW || f == PixelFormat::kF32CHW || f == PixelFormat::kF16CHW;
}

ElemType elem_of(DType d, const std::string& field) {
  if (auto t = elem_type_of(d)) return *t;
  throw_error(ErrorCode::kInvalidArgument, "field '" + field + "': dtype " + dtype_name(d) + " has no tensor type");
}

[[noreturn]] void bad_spec(const std::string& field, const std::string& why) {
  throw_error(ErrorCode::kInvalidArgument, "fields['" + field + "']: " + why);
}

// The ImageTransform a RandomResizedCrop / CenterCrop spec describes, checked.
ImageTransform image_transform_of(const std::string& name, const FieldTransform& f, const ImageTransform& base) {
  if (f.size < 1 || f.size > 8192) bad_spec(name, "size must be 1..8192, got " + std::to_string(f.size));
  ImageTransform t = base;
  t.size = f.size;
  if (f.kind == FieldTransform::Kind::kRandomResizedCrop) {
    if (!(f.scale_min > 0 && f.scale_min <= f.scale_max && f.scale_max <= 1))
      bad_spec(name, "scale must satisfy 0 < min <= max <= 1, got (" + std::to_string(f.scale_min) + ", " +
                         std::to_string(f.scale_max) + ")");
    if (!(f.ratio_min > 0 && f.ratio_min <= f.ratio_max))
      bad_spec(name, "ratio must satisfy 0 < min <= max, got (" + std::to_string(f.ratio_min) + ", " +
                         std::to_string(f.ratio_max) + ")");
    if (!(f.flip_prob >= 0 && f.flip_prob <= 1)) bad_spec(name, "flip must be in [0, 1], got " + std::to_string(f.flip_prob));
    t.kind = ImageTransform::Kind::kTrain;
    t.scale_min = f.scale_min;
    t.scale_max = f.scale_max;
    t.ratio_min = f.ratio_min;
    t.ratio_max = f.ratio_max;
    t.flip_prob = f.flip_prob;
  } else {
    if (f.resize != 0 && f.resize < f.size)
      bad_spec(name, "resize must be >= size (" + std::to_string(f.size) + "), got " + std::to_string(f.resize));
    t.kind = ImageTransform::Kind::kEval;
    if (f.resize) t.eval_crop_fraction = static_cast<float>(f.size) / static_cast<float>(f.resize);
  }
  return t;
}

std::string field_names(const Schema& s) {
  std::string out;
  for (const Field& f : s.fields) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

}  // namespace

std::optional<ElemType> elem_type_of(DType d) noexcept {
  switch (d) {
    case DType::kUint8: return ElemType::kUint8;
    case DType::kInt8: return ElemType::kInt8;
    case DType::kUint16: return ElemType::kUint16;
    case DType::kInt16: return ElemType::kInt16;
    case DType::kUint32: return ElemType::kUint32;
    case DType::kInt32: return ElemType::kInt32;
    case DType::kInt64: return ElemType::kInt64;
    case DType::kFloat16: return ElemType::kFloat16;
    case DType::kFloat32: return ElemType::kFloat32;
    case DType::kFloat64: return ElemType::kFloat64;
    case DType::kBool: return ElemType::kBool;
    default: break;
  }
  return std::nullopt;
}

ImageFacts plan_image_fields(const LoaderOptions& opt, const Schema& schema, Context& ctx) {
  const size_t B = opt.batch_size;
  const bool v1 = schema.key_field() < 0;
  ImageFacts facts;
  facts.key_field = schema.key_field();
  for (const auto& [name, spec] : opt.fields)
    if (schema.find(name) < 0)
      throw_error(ErrorCode::kInvalidArgument, "fields['" + name + "']: the dataset has no field '" + name +
                                                   "' (its fields: " + field_names(schema) + ")");
  auto add_var = [&](std::string name, TensorKind kind, ElemType t, std::vector<int64_t> inner) {
    return ctx.add_var(Output::variable(std::move(name), kind, t, std::move(inner)));
  };

  int first_image = -1, first_int64 = -1;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    if (schema.fields[i].kind == FieldKind::kImage && first_image < 0) first_image = static_cast<int>(i);
    if (schema.fields[i].kind == FieldKind::kInt64 && first_int64 < 0) first_int64 = static_cast<int>(i);
  }
  std::vector<int> out_of_field(schema.fields.size(), -1);
  std::vector<std::pair<size_t, const FieldTransform*>> follows;
  uint64_t salt = 0;
  for (size_t i = 0; i < schema.fields.size(); ++i) {
    const Field& f = schema.fields[i];
    const auto it = opt.fields.find(f.name);
    const FieldTransform* spec = it == opt.fields.end() ? nullptr : &it->second;
    FieldOut o;
    o.field = static_cast<int>(i);
    if (spec && (spec->kind == FieldTransform::Kind::kVideoClip || spec->kind == FieldTransform::Kind::kAudioClip))
      continue;  // plan_video_fields
    if (spec && spec->kind != FieldTransform::Kind::kAsStored && f.kind != FieldKind::kImage)
      bad_spec(f.name, std::string("an image transform needs an image field; '") + f.name + "' is " +
                           field_kind_name(f.kind));
    if (spec && spec->kind == FieldTransform::Kind::kFollow) {
      follows.emplace_back(i, spec);  // planned once every leader is
      continue;
    }
    const bool decode = f.kind == FieldKind::kImage &&
                        (spec ? spec->kind != FieldTransform::Kind::kAsStored
                              : static_cast<int>(i) == first_image && opt.transform.kind != ImageTransform::Kind::kNone);
    if (f.kind == FieldKind::kImage && !spec && static_cast<int>(i) == first_image &&
        opt.transform.kind == ImageTransform::Kind::kNone && !opt.untransformed_image_as_stored)
      continue;  // read and checked only: isolates storage and IO
    const std::string out_name = v1 && static_cast<int>(i) == first_image ? "image"
                                 : v1 && static_cast<int>(i) == first_int64 ? "label"
                                                                            : f.name;
    if (decode) {
      o.how = FieldOut::How::kImage;
      o.transform = spec ? image_transform_of(f.name, *spec, opt.transform) : opt.transform;
      if (!spec && (o.transform.size < 1 || o.transform.size > 8192))
        throw_error(ErrorCode::kInvalidArgument, "image size must be 1..8192");
      const int S = o.transform.size;
      o.tensor = pixel_is_chw(opt.pixel_format) ? ctx.add_tensor(out_name, pixel_elem_type(opt.pixel_format), {3, S, S})
                                                : ctx.add_tensor(out_name, pixel_elem_type(opt.pixel_format), {S, S, 3});
      o.seed_salt = salt++;
    } else {
      switch (f.kind) {
        case FieldKind::kInt64:
          o.how = FieldOut::How::kCopy;
          o.bytes = 8;
          o.tensor = ctx.add_tensor(out_name, ElemType::kInt64, {});
          break;
        case FieldKind::kFloat32:
        case FieldKind::kFloat64:
          o.how = FieldOut::How::kCopy;
          o.bytes = f.kind == FieldKind::kFloat32 ? 4 : 8;
          o.tensor = ctx.add_tensor(out_name, f.kind == FieldKind::kFloat32 ? ElemType::kFloat32 : ElemType::kFloat64, {});
          break;
        case FieldKind::kNdarray: {
          o.how = FieldOut::How::kCopy;
          o.bytes = f.fixed_size();
          o.tensor = ctx.add_tensor(out_name, elem_of(f.dtype, f.name), std::vector<int64_t>(f.shape.begin(), f.shape.end()));
          break;
        }
        case FieldKind::kVarArray:
          o.how = FieldOut::How::kVar;
          o.var = add_var(out_name, TensorKind::kRagged, elem_of(f.dtype, f.name),
                          std::vector<int64_t>(f.shape.begin(), f.shape.end()));
          break;
        case FieldKind::kText:
          o.how = FieldOut::How::kVar;
          o.var = add_var(out_name, TensorKind::kText, ElemType::kUint8, {});
          break;
        case FieldKind::kTokens:
          continue;  // not an image dataset's field
        default:  // bytes, images, video and audio as stored
          o.how = FieldOut::How::kVar;
          o.media = f.kind == FieldKind::kVideo || f.kind == FieldKind::kAudio;
          o.var = add_var(out_name, TensorKind::kBytes, ElemType::kUint8, {});
          break;
      }
    }
    out_of_field[i] = static_cast<int>(facts.outs.size());
    facts.outs.push_back(std::move(o));
  }
  for (const auto& [i, spec] : follows) {
    const Field& f = schema.fields[i];
    const int leader_field = schema.find(spec->follow);
    if (spec->follow.empty()) bad_spec(f.name, "Follow needs the image field to follow");
    if (leader_field < 0) bad_spec(f.name, "Follow('" + spec->follow + "'): no such field (its fields: " + field_names(schema) + ")");
    const int leader = out_of_field[static_cast<size_t>(leader_field)];
    if (leader < 0 || facts.outs[static_cast<size_t>(leader)].how != FieldOut::How::kImage)
      bad_spec(f.name, "Follow('" + spec->follow + "'): '" + spec->follow +
                           "' is not an image field with a RandomResizedCrop or CenterCrop transform");
    if (spec->channels != 1 && spec->channels != 3)
      bad_spec(f.name, "channels must be 1 or 3, got " + std::to_string(spec->channels));
    FieldOut o;
    o.how = FieldOut::How::kFollow;
    o.field = static_cast<int>(i);
    o.leader = leader;
    o.follow.channels = spec->channels;
    o.follow.interpolation = spec->interpolation;
    o.follow.max_pixels = opt.transform.max_pixels;
    const int S = facts.outs[static_cast<size_t>(leader)].transform.size;
    o.follow.width = o.follow.height = S;
    o.tensor = ctx.add_tensor(f.name, ElemType::kUint8, {S, S, spec->channels});
    facts.outs.push_back(std::move(o));
  }
  if (v1 && first_int64 < 0) facts.missing_label_t = ctx.add_tensor("label", ElemType::kInt64, {});
  facts.index_t = ctx.add_tensor("index", ElemType::kInt64, {});
  (void)B;
  return facts;
}

}  // namespace stoker::internal
