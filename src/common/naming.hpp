// naming.hpp (internal) — the pieces of the object names, for the library's own use. The public
// functions (ipcring/naming.hpp) are built from these and nothing else spells them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ipcring/naming.hpp"

namespace ipcring::detail {

inline constexpr std::size_t kMaxNameLength = 200;  // NAME_MAX minus "ipcring." and a margin
inline constexpr std::string_view kShmDirectory = "/dev/shm";
inline constexpr std::string_view kObjectPrefix = "ipcring.";
inline constexpr std::string_view kLegacyFramesSuffix = ".frames";

// "/dev/shm/<object>" for an object name as shm_open takes it ("ipcring.<channel>").
std::string shm_path(std::string_view object);

}  // namespace ipcring::detail
