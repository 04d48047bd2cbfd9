// naming.hpp (internal) — the pieces of the names, for the library's own use. The public
// functions (ipcring/naming.hpp) are built from these and nothing else spells them.
#pragma once

#include <string>
#include <string_view>

#include "ipcring/naming.hpp"

namespace ipcring::detail {

inline constexpr std::string_view kDefaultDirectoryBase = "/dev/shm/ipcring-";
inline constexpr std::string_view kDirectoryVariable = "IPCRING_DIR";
inline constexpr std::string_view kLockSuffix = ".lock";
inline constexpr std::string_view kSocketSuffix = ".sock";

// The last component of a (valid) channel name, and what precedes it ("" for a plain name).
std::string_view name_leaf(std::string_view channel) noexcept;
std::string_view name_parent(std::string_view channel) noexcept;

}  // namespace ipcring::detail
