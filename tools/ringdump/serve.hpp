// serve.hpp — ringdump serve: channels live over the Foxglove WebSocket protocol
// (foxglove.websocket.v1: serverInfo, advertise with schemas, subscribe/unsubscribe, binary
// message data), so Foxglove and Lichtblick show them, plus a page of its own at `/` that draws
// the latest frame of each image channel on a canvas (its script is served by ringdump too: no
// build step, no CDN). Frames are sent as record writes them (messages.hpp): image-like frames
// as sensor_msgs/msg/Image, the others as ipcring/msg/Frame, both CDR.
//
//   ringdump serve [NAME...] [--host 127.0.0.1] [--port 8765] [--max-rate HZ] [--queue N]
//
// Each channel is read by an observer (latest policy; no reader entry, nothing held in the ring)
// whose copy of a frame is encoded into one message shared by every client; a client that reads
// slowly never holds a frame. Each
// client has a queue of at most --queue frames: when it is full the oldest frame is dropped and
// counted (GET /stats, and the summary printed at exit). The default address is loopback;
// another must be asked for with --host.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringdump::serve {

struct Commands {
  CLI::App* serve = nullptr;
  std::vector<std::string> names;
  std::string host = "127.0.0.1";
  std::uint16_t port = 8765;           // 0: any free port (printed)
  double max_rate_hz = 0;              // per channel; 0: every frame
  std::uint32_t queue = 4;             // frames per client
  std::vector<std::string> encodings;  // NAME=ENCODING for image channels
  double wait_s = 5;
};

void add(CLI::App& app, Commands& commands);
std::optional<int> run(const Commands& commands);

// The built-in page (page.cpp).
extern const char* const kPageHtml;
extern const char* const kPageScript;

}  // namespace ringdump::serve
