#include "field_spec.h"

#include <charconv>

namespace stoker::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t k = s.find(sep, at);
    out.push_back(s.substr(at, k == std::string::npos ? std::string::npos : k - at));
    if (k == std::string::npos) return out;
    at = k + 1;
  }
}

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw UsageError("--field '" + text + "': " + why +
                   " (forms: NAME, NAME=stored, NAME=train[:SIZE], NAME=eval[:SIZE[:RESIZE]], "
                   "NAME=follow:LEADER[:nearest|antialiased][:1|3])");
}

int number(const std::string& text, const std::string& part, const char* what, int lo, int hi) {
  int v = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (part.empty() || ec != std::errc() || end != part.data() + part.size())
    bad(text, std::string(what) + " must be a whole number, got '" + part + "'");
  if (v < lo || v > hi)
    bad(text, std::string(what) + " must be " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + part);
  return v;
}

}  // namespace

std::pair<std::string, FieldTransform> parse_field_spec(const std::string& text, int default_size) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  if (name.empty()) bad(text, "no field name before '='");
  FieldTransform f;
  f.size = default_size;
  if (eq == std::string::npos) return {name, f};  // as stored
  const std::vector<std::string> parts = split(text.substr(eq + 1), ':');
  const std::string& kind = parts[0];
  constexpr int kMaxSide = 8192;
  if (kind == "stored") {
    if (parts.size() > 1) bad(text, "'stored' takes no parameters");
  } else if (kind == "train") {
    f.kind = FieldTransform::Kind::kRandomResizedCrop;
    if (parts.size() > 2) bad(text, "train takes one parameter, SIZE");
    if (parts.size() == 2) f.size = number(text, parts[1], "SIZE", 1, kMaxSide);
  } else if (kind == "eval") {
    f.kind = FieldTransform::Kind::kCenterCrop;
    if (parts.size() > 3) bad(text, "eval takes at most SIZE and RESIZE");
    if (parts.size() >= 2) f.size = number(text, parts[1], "SIZE", 1, kMaxSide);
    if (parts.size() == 3) {
      f.resize = number(text, parts[2], "RESIZE", 1, 4 * kMaxSide);
      if (f.resize < f.size) bad(text, "RESIZE must be >= SIZE (" + std::to_string(f.size) + "), got " + parts[2]);
    }
  } else if (kind == "follow") {
    f.kind = FieldTransform::Kind::kFollow;
    if (parts.size() < 2 || parts[1].empty()) bad(text, "follow needs the image field to follow: follow:LEADER");
    if (parts.size() > 4) bad(text, "follow takes at most LEADER, an interpolation and a channel count");
    f.follow = parts[1];
    if (f.follow == name) bad(text, "a field cannot follow itself");
    for (size_t i = 2; i < parts.size(); ++i) {
      const std::string& p = parts[i];
      if (p == "nearest") f.interpolation = Interpolation::kNearest;
      else if (p == "antialiased") f.interpolation = Interpolation::kAntialiased;
      else if (p == "1" || p == "3") f.channels = p[0] - '0';
      else bad(text, "'" + p + "' is neither an interpolation (nearest, antialiased) nor a channel count (1, 3)");
    }
  } else if (kind == "clip") {
    f.kind = FieldTransform::Kind::kVideoClip;
    if (parts.size() < 2 || parts.size() > 4) bad(text, "clip takes FRAMES, then STRIDE or FPS'fps', then SIZE");
    f.video.frames = number(text, parts[1], "FRAMES", 1, 1024);
    if (parts.size() >= 3) {
      const std::string& p = parts[2];
      if (p.size() > 3 && p.compare(p.size() - 3, 3, "fps") == 0) f.video.fps = number(text, p.substr(0, p.size() - 3), "FPS", 1, 1000);
      else f.video.stride = number(text, p, "STRIDE", 1, 1 << 20);
    }
    if (parts.size() == 4) f.size = number(text, parts[3], "SIZE", 1, kMaxSide);
    f.video.height = f.video.width = f.size;
  } else {
    bad(text, "unknown transform '" + kind + "'");
  }
  if (f.size < 1 || f.size > kMaxSide) bad(text, "SIZE must be 1..8192, got " + std::to_string(f.size));
  return {name, f};
}

std::map<std::string, FieldTransform> parse_field_specs(const std::vector<std::string>& texts, int default_size) {
  std::map<std::string, FieldTransform> out;
  for (const std::string& t : texts) {
    auto [name, f] = parse_field_spec(t, default_size);
    if (!out.emplace(name, f).second) throw UsageError("--field: field '" + name + "' is given twice");
  }
  return out;
}

CLI::Validator field_spec() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_field_spec(s, 224);
          return {};
        } catch (const UsageError& e) {
          // CLI11 puts the option's name in front itself.
          const std::string m = e.what();
          return m.rfind("--field ", 0) == 0 ? m.substr(8) : m;
        }
      },
      "NAME[=SPEC]");
}

}  // namespace stoker::cli
