// signals.hpp — SIGINT/SIGTERM set a flag that the tools' loops check, so they exit cleanly
// (summary printed, channel removed by the Producer's destructor).
#pragma once

#include <csignal>

namespace ipcring::tools {

inline volatile std::sig_atomic_t g_stop = 0;

inline void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = 1; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

inline bool stop_requested() {
  return g_stop != 0;
}

}  // namespace ipcring::tools
