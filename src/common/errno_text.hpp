// errno_text.hpp — thread-safe text of an errno value (strerror is not thread-safe).
#pragma once

#include <cstring>
#include <string>

namespace ipcring::detail {

inline std::string errno_text(int err) {
  char buffer[128];
  // GNU strerror_r: returns a pointer to the message (in `buffer` or a static string).
  const char* text = strerror_r(err, buffer, sizeof buffer);
  return std::string(text);
}

// "TEXT (errno N)", the form every message that reports a failed system call uses.
inline std::string errno_detail(int err) {
  return errno_text(err) + " (errno " + std::to_string(err) + ")";
}

}  // namespace ipcring::detail
