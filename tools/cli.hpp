// cli.hpp — the command-line convention every ipcring tool follows (ringpub, ringsub, ringdump):
//
//   exit status  0 ok, 1 runtime error, 2 usage error (bad option or value, or a channel name or
//                configuration the library refuses), 3 unhealthy (ringdump check), 4 layout
//                version mismatch (a segment of another ipcring layout)
//   --version    "TOOL VERSION (layout N)" on stdout, exit 0, whatever else is on the line
//   --help       usage on stdout, exit 0
//   --dir DIR    the channel directory (IPCRING_DIR); every tool takes it
//   messages     "TOOL: ..." on stderr; a bad value names its option ("--mode: ...")
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "ipcring/ipcring.hpp"

namespace ipcring::tools {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnhealthy = 3;
inline constexpr int kExitVersion = 4;

inline constexpr const char* kExitFooter =
    "Exit status: 0 ok, 1 runtime error, 2 usage error, 3 unhealthy (ringdump check), 4 layout "
    "version mismatch.";

inline std::string version_text(const std::string& tool) {
  return tool + " " + ipcring::kVersion + " (layout " + std::to_string(ipcring::layout_version()) +
         ")";
}

// --version, --dir, the exit-status footer and "TOOL: " before every parse error.
inline void apply_convention(CLI::App& app, const std::string& tool) {
  app.set_version_flag("--version", version_text(tool));
  // The channel directory for everything this run does (the library reads IPCRING_DIR).
  app.add_option_function<std::string>(
      "--dir", [](const std::string& dir) { setenv("IPCRING_DIR", dir.c_str(), 1); },
      "Channel directory (default: $IPCRING_DIR, else /dev/shm/ipcring-<uid>)");
  app.fallthrough();  // --dir after a subcommand too
  app.footer(kExitFooter);
  app.failure_message([tool](const CLI::App*, const CLI::Error& e) {
    return tool + ": " + e.what() + "\nRun with --help for more information.\n";
  });
}

// Parses the command line. nullopt: go on; otherwise the exit status to return now (0 after
// --help or --version, 2 after a usage error, whose message is printed).
inline std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, the version or the error
    return rc == 0 ? kExitOk : kExitUsage;
  }
  return std::nullopt;
}

// The exit status for an error the library refused with.
inline int exit_code_for(ipcring::Errc code) {
  switch (code) {
    case ipcring::Errc::version_mismatch:
      return kExitVersion;
    case ipcring::Errc::invalid_name:
    case ipcring::Errc::invalid_config:
      return kExitUsage;
    default:
      return kExitError;
  }
}

// Prints "TOOL: message [errc]" on stderr and returns the exit status for it.
inline int report(const std::string& tool, const ipcring::Error& e) {
  std::fprintf(stderr, "%s: %s [%s]\n", tool.c_str(), e.what(), ipcring::to_string(e.code()));
  return exit_code_for(e.code());
}

// An option check for a number of seconds, a rate or a count given as a real number: a number in
// [0, max]. The message names the value; CLI11 puts the option's name before it.
inline CLI::Validator non_negative(double max = std::numeric_limits<double>::max()) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == nullptr || *end != '\0' || std::isnan(value)) {
          return "'" + text + "' is not a number";
        }
        if (value < 0) return "'" + text + "' is negative; it must be 0 or more";
        if (value > max) {
          char limit[32];
          std::snprintf(limit, sizeof limit, "%g", max);
          return "'" + text + "' is more than " + limit;
        }
        return {};
      },
      "NUMBER >= 0");
}

// An option transform for permission bits given in octal ("0660", "660"): all digits octal, at
// most 07777; returns the value in decimal for CLI11 to store. The message names the value; CLI11
// puts the option's name before it.
inline std::string octal_mode(const std::string& text) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("01234567") != std::string::npos) {
    throw CLI::ValidationError("'" + text + "' is not an octal permission mode (e.g. 0660)");
  }
  const unsigned long value = std::stoul(text, nullptr, 8);
  if (value > 07777) throw CLI::ValidationError("'" + text + "' is more than 07777");
  return std::to_string(value);
}

}  // namespace ipcring::tools
