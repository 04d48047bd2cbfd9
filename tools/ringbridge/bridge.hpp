// bridge.hpp — the two directions of ringbridge (export.cpp, import.cpp), driven by main.cpp.
//
// export: an ipcring Reader of one channel; each frame it reads becomes one DDS sample, written
//         while the frame is held (the serialisation is the copy) and released right after, so
//         the bridge never holds more than one frame (within any channel's max_held).
// import: a DDS reader of one topic and an ipcring Producer of one channel; each valid sample is
//         copied into a loan and published. Samples that fail the checks of wire.hpp are
//         counted by reason and dropped.
// Both stop cleanly on SIGINT/SIGTERM (exit 0), print one summary line on stdout, and report
// events (attach, re-attach, matches) on stderr.
#pragma once

#include <cstdint>
#include <string>

#include "dds.hpp"
#include "ipcring/config.hpp"
#include "wire.hpp"

namespace ipcring::bridge {

struct ExportOptions {
  std::string channel;
  std::string topic;  // DDS topic (rt/ is prepended with ros2)
  bool ros2 = false;
  ImageFormat image;     // ros2: the frames' image format
  std::string frame_id;  // ros2: header.frame_id (default: the channel name)
  ReadPolicy policy = ReadPolicy::sequential;
  DdsOptions dds;
  double wait_s = 5;        // give up when the channel has not appeared after this (< 0: never)
  std::uint64_t count = 0;  // stop after sending this many (0: never)
  bool quiet = false;
};

struct ImportOptions {
  std::string topic;
  std::string channel;
  bool ros2 = false;
  ChannelConfig channel_config;
  DdsOptions dds;
  std::uint64_t count = 0;  // stop after publishing this many (0: never)
  bool quiet = false;
};

// Return the process exit code: 0 (stopped by signal or count), 1 (runtime error).
int run_export(const ExportOptions& options);
int run_import(const ImportOptions& options);

}  // namespace ipcring::bridge
