#pragma once
#include <cstdint>
#define IPCRING_VERSION_MAJOR 0
#define IPCRING_VERSION_MINOR 1
#define IPCRING_VERSION_PATCH 0
namespace ipcring {
inline constexpr const char* kVersion = "0.1.0";
// Layout version of the shared-memory segments this build creates and accepts.
std::uint32_t layout_version() noexcept;
}  // namespace ipcring
