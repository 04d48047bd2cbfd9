// serve_status.hpp — what a running `ringdump serve` tells `ringdump show` and `ringdump gc`.
//
// Each serving process writes, once a second, one small JSON file into the channel directory,
// named by its pid: "<channel_directory()>/ringdump-serve.<pid>.json", mode 0600, written to a
// temporary file and renamed over the last one (a reader sees a whole file or the previous one),
// removed when serve ends. It says which channels it serves and, per client, the frames sent and
// the frames dropped from the client's queue (per channel). The name cannot be a channel's file
// (those end in .lock and .sock), so list_channels() never sees it.
//
// Nothing in such a file is trusted: show opens it without following links, takes at most
// kMaxStatusBytes of a regular file, checks every field's type and range, and reports a file it
// cannot use instead of failing; the pid must be alive and have the start time the file says
// (a pid reused by another process makes the file stale). gc removes the stale ones.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringdump::serve_status {

inline constexpr const char* kFormat = "ringdump.serve.status/1";
inline constexpr std::size_t kMaxStatusBytes = 1U << 20;
inline constexpr std::size_t kMaxClients = 4096;
inline constexpr std::size_t kMaxChannels = 4096;

struct ClientChannel {
  std::string channel;
  std::uint64_t sent_frames = 0;
  std::uint64_t dropped_frames = 0;  // dropped from this client's queue (it read too slowly)
};

struct Client {
  std::uint64_t id = 0;
  std::uint64_t queued_frames = 0;
  std::vector<ClientChannel> channels;
};

struct ServedChannel {
  std::string name;
  std::uint64_t frames = 0;            // read by serve's observer
  std::uint64_t observer_dropped = 0;  // copies the producer overwrote while serve took them
  // Over every client since serve started, those gone included.
  std::uint64_t sent_frames = 0;
  std::uint64_t dropped_frames = 0;
};

struct Status {
  std::uint32_t pid = 0;
  std::uint64_t start_time = 0;  // the process's start, /proc/PID/stat field 22 (clock ticks)
  std::uint64_t updated_unix_ns = 0;
  std::string address;  // "http://127.0.0.1:8765/"
  std::vector<ServedChannel> channels;
  std::vector<Client> clients;
};

// One status file found in the channel directory.
struct Found {
  std::string path;
  std::uint32_t pid = 0;   // from the file's name
  bool pid_alive = false;  // a process of that pid exists (maybe another one: see state)
  enum class State { live, stale, malformed } state = State::malformed;
  std::string problem;  // stale or malformed: why
  std::optional<Status> status;
};

// This process's start time (/proc/self/stat); 0 when it cannot be read.
std::uint64_t start_time_of(std::uint32_t pid);

std::string path_for(std::uint32_t pid, const std::string& directory);
// Writes `s` as the file of s.pid (temporary file, fsync-free rename). Throws std::runtime_error
// naming the path and the errno text.
void write(const Status& s, const std::string& directory);
// Parses and validates a file's content; std::nullopt with `problem` set when it is malformed.
std::optional<Status> parse(const std::string& text, std::string& problem);
// Every ringdump-serve.<pid>.json in `directory`, read and classified. A directory that does not
// exist gives none.
std::vector<Found> scan(const std::string& directory);

// For `ringdump show NAME`: the live serve processes that serve channel `name` (from scan), and the
// files that could not be used. JSON: {"served_by": [...], "serve_status_problems": [...]};
// text: one paragraph per serving process, one line per client; empty when there is nothing.
nlohmann::ordered_json show_json(const std::vector<Found>& found, const std::string& name);
std::string show_text(const std::vector<Found>& found, const std::string& name);

}  // namespace ringdump::serve_status
