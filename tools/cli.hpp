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

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

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

// CLI11's own texts for the errors no validator of ours catches first, in this convention's
// words: "OPTION: given 2 times; give it once" for "OPTION: At Most 1 required but received 2",
// "OPTION: 'TEXT' is not a number of the option's kind" for "Could not convert: OPTION = TEXT".
inline std::string plain_error(const std::string& what) {
  const std::string at_most = ": At Most ";
  if (const auto at = what.find(at_most); at != std::string::npos) {
    const auto received = what.rfind(' ');
    const std::string most = what.substr(
        at + at_most.size(), what.find(' ', at + at_most.size()) - (at + at_most.size()));
    return what.substr(0, at) + ": given " + what.substr(received + 1) + " times; give it " +
           (most == "1" ? std::string("once") : "at most " + most + " times");
  }
  const std::string convert = "Could not convert: ";
  if (what.rfind(convert, 0) == 0) {
    const auto eq = what.find(" = ");
    if (eq != std::string::npos) {
      return what.substr(convert.size(), eq - convert.size()) + ": '" + what.substr(eq + 3) +
             "' is not a value this option takes";
    }
  }
  return what;
}

// --version, --dir, the exit-status footer and "TOOL: " before every parse error.
inline void apply_convention(CLI::App& app, const std::string& tool) {
  app.set_version_flag("--version", version_text(tool));
  // The channel directory for everything this run does (the library reads IPCRING_DIR).
  app.add_option_function<std::string>(
      "--dir",
      [](const std::string& dir) {
        setenv("IPCRING_DIR", dir.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): while parsing,
      },                                        // before any thread starts
      "Channel directory (default: $IPCRING_DIR, else /dev/shm/ipcring-<uid>)");
  app.fallthrough();  // --dir after a subcommand too
  app.footer(kExitFooter);
  app.failure_message([tool](const CLI::App*, const CLI::Error& e) {
    return tool + ": " + plain_error(e.what()) + "\nRun with --help for more information.\n";
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

// One of `names`: "OPTION: 'TEXT' is not one of a, b, c" otherwise.
inline CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return CLI::Validator(
      [names, list](std::string& v) {
        for (const auto& n : names) {
          if (v == n) return std::string();
        }
        return "'" + v + "' is not one of " + list;
      },
      "", "");
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

// What to do about an error, for the errors a tool's user can act on ("" for the others).
inline std::string advice_for(ipcring::Errc code) {
  switch (code) {
    case ipcring::Errc::too_many_readers:
      return "the producer's --readers N (ringpub, ringbridge import; max_readers in the library) "
             "sizes the reader entries; ringdump show, list, check, watch, echo, hz, bw, record "
             "and serve take none";
    case ipcring::Errc::config_mismatch:
      return "stop the readers first, or start the producer with the channel's geometry "
             "(ringdump show NAME shows it)";
    default:
      return {};
  }
}

// Prints "TOOL: message [errc]" on stderr (and, on the next line, what to do where the error
// has a remedy) and returns the exit status for it.
inline int report(const std::string& tool, const ipcring::Error& e) {
  std::fprintf(stderr, "%s: %s [%s]\n", tool.c_str(), e.what(), ipcring::to_string(e.code()));
  if (const std::string advice = advice_for(e.code()); !advice.empty()) {
    std::fprintf(stderr, "%s: %s\n", tool.c_str(), advice.c_str());
  }
  return exit_code_for(e.code());
}

// An option check for a number of seconds, a rate or a count given as a real number: a number in
// [0, max]. The message names the value; CLI11 puts the option's name before it.
inline CLI::Validator non_negative(double max = 1e9) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g", max);
        const std::string range = std::string(" (a number from 0 to ") + limit + ")";
        if (text.empty() || end == nullptr || *end != '\0' || std::isnan(value)) {
          return "'" + text + "' is not a number" + range;
        }
        if (value < 0) return "'" + text + "' is negative" + range;
        if (value > max) return "'" + text + "' is out of range" + range;
        return {};
      },
      "NUMBER >= 0");
}

