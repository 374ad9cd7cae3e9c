// The `stoker` command-line tool: a thin layer over the library; CLI11 parses every
// argument.
//
// Each command lives in its own source file under src/cli/ and registers itself with
// STOKER_COMMAND(name, fn): `fn` declares the command's words, options and help on the
// tool's CLI::App and names, with on_run, what runs when it is given. Adding a command
// touches no shared file.
//
// Exit codes, for every command: 0 success; 1 a runtime error (a thrown stoker::Error,
// printed as "stoker: <code>: <message>", or a check that failed); 2 a usage error (an
// unknown command, kind or option, an argument missing or malformed), printed with the
// command it concerns and where its help is. Help (--help, -h, `stoker help CMD`) and
// --version go to stdout with exit code 0.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

namespace stoker::cli {

/// What a command does once its arguments are parsed; returns the exit code.
using Run = std::function<int()>;
/// Declares a command (or a command group's kinds) on the tool's root app.
using Setup = void (*)(CLI::App& tool);

/// Adds a command; `name` orders the commands in the help.
bool register_command(const char* name, Setup setup);

/// Names what runs when `cmd` is the command given.
void on_run(CLI::App* cmd, Run run);

/// The command group `name` ("pack", "sample", "bench") of the tool, made on first use:
/// its kinds are subcommands, added by the files that implement them.
CLI::App* group(CLI::App& tool, const std::string& name, const std::string& help);

/// A usage error a command finds after parsing (options that do not go together, ...):
/// exit code 2, like the parser's own.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses "256MiB", "1G", "4096", "64KiB" into bytes. Throws UsageError.
uint64_t parse_size(const std::string& text);

/// Checks an option's value with parse_size at parse time (a usage error names it).
CLI::Validator byte_size();

/// Checks an option's value with one of the library's name parsers (dtype_from_name,
/// parse_order_kind, ...): the error it throws becomes the usage error.
template <class Parse>
CLI::Validator named_by(Parse parse, std::string names) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
          return {};
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      std::move(names));
}

/// A number >= 0 (non_negative) or > 0 (positive); the usage error says so in words
/// (CLI11's own range checks print the upper bound, DBL_MAX, in full).
CLI::Validator non_negative();
CLI::Validator positive();

/// Human-readable byte count ("85.3 KiB").
std::string format_bytes(double bytes);

}  // namespace stoker::cli

#define STOKER_CLI_CONCAT2(a, b) a##b
#define STOKER_CLI_CONCAT(a, b) STOKER_CLI_CONCAT2(a, b)
/// Registers a command at static-initialisation time.
#define STOKER_COMMAND(name, setup)                                       \
  static const bool STOKER_CLI_CONCAT(stoker_cmd_registered_, __LINE__) = \
      ::stoker::cli::register_command(name, setup)
