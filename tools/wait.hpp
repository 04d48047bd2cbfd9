// wait.hpp — how every ipcring tool waits for a channel to appear, and stops while it waits.
//
// The one rule (README, docs/operations.md): a tool that reads a channel (ringsub, ringdump
// echo/hz/bw, ringbridge export) waits up to --wait-for-channel SEC for it to appear, 5 s unless
// told: 0 fails at once, `forever` waits until stopped. SIGINT/SIGTERM during the wait end the
// tool as they do later: exit 0, with the tool's summary where it prints one. (The library waits
// only when asked: ReaderOptions::wait_for_channel and Python's wait_for_channel= are 0 unless
// set.)
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "signals.hpp"

namespace ipcring::tools {

inline constexpr double kDefaultWaitForChannelS = 5.0;
inline constexpr double kWaitForever = -1.0;  // what `--wait-for-channel forever` stores

// --wait-for-channel SEC (alias --wait): a number of seconds from 0 to 1e6, or `forever`.
inline CLI::Option* add_wait_option(CLI::App* app, double& wait_s) {
  wait_s = kDefaultWaitForChannelS;
  return app
      ->add_option("--wait-for-channel,--wait", wait_s,
                   "Wait up to SEC seconds for the channel to appear (0: fail at once, forever: "
                   "until stopped)")
      ->transform(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "forever") {
              text = "-1";
              return {};
            }
            std::string checked = text;
            std::string why = non_negative(1e6)(checked);
            if (!why.empty()) why += "; or forever";
            return why;
          },
          "SEC|forever"))
      ->default_str("5");
}

inline std::string wait_text(double wait_s) {
  if (wait_s < 0) return "forever";
  char b[32];
  std::snprintf(b, sizeof b, "%g s", wait_s);
  return b;
}

// Attaches a Reader to `name`, trying again every 20 ms while the channel is absent (not_found,
// not_ready) until `wait_s` has passed (kWaitForever: no end); says once on stderr that it waits
// ("TOOL: waiting ... (Ctrl-C stops)"). nullopt when SIGINT/SIGTERM came first
// (install_stop_handlers() must have been called). Throws the library's Error otherwise; when the
// wait ran out, with how long it waited and how to wait longer.
inline std::optional<ipcring::Reader> attach_waiting(const std::string& tool,
                                                     const std::string& name,
                                                     const ipcring::ReaderOptions& options,
                                                     double wait_s) {
  using namespace std::chrono;
  const auto begin = steady_clock::now();
  bool said = false;
  for (;;) {
    if (stop_requested()) return std::nullopt;
    try {
      return ipcring::Reader::attach(name, options);
    } catch (const ipcring::Error& e) {
      const bool absent =
          e.code() == ipcring::Errc::not_found || e.code() == ipcring::Errc::not_ready;
      if (!absent) throw;
      const double waited = duration<double>(steady_clock::now() - begin).count();
      if (wait_s >= 0 && waited >= wait_s) {
        char b[64];
        std::snprintf(b, sizeof b, " (waited %.1f s", waited);
        throw ipcring::Error(e.code(), std::string(e.what()) + b +
                                           "; --wait-for-channel SEC or forever waits longer)");
      }
      if (!said) {
        std::fprintf(
            stderr, "%s: waiting %s for channel '%s' to appear (Ctrl-C stops)\n", tool.c_str(),
            wait_s < 0 ? "until stopped" : ("up to " + wait_text(wait_s)).c_str(), name.c_str());
        said = true;
      }
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

}  // namespace ipcring::tools
