// naming.hpp — every name ipcring gives a shared-memory object, and the inverse.
//
// A channel NAME lives in one POSIX shared-memory object, /dev/shm/ipcring.NAME (control segment
// and frame pool at different offsets). Layout 2 and earlier also made ipcring.NAME.frames; this
// version never creates such a name, but lists and removes leftovers of it (ringdump gc). Every
// other file asks this one for a name instead of spelling it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ipcring {

// Checks a channel name: 1..200 characters of [A-Za-z0-9_-]. Throws Errc::invalid_name.
void validate_name(std::string_view name);

// "ipcring.<channel>": the shared-memory object of a channel (the name shm_open takes).
std::string object_name(std::string_view channel);
// "/dev/shm/ipcring.<channel>": where that object is seen in the file system.
std::string object_path(std::string_view channel);
// The inverse of object_name: the channel of an object name, or nothing when the object is not
// a channel's (another prefix, an empty channel, or a legacy frames object).
std::optional<std::string> channel_of_object(std::string_view object);

// "ipcring.<channel>.frames": the frame pool object of layout 2 and earlier.
std::string legacy_frames_object_name(std::string_view channel);
// "/dev/shm/ipcring.<channel>.frames".
std::string legacy_frames_object_path(std::string_view channel);
// The inverse: the channel of a legacy frames object name, or nothing.
std::optional<std::string> channel_of_legacy_frames(std::string_view object);

// Names of the channels present in /dev/shm (the objects object_name() gives), sorted.
std::vector<std::string> list_channels();
// Channels whose legacy frames object exists while their control object does not, sorted.
std::vector<std::string> list_orphaned_legacy_frames();

}  // namespace ipcring
