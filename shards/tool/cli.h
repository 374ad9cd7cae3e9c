// The `stoker` command-line tool: a thin layer over the library.
//
// Each subcommand lives in its own source file and registers itself with
// STOKER_COMMAND, so adding a command touches no shared file. Commands get their
// arguments after the command words and return the process exit code; a thrown
// stoker::Error is printed as "stoker: <code>: <message>" with exit code 1.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stoker::cli {

using Args = std::vector<std::string>;
using CommandFn = std::function<int(const Args&)>;

struct Command {
  std::string words;  ///< "pack imagefolder", "verify", "bench io"
  std::string usage;  ///< one line: arguments and options
  std::string help;   ///< one sentence
  CommandFn run;
};

bool register_command(Command c);
const std::vector<Command>& commands();

/// Small option parser: `--name value`, `--name=value`, `--flag`; the rest positional.
class ArgParser {
 public:
  ArgParser(const Args& args, std::vector<std::string> flags_without_value = {});
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  bool flag(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  /// Throws kInvalidArgument naming the first option not in `known`.
  void check_known(const std::vector<std::string>& known) const;

 private:
  std::vector<std::pair<std::string, std::string>> options_;
  std::vector<std::string> flags_;
  std::vector<std::string> positional_;
};

/// Parses "256MiB", "1G", "4096", "64KiB" into bytes. Throws kInvalidArgument.
uint64_t parse_size(const std::string& text);

/// Human-readable byte count ("85.3 KiB").
std::string format_bytes(double bytes);

/// The remote forms of verify, inspect, bench io and doctor (remote_cmd.cc): runs the
/// command when `words` is one of them and it names an http(s):// or s3:// dataset;
/// nullopt otherwise (the local command runs).
std::optional<int> run_remote(const std::string& words, const Args& args);

}  // namespace stoker::cli

#define STOKER_CLI_CONCAT2(a, b) a##b
#define STOKER_CLI_CONCAT(a, b) STOKER_CLI_CONCAT2(a, b)
/// Registers a command at static-initialisation time.
#define STOKER_COMMAND(...)                                                  \
  static const bool STOKER_CLI_CONCAT(stoker_cmd_registered_, __LINE__) = \
      ::stoker::cli::register_command(::stoker::cli::Command{__VA_ARGS__})
