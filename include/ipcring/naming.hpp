// naming.hpp — where a channel's name lives, and the inverse.
//
// A channel NAME lives in a channel directory DIR: DIR/NAME.lock, on which its producer holds an
// exclusive lock for its whole life, and DIR/NAME.sock, on which the producer hands the channel's
// memory out to the readers its policy allows. The memory itself has no name (sealed memfds,
// docs/protocol.md "Trust"). A NAME may contain '/' (ROS-style "camera/front/image_raw"): its
// leading components are subdirectories of DIR. Every other file asks this one for a path instead
// of spelling it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ipcring {

// The longest channel name, and the longest last component of one (the socket's address must fit
// a sockaddr_un: "/proc/self/fd/N/" + leaf + ".sock").
inline constexpr std::size_t kMaxNameLength = 200;
inline constexpr std::size_t kMaxLeafLength = 80;

// Checks a channel name: 1..200 characters, components of [A-Za-z0-9_.-] separated by '/', none
// empty, "." or "..", the last at most 80 characters. Throws Errc::invalid_name naming the part.
void validate_name(std::string_view name);

// The channel directory: `dir` when not empty, else $IPCRING_DIR when set and not empty, else
// /dev/shm/ipcring-<effective uid> (private to the user, created 0700 by the first producer).
std::string channel_directory(std::string_view dir = {});
// "<channel_directory(dir)>/<channel>.lock" and ".sock".
std::string lock_path(std::string_view channel, std::string_view dir = {});
std::string socket_path(std::string_view channel, std::string_view dir = {});
// The inverse: the channel whose lock file has this path relative to the directory
// ("camera/front.lock" -> "camera/front"), or nothing when it is not a valid channel's.
std::optional<std::string> channel_of_lock(std::string_view relative_path);

// Names of the channels in the channel directory (those with a lock file), sorted. Reads the
// directory only (no file is opened, nothing is followed).
std::vector<std::string> list_channels(std::string_view dir = {});

}  // namespace ipcring
