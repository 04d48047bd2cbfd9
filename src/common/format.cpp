// format.cpp — the spelling of values in messages (declared in ipcring/error.hpp).
#include <cstdio>
#include <string>

#include "ipcring/error.hpp"

namespace ipcring {

std::string channel_prefix(std::string_view channel) {
  return "ipcring: channel '" + std::string(channel) + "': ";
}

std::string format_mode(std::uint32_t mode) {
  char b[16];
  std::snprintf(b, sizeof b, "0%03o", static_cast<unsigned>(mode & 07777));
  return b;
}

std::string format_hex(std::uint64_t value, int min_digits) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%0*llx", min_digits, static_cast<unsigned long long>(value));
  return b;
}

}  // namespace ipcring
