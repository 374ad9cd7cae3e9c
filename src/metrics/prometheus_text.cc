#include "metrics/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <unordered_map>

namespace stoker::internal {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Unit suffixes of the stats' names and Prometheus's spelling of them, longest first.
constexpr std::pair<const char*, const char*> kUnits[] = {
    {"_per_s", "_per_second"},
    {"_frac", "_ratio"},
    {"_s", "_seconds"},
};

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

// Hands a walk's figures to `out` as samples, keeping the path of groups.
class SampleCollector : public StatsVisitor {
 public:
  SampleCollector(const std::string& labels, const std::set<std::string>& counters, CounterCarry& carry,
                  std::vector<MetricSample>& out)
      : labels_(labels), counters_(counters), carry_(carry), out_(out) {}

  void count(const char* name, uint64_t value) override { number(name, static_cast<double>(value)); }
  void integer(const char* name, int64_t value) override { number(name, static_cast<double>(value)); }
  void figure(const char* name, double value) override { number(name, value); }
  void flag(const char* name, bool value) override { number(name, value ? 1.0 : 0.0); }
  void text(const char* name, const std::string& value) override {
    const std::string path = path_of(name);
    // The text's own label is named after the figure's last part: bottleneck="decode".
    std::string label = metric_name(name).substr(sizeof "stoker_" - 1);
    std::string labels = labels_;
    if (!labels.empty()) labels += ',';
    labels += label + "=\"" + escape_label_value(value) + '"';
    out_.push_back({metric_name(path), false, path, std::move(labels), 1.0});
  }
  void none(const char*) override {}
  void begin_group(const char* name) override { groups_.push_back(name); }
  void end_group() override { groups_.pop_back(); }

 private:
  std::string path_of(const char* name) const {
    std::string p;
    for (const auto& g : groups_) p += g + '.';
    return p + name;
  }
  void number(const char* name, double value) {
    const std::string path = path_of(name);
    if (counters_.count(path)) {
      std::string family = metric_name(path) + "_total";
      const double v = carry_.carry(family, value);
      out_.push_back({std::move(family), true, path, labels_, v});
    } else {
      out_.push_back({metric_name(path), false, path, labels_, value});
    }
  }

  const std::string& labels_;
  const std::set<std::string>& counters_;
  CounterCarry& carry_;
  std::vector<MetricSample>& out_;
  std::vector<std::string> groups_;
};

}  // namespace

double CounterCarry::carry(const std::string& family, double value) {
  auto& [last, base] = seen_[family];
  if (value < last) base += last;
  last = value;
  return base + value;
}

std::string metric_name(const std::string& path) {
  std::string out = "stoker";
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    std::string part = path.substr(start, dot - start);
    // "bytes_read" -> "read_bytes": the unit goes last ("bytes_per_s" stays a rate).
    if (part.rfind("bytes_", 0) == 0 && part.rfind("bytes_per_", 0) != 0) part = part.substr(6) + "_bytes";
    for (const auto& [from, to] : kUnits)
      if (ends_with(part, from)) {
        part = part.substr(0, part.size() - std::string(from).size()) + to;
        break;
      }
    for (char& c : part)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) c = '_';
    out += '_' + part;
    start = dot + 1;
  }
  return out;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

bool valid_label_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string render_labels(const std::vector<std::pair<std::string, std::string>>& labels) {
  std::string out;
  for (const auto& [name, value] : labels) {
    if (!out.empty()) out += ',';
    out += name + "=\"" + escape_label_value(value) + '"';
  }
  return out;
}

void collect_samples(const std::function<void(StatsVisitor&)>& walk, const std::string& labels,
                     const std::set<std::string>& counters, CounterCarry& carry, std::vector<MetricSample>& out) {
  SampleCollector c(labels, counters, carry, out);
  walk(c);
}

std::string render_exposition(const std::vector<MetricSample>& samples) {
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const MetricSample*>> families;
  for (const auto& s : samples) {
    auto& f = families[s.family];
    if (f.empty()) order.push_back(s.family);
    f.push_back(&s);
  }
  std::string out;
  for (const auto& name : order) {
    const auto& f = families[name];
    out += "# HELP " + name + " stoker figure " + f.front()->path + '\n';
    out += "# TYPE " + name + (f.front()->counter ? " counter\n" : " gauge\n");
    for (const MetricSample* s : f) {
      out += name;
      if (!s->labels.empty()) out += '{' + s->labels + '}';
      out += ' ' + format_value(s->value) + '\n';
    }
  }
  return out;
}

}  // namespace stoker::internal
