// stream.hpp — the ringdump subcommands that read a channel's frames as a reader:
//
//   ringdump echo NAME [--count N]   each new frame: header, tensor, metadata, a value summary
//                    [--save DIR]    (and the frames as .npy / raw files)
//   ringdump hz NAME                 publication rate over a window (min/max/std-dev of intervals)
//   ringdump bw NAME                 bandwidth over a window (frame sizes x rate)
//
// Unlike list/show/watch/check, these attach a Reader (they take a reader entry for as long as
// they run; `ringdump show` lists them). Each frame is released as soon as what is printed was
// copied out of it: echo never holds a frame while it prints or waits.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ringdump::stream {

struct Commands {
  CLI::App* echo = nullptr;
  CLI::App* hz = nullptr;
  CLI::App* bw = nullptr;
  std::string name;
  std::uint64_t count = 0;        // echo: frames; hz/bw: reports (0: until Ctrl-C)
  bool json = false;              // one JSON object per line
  bool sequential = false;        // echo: every frame in order (default: the newest)
  std::uint64_t window = 100;     // hz/bw: intervals in the window
  double interval_s = 1.0;        // hz/bw: seconds between reports
  std::uint64_t elements = 1000;  // echo: elements summarised
  std::string save_dir;           // echo --save: frames written into this directory
  double wait_s = 5;              // seconds to wait for the channel (wait.hpp; < 0: forever)
};

void add(CLI::App& app, Commands& commands);

// Runs the parsed subcommand of `commands`; std::nullopt when none of them was parsed. Throws
// ipcring::Error (the caller reports it as for every subcommand).
std::optional<int> run(const Commands& commands);

}  // namespace ringdump::stream
