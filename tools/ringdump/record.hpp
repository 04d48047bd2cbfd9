// record.hpp — the ringdump subcommands that keep frames in MCAP files (mcap.dev) and bring them
// back:
//
//   ringdump record NAME... -o FILE.mcap   frames of one or more channels into one MCAP file
//   ringdump info FILE.mcap                channels, message counts, duration, drops of a file
//   ringdump play FILE.mcap                republishes a file's channels into ipcring channels
//
// record reads each channel as an observer (docs/observers.md: no reader entry, nothing held in the
// producer's ring; --reader, and CUDA channels, take a reader entry that holds one frame at a
// time; a CUDA frame is copied to page-locked memory first, device_copy.hpp) and copies each
// frame into a buffer; compression and writing happen on a writer thread.
// Frames it could not take in time (the producer overran it, or overwrote a copy being taken)
// are counted per channel, written into the file (metadata record `ipcring.drops`) and printed.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringdump::record {

struct Commands {
  CLI::App* record = nullptr;
  CLI::App* info = nullptr;
  CLI::App* play = nullptr;
  // record
  std::vector<std::string> names;
  std::string output;
  double duration_s = 0;    // 0: until Ctrl-C (or --count)
  std::uint64_t count = 0;  // frames per channel (0: no limit)
  std::string compression = "zstd";
  double buffer_mb = 512;              // frames copied but not yet written, at most
  double chunk_mb = 8;                 // chunk size before compression
  std::vector<std::string> encodings;  // NAME=ENCODING for image channels
  double wait_s = 5;                   // for the channels to appear
  bool sync = false;                   // fsync the file at the end
  bool no_crc = false;                 // write chunk and data section CRCs as 0 (not computed)
  bool reader = false;                 // a holding reader (a reader entry) instead of an observer
  // info and play
  std::string file;
  bool json = false;
  // play
  double rate = 1.0;  // 0: as fast as possible
  bool loop = false;
  std::vector<std::string> remaps;  // OLD=NEW
  std::uint32_t wait_readers = 0;   // wait for this many readers on each channel first
  double wait_readers_s = 10;
};

void add(CLI::App& app, Commands& commands);

// Runs the parsed subcommand of `commands`; std::nullopt when none of them was parsed. Throws
// ipcring::Error and std::runtime_error (the caller reports them as for every subcommand).
std::optional<int> run(const Commands& commands);

// The subcommands, in their files.
int cmd_record(const Commands& c);  // record.cpp
int cmd_info(const Commands& c);    // info.cpp
int cmd_play(const Commands& c);    // play.cpp

}  // namespace ringdump::record
