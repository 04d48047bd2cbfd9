// error.hpp — errors of the slow path (create, attach, inspect, remove). The hot path never throws:
// it reports through Result (result.hpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ipcring {

// Why a slow-path operation failed. The numeric values are stable (the Python module and the tools
// expose them).
enum class Errc : int {
  invalid_name = 1,       // empty, too long, a bad part (naming.hpp: validate_name)
  invalid_config = 2,     // zero slots, zero frame bytes, too many readers, sizing overflow ...
  not_found = 3,          // no such channel
  producer_exists = 4,    // a live producer already owns the channel
  version_mismatch = 5,   // segment of another layout version, type sizes or libc
  permission_denied = 6,  // owner or mode of the segment refuses us
  corrupt_segment = 7,    // a value read from the segment is out of range
  too_many_readers = 8,   // every reader entry is held by a live reader
  config_mismatch = 9,    // takeover with a geometry that live readers cannot follow
  system_error = 10,      // a system call failed (errno in the message)
  unsupported = 11,       // backend not built in, or not supported by this machine
  forked = 12,            // object used in a child process created by fork()
  invalid_argument = 13,  // caller broke a precondition (payload larger than capacity ...)
  channel_busy = 14,      // removal refused: live producer or readers
  cuda_error = 15,        // a CUDA call failed (the CUDA error name is in the message)
  not_ready = 16,         // the object at the name is not a finished segment (no magic)
  no_space = 17,          // /dev/shm cannot hold the channel (message: bytes needed and free)
};

const char* to_string(Errc code) noexcept;

// How messages spell values, in the library, the tools and the Python module alike.
// "ipcring: channel 'NAME': ", the start of every message about one channel.
std::string channel_prefix(std::string_view channel);
// A permission mode in octal, as chmod takes it: "0600", "02775".
std::string format_mode(std::uint32_t mode);
// "0x" and lower-case hex digits, at least `min_digits` of them: format_hex(10, 2) is "0x0a".
std::string format_hex(std::uint64_t value, int min_digits = 1);

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace ipcring