// An option check for seconds or a rate that must be more than 0 (an interval, a period).
inline CLI::Validator positive(double max = 1e9) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        char limit[32];
        std::snprintf(limit, sizeof limit, "%g", max);
        const std::string range =
            std::string(" (it must be more than 0 and at most ") + limit + ")";
        if (text.empty() || end == nullptr || *end != '\0' || std::isnan(value)) {
          return "'" + text + "' is not a number" + range;
        }
        if (value <= 0 || value > max) return "'" + text + "' is out of range" + range;
        return {};
      },
      "NUMBER > 0");
}

// Reads a whole number in decimal digits only (no sign, no fraction, no spaces); false when the
// text is not one or does not fit 64 bits.
inline bool parse_whole(const std::string& text, std::uint64_t& out) {
  if (text.empty() || text.size() > 20 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  out = v;
  return true;
}

// An option check for a count (frames, slots, readers, reports): a whole number in [min, max].
// A negative, fractional or empty value is refused with the option's range, never wrapped round
// to a huge count (`--max-lag -1` must not switch the lag check off).
inline CLI::Validator count(std::uint64_t min = 0,
                            std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const std::string range =
            max == std::numeric_limits<std::uint64_t>::max()
                ? "a whole number, " + std::to_string(min) + " or more"
                : "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
        if (!parse_whole(text, value)) return "'" + text + "' is not " + range;
        if (value < min || value > max) return "'" + text + "' is out of range; give " + range;
        return {};
      },
      "N");
}

// The bytes that a size given with a binary suffix means: "65536", "4k", "4K", "4KiB", "1M",
// "8MiB", "2G", "2GiB" (k, M and G are 1024, 1024^2 and 1024^3; a "B" after them or alone is
// allowed). nullopt for anything else, or for a size beyond 64 bits.
inline std::optional<std::uint64_t> parse_size(const std::string& text) {
  const auto digits_end = text.find_first_not_of("0123456789");
  std::uint64_t value = 0;
  if (!parse_whole(text.substr(0, digits_end), value)) return std::nullopt;
  const std::string suffix = digits_end == std::string::npos ? "" : text.substr(digits_end);
  std::uint64_t unit = 1;
  if (suffix.empty() || suffix == "B") {
    unit = 1;
  } else if (suffix == "k" || suffix == "K" || suffix == "KiB" || suffix == "kiB") {
    unit = std::uint64_t{1} << 10;
  } else if (suffix == "M" || suffix == "MiB") {
    unit = std::uint64_t{1} << 20;
  } else if (suffix == "G" || suffix == "GiB") {
    unit = std::uint64_t{1} << 30;
  } else {
    return std::nullopt;
  }
  if (value > std::numeric_limits<std::uint64_t>::max() / unit) return std::nullopt;
  return value * unit;
}

// "8388608 (8MiB)" for a size given as "8MiB"; only the number when that is what was given.
inline std::string size_text(std::uint64_t bytes, const std::string& given) {
  const std::string number = std::to_string(bytes);
  return given.empty() || given == number ? number : number + " (" + given + ")";
}

// An option transform for a size in bytes with an optional suffix (parse_size), in [min, max];
// gives CLI11 the number of bytes in decimal. The message repeats the text exactly as given.
inline CLI::Validator size_bytes(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const std::string range = " (bytes from " + std::to_string(min) + " to " +
                                  std::to_string(max) + "; suffixes k, M, G, KiB, MiB, GiB)";
        const auto value = parse_size(text);
        if (!value) return "'" + text + "' is not a size" + range;
        if (*value < min || *value > max) {
          return "'" + text + "' (" + std::to_string(*value) + " bytes) is out of range" + range;
        }
        text = std::to_string(*value);
        return {};
      },
      "BYTES");
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
