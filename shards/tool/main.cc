#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <algorithm>

#include "cli.h"
#include "stoker/error.h"

namespace stoker::cli {

static std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

bool register_command(Command c) {
  registry().push_back(std::move(c));
  return true;
}

const std::vector<Command>& commands() { return registry(); }

ArgParser::ArgParser(const Args& args, std::vector<std::string> flags_without_value) {
  auto is_flag = [&](const std::string& n) {
    return std::find(flags_without_value.begin(), flags_without_value.end(), n) !=
           flags_without_value.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a.substr(2);
      auto eq = name.find('=');
      if (eq != std::string::npos) {
        options_.emplace_back(name.substr(0, eq), name.substr(eq + 1));
      } else if (is_flag(name)) {
        flags_.push_back(name);
      } else if (i + 1 < args.size()) {
        options_.emplace_back(name, args[++i]);
      } else {
        throw_error(ErrorCode::kInvalidArgument, "option --" + name + " needs a value");
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::optional<std::string> ArgParser::get(const std::string& name) const {
  std::optional<std::string> v;
  for (auto& [k, val] : options_)
    if (k == name) v = val;
  return v;
}

std::string ArgParser::get_or(const std::string& name, const std::string& fallback) const {
  auto v = get(name);
  return v ? *v : fallback;
}

int64_t ArgParser::get_int(const std::string& name, int64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    int64_t r = std::stoll(*v, &pos);
    if (pos != v->size()) throw std::invalid_argument("trailing");
    return r;
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidArgument, "--" + name + " expects an integer, got '" + *v + "'");
  }
}

double ArgParser::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    double r = std::stod(*v, &pos);
    if (pos != v->size()) throw std::invalid_argument("trailing");
    return r;
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidArgument, "--" + name + " expects a number, got '" + *v + "'");
  }
}

bool ArgParser::flag(const std::string& name) const {
  if (std::find(flags_.begin(), flags_.end(), name) != flags_.end()) return true;
  auto v = get(name);
  return v && (*v == "1" || *v == "true" || *v == "yes");
}

void ArgParser::check_known(const std::vector<std::string>& known) const {
  auto ok = [&](const std::string& n) { return std::find(known.begin(), known.end(), n) != known.end(); };
  for (auto& [k, v] : options_)
    if (!ok(k)) throw_error(ErrorCode::kInvalidArgument, "unknown option --" + k);
  for (auto& f : flags_)
    if (!ok(f)) throw_error(ErrorCode::kInvalidArgument, "unknown option --" + f);
}

uint64_t parse_size(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw_error(ErrorCode::kInvalidArgument, "bad size '" + text + "'");
  }
  std::string unit = text.substr(pos);
  double mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mul = 1e3;
  else if (unit == "MB") mul = 1e6;
  else if (unit == "GB") mul = 1e9;
  else throw_error(ErrorCode::kInvalidArgument, "bad size unit in '" + text + "'");
  if (v < 0) throw_error(ErrorCode::kInvalidArgument, "negative size '" + text + "'");
  return static_cast<uint64_t>(v * mul);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

static void print_usage() {
  std::cerr << "usage: stoker <command> [args]\n\ncommands:\n";
  auto cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.words < b.words; });
  for (auto& c : cmds) std::cerr << "  stoker " << c.words << " " << c.usage << "\n      " << c.help << "\n";
}

}  // namespace stoker::cli

int main(int argc, char** argv) {
  using namespace stoker::cli;
  Args args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    print_usage();
    return args.empty() ? 2 : 0;
  }
  // Longest match of command words.
  const Command* best = nullptr;
  size_t best_words = 0;
  for (auto& c : commands()) {
    std::istringstream in(c.words);
    std::string w;
    size_t n = 0;
    bool match = true;
    while (in >> w) {
      if (n >= args.size() || args[n] != w) { match = false; break; }
      ++n;
    }
    if (match && n > best_words) { best = &c; best_words = n; }
  }
  if (!best) {
    // A command group ("stoker pack", "stoker bench --help"): list its commands.
    bool group = false;
    for (auto& c : commands())
      if (c.words.rfind(args[0] + " ", 0) == 0) {
        if (!group) std::cerr << "usage:\n";
        group = true;
        std::cerr << "  stoker " << c.words << " " << c.usage << "\n      " << c.help << "\n";
      }
    if (group) return args.size() > 1 && (args[1] == "-h" || args[1] == "--help") ? 0 : 2;
    std::cerr << "stoker: unknown command '" << args[0] << "'\n";
    print_usage();
    return 2;
  }
  Args rest(args.begin() + static_cast<long>(best_words), args.end());
  for (auto& a : rest) {
    if (a == "-h" || a == "--help") {
      std::cout << "usage: stoker " << best->words << " " << best->usage << "\n" << best->help << "\n";
      return 0;
    }
  }
  try {
    if (auto rc = run_remote(best->words, rest)) return *rc;
    return best->run(rest);
  } catch (const stoker::Error& e) {
    std::cerr << "stoker: " << stoker::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "stoker: error: " << e.what() << "\n";
    return 1;
  }
}
