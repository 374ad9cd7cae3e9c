// main() of the `stoker` tool: builds the CLI11 app from the registered commands, parses,
// and maps every outcome to the exit codes cli.h promises.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <map>
#include <utility>
#include <vector>

#include "cli.h"
// Internal (the tool links the library statically): byte counts printed as the
// library prints them.
#include "util/bytes.h"
#include "stoker/error.h"

#ifndef STOKER_VERSION
#error "STOKER_VERSION is set by CMake from the project version"
#endif

namespace stoker::cli {
namespace {

std::vector<std::pair<std::string, Setup>>& registry() {
  static std::vector<std::pair<std::string, Setup>> r;
  return r;
}

std::map<const CLI::App*, Run>& runs() {
  static std::map<const CLI::App*, Run> r;
  return r;
}

// "stoker pack imagefolder": the words that reach `app`.
std::string words(const CLI::App* app) {
  std::string w;
  for (const CLI::App* a = app; a; a = a->get_parent()) w = a->get_name() + (w.empty() ? "" : " " + w);
  return w;
}

// The deepest command given: the tool, a group, or a command.
CLI::App* given(CLI::App& tool) {
  CLI::App* app = &tool;
  for (;;) {
    auto subs = app->get_subcommands();
    if (subs.empty()) return app;
    app = subs.front();
  }
}

std::string kinds(const CLI::App* app) {
  std::string k;
  for (const CLI::App* s : app->get_subcommands([](const CLI::App*) { return true; }))
    k += (k.empty() ? "" : ", ") + s->get_name();
  return k;
}

int usage_error(const CLI::App* app, const std::string& message) {
  std::cerr << words(app) << ": " << message << "\nRun '" << words(app) << " --help' for usage.\n";
  return 2;
}

// Arguments no command took: the first one decides the message.
int leftover_error(const CLI::App* app, const std::vector<std::string>& left) {
  const std::string& a = left.front();
  if (a.size() > 1 && a[0] == '-') return usage_error(app, "unknown option " + a.substr(0, a.find('=')));
  if (!app->get_parent()) return usage_error(app, "unknown command '" + a + "' (commands: " + kinds(app) + ")");
  if (!app->get_subcommands([](const CLI::App*) { return true; }).empty())
    return usage_error(app, "unknown kind '" + a + "' (kinds: " + kinds(app) + ")");
  return usage_error(app, "unexpected argument '" + a + "'");
}

void allow_extras_everywhere(CLI::App* app) {
  // Left-overs are reported by leftover_error, with the messages cli.h promises.
  app->allow_extras();
  for (CLI::App* s : app->get_subcommands([](const CLI::App*) { return true; })) allow_extras_everywhere(s);
}

// `stoker help [COMMAND...]`: the help of the tool or of a command, on stdout.
int help_cmd(CLI::App& tool, const std::vector<std::string>& which) {
  CLI::App* app = &tool;
  for (const std::string& w : which) {
    CLI::App* next = nullptr;
    for (CLI::App* s : app->get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == w) next = s;
    if (!next) return leftover_error(app, {w});
    app = next;
  }
  // The formatter, not App::help: the tool's help would follow the command given (help).
  std::cout << app->get_formatter()->make_help(app, words(app), CLI::AppFormatMode::Normal);
  return 0;
}

}  // namespace

bool register_command(const char* name, Setup setup) {
  registry().emplace_back(name, setup);
  return true;
}

void on_run(CLI::App* cmd, Run run) { runs()[cmd] = std::move(run); }

CLI::App* group(CLI::App& tool, const std::string& name, const std::string& help) {
  for (CLI::App* s : tool.get_subcommands([](const CLI::App*) { return true; }))
    if (s->get_name() == name) return s;
  // One kind per call: a later word is an argument ("pack tokens in.bin tokens"), never a
  // second kind.
  return tool.add_subcommand(name, help)->require_subcommand(0, 1);
}

uint64_t parse_size(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw UsageError("bad size '" + text + "' (e.g. 4096, 64KiB, 256MiB, 1G)");
  }
  const std::string unit = text.substr(pos);
  double mul = 1;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mul = 1e3;
  else if (unit == "MB") mul = 1e6;
  else if (unit == "GB") mul = 1e9;
  else throw UsageError("bad size unit in '" + text + "' (B, KiB, MiB, GiB, KB, MB, GB)");
  if (v < 0 || !std::isfinite(v)) throw UsageError("size '" + text + "' must be a finite number >= 0");
  return static_cast<uint64_t>(v * mul);
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_size(s);
          return {};
        } catch (const UsageError& e) {
          return e.what();
        }
      },
      "BYTES", "byte size");
}

namespace {

CLI::Validator lower_bound(bool inclusive) {
  return CLI::Validator(
      [inclusive](std::string& s) -> std::string {
        char* end = nullptr;
        const long double v = std::strtold(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return "'" + s + "' is not a number";
        if (inclusive ? v >= 0 : v > 0) return {};
        return "'" + s + "' is out of range: give a number " + (inclusive ? ">= 0" : "> 0");
      },
      inclusive ? "NONNEGATIVE" : "POSITIVE");
}

}  // namespace

CLI::Validator non_negative() { return lower_bound(true); }
CLI::Validator positive() { return lower_bound(false); }

std::string format_bytes(double b) { return internal::format_bytes(b); }

}  // namespace stoker::cli

int main(int argc, char** argv) {
  using namespace stoker::cli;
  CLI::App tool("stoker " STOKER_VERSION ": checksummed shards, a fast input pipeline and its diagnosis.", "stoker");
  tool.set_version_flag("--version", "stoker " STOKER_VERSION);
  tool.require_subcommand(0, 1);  // one command; later words are its arguments
  auto reg = registry();
  std::stable_sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [name, setup] : reg) setup(tool);
  std::vector<std::string> help_words;
  CLI::App* help = tool.add_subcommand("help", "Show the help of the tool or of a command (stoker help pack wds).");
  help->add_option("COMMAND", help_words, "command words");
  allow_extras_everywhere(&tool);
  // Set last: subcommands made after it would repeat it.
  tool.footer("Run 'stoker COMMAND --help' for a command's options. Exit codes: 0 ok, 1 runtime error or failed "
              "check, 2 usage error.");

  if (argc < 2) {
    std::cerr << tool.help();
    return 2;
  }
  try {
    tool.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version: stdout, exit 0
    return tool.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(given(tool), e.what());
  }
  CLI::App* cmd = given(tool);
  for (CLI::App* a = cmd; a; a = a->get_parent()) {
    auto left = a->remaining(false);
    if (!left.empty()) return leftover_error(a, left);
  }
  if (cmd == help) return help_cmd(tool, help_words);
  auto run = runs().find(cmd);
  if (run == runs().end()) {
    // The tool or a group alone: which command, or which kind?
    std::cerr << tool.help();  // follows the command given: "Usage: stoker pack ..."
    return usage_error(cmd, cmd == &tool ? "name a command" : "name a kind: " + kinds(cmd));
  }
  try {
    return run->second();
  } catch (const UsageError& e) {
    return usage_error(cmd, e.what());
  } catch (const stoker::Error& e) {
    std::cerr << "stoker: " << stoker::error_code_name(e.code()) << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "stoker: error: " << e.what() << "\n";
    return 1;
  }
}
